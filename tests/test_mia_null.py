"""The batched membership statistics and their shuffled-membership null (decpriv/attacks/p2p/null.py):
agreement with scikit-learn and the per-model threshold scan, calibration on pure noise, power on a real
shift, and the balanced member / non-member sets."""

import numpy as np
import pytest
import torch
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score, roc_curve

from decpriv.attacks.p2p.mia import balanced_sets
from decpriv.attacks.p2p.null import mid_ranks, null_summary, shuffled_labels, statistics
from decpriv.attacks.p2p.scores import best_threshold_advantage


def padded_rows(rng, sizes, tied):
    """Rows of pooled scores (members first, then non-members) padded to one width with junk."""
    width = max(m + o for m, o in sizes)
    scores = torch.full((len(sizes), width), 1e9, dtype=torch.float64)  # padding: must be ignored
    valid = torch.zeros(len(sizes), width, dtype=torch.bool)
    labels = torch.zeros_like(valid)
    for k, (m, o) in enumerate(sizes):
        row = rng.integers(0, 6, m + o).astype(float) if tied else rng.normal(size=m + o)
        row[:m] -= 1.0 if tied else 0.7  # members score lower
        scores[k, : m + o] = torch.as_tensor(row, dtype=torch.float64)
        valid[k, : m + o] = True
        labels[k, :m] = True
    return scores, valid, labels


@pytest.mark.parametrize("tied", [False, True])
def test_batched_statistics_match_sklearn_and_the_threshold_scan(tied):
    rng = np.random.default_rng(0)
    sizes = [(30, 30), (12, 40), (50, 25), (5, 5)]
    scores, valid, labels = padded_rows(rng, sizes, tied)
    got = statistics(scores, valid, labels[:, None, :], 150)
    for k, (m, o) in enumerate(sizes):
        members, others = scores[k, :m], scores[k, m : m + o]
        y = np.r_[np.ones(m), np.zeros(o)]
        s = -np.r_[members.numpy(), others.numpy()]
        fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
        assert float(got["auc"][k, 0]) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert float(got["tpr_at_1pct_fpr"][k, 0]) == pytest.approx(tpr[fpr <= 0.01].max(), abs=1e-12)
        assert float(got["tpr_at_0.1pct_fpr"][k, 0]) == pytest.approx(tpr[fpr <= 0.001].max(), abs=1e-12)
        scan = best_threshold_advantage(members[None], torch.ones(1, m, dtype=torch.bool), others[None], 150)
        assert float(got["advantage"][k, 0]) == pytest.approx(float(scan[0]), abs=1e-6)  # scan: float32 TNR


def test_each_labelling_of_a_batch_matches_sklearn_members_anywhere():
    """B labellings of one row, members scattered through it and their counts unequal, 300 non-members
    and more (1% FPR allows 3 false positives): each is scored as scikit-learn scores it alone."""
    rng = np.random.default_rng(3)
    scores = torch.as_tensor(rng.integers(0, 400, size=(2, 330)).astype(float))  # ties
    valid = torch.ones(2, 330, dtype=torch.bool)
    labels = torch.as_tensor(rng.random((2, 6, 330)) < rng.uniform(0.02, 0.1, (2, 6, 1)))
    labels |= torch.as_tensor(rng.random((2, 6, 330)) < 0.5) & (scores < 40)[:, None, :]  # a signal
    got = statistics(scores, valid, labels, 150)
    for k in range(2):
        for b in range(6):
            y, s = labels[k, b].numpy(), -scores[k].numpy()
            fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
            assert float(got["auc"][k, b]) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
            assert float(got["tpr_at_1pct_fpr"][k, b]) == pytest.approx(tpr[fpr <= 0.01].max(), abs=1e-12)
            assert float(got["tpr_at_0.1pct_fpr"][k, b]) == pytest.approx(tpr[fpr <= 0.001].max(), abs=1e-12)
            alone = statistics(scores[k : k + 1], valid[k : k + 1], labels[k : k + 1, b : b + 1], 150)
            assert float(got["advantage"][k, b]) == float(alone["advantage"][0, 0])


def test_shuffled_labels_keep_counts_and_skip_padding():
    valid = torch.tensor([[True] * 6 + [False] * 2, [True] * 8])
    labels = torch.tensor([[True] * 3 + [False] * 5, [True] * 2 + [False] * 6])
    drawn = shuffled_labels(labels, valid, 4000, torch.Generator().manual_seed(1))
    assert drawn.shape == (2, 4000, 8)
    assert (drawn.sum(-1) == torch.tensor([[3], [2]])).all() and not drawn[0, :, 6:].any()
    # each valid slot is a member with probability count / valid slots
    assert drawn[0, :, :6].double().mean(0).sub(0.5).abs().max() < 0.04
    assert drawn[1].double().mean(0).sub(0.25).abs().max() < 0.04


def test_null_is_calibrated_on_noise_and_rejects_a_real_shift():
    """37 members vs 37 non-members (a torus-36 node's digits): pure noise reaches a best-threshold
    advantage of ~0.06 on average, which the null reproduces; a 1.2-sd shift is above it."""
    rng = np.random.default_rng(2)
    m, rows = 37, 200
    noise = torch.as_tensor(rng.normal(size=(rows, 2 * m)))
    valid = torch.ones_like(noise, dtype=torch.bool)
    labels = torch.arange(2 * m).expand(rows, -1) < m
    gen = torch.Generator().manual_seed(3)
    observed = statistics(noise, valid, labels[:, None, :], 150)
    null = statistics(noise, valid, shuffled_labels(labels, valid, 200, gen), 150)
    for name in ("advantage", "auc"):
        summary = null_summary(observed[name][:, 0].numpy(), null[name].numpy())
        # noise is what the null describes: its mean matches, p-values are uniform (conservative for the
        # advantage, whose values are multiples of 1/(2m) and so often tie with the draws)
        assert observed[name].mean() == pytest.approx(summary["null_mean"].mean(), abs=0.015)  # 3 s.e.
        assert 0.0 < (summary["p_value"] <= 0.05).mean() < 0.08
        assert 0.45 < summary["p_value"].mean() < 0.65
    assert 0.04 < float(observed["advantage"].mean()) < 0.08
    shifted = noise.clone()
    shifted[:, :m] -= 1.2
    observed = statistics(shifted[:20], valid[:20], labels[:20, None, :], 150)
    null = statistics(shifted[:20], valid[:20], shuffled_labels(labels[:20], valid[:20], 200, gen), 150)
    for name in ("advantage", "auc"):
        hi = null_summary(observed[name][:, 0].numpy(), null[name].numpy())["null_hi"]
        assert (observed[name][:, 0].numpy() > hi).mean() > 0.8


def test_balanced_sets_are_equal_sized_uniform_and_reproducible():
    counts = np.array([5, 8, 8, 3])
    members, outside, mask = balanced_sets(counts, 6, np.random.default_rng(0))
    again = balanced_sets(counts, 6, np.random.default_rng(0))
    assert all(torch.equal(a, b) for a, b in zip((members, outside, mask), again, strict=True))
    assert members.sum(1).tolist() == [5, 6, 6, 3] == mask.sum(1).tolist()  # capped by the 6 test samples
    slots = torch.arange(members.shape[1])
    assert not (members & (slots >= torch.as_tensor(counts)[:, None])).any()  # never a padding slot
    for row, keep in zip(outside, mask, strict=True):
        chosen = row[keep]
        assert len(set(chosen.tolist())) == len(chosen) and chosen.max() < 6


def test_mid_ranks_equal_scipys_average_ranks_with_ties_and_padding():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (4, 30), generator=g).double()  # many ties
    scores[1, 20:] = torch.inf  # padding sorts last, tied
    order = scores.argsort(dim=1, stable=True)
    expected = torch.as_tensor(rankdata(scores.numpy(), axis=1, method="average"))
    assert torch.equal(mid_ranks(scores.gather(1, order), order), expected)


def test_the_full_pool_keeps_every_member_and_every_held_out_sample():
    """non_members=all: each node's whole training set against the whole test set, no draw."""
    counts = np.array([3, 5, 1])
    members, outside, mask = balanced_sets(counts, 6, np.random.default_rng(0), pool="all")
    assert members.sum(1).tolist() == [3, 5, 1] and mask.all() and mask.shape == (3, 6)
    assert (outside == torch.arange(6)).all()


@pytest.mark.parametrize("pool", ["balanced", "all"])
def test_the_victims_sets_are_the_rows_of_every_nodes_sets(pool):
    """Built for the victims alone (bounded memory: not a nodes x held-out array), the sets are those
    rows of the sets built for every node, drawn from the same stream, whatever the block size."""
    from decpriv.attacks.p2p import mia

    counts, victims = np.array([5, 8, 8, 3, 7, 2, 9]), np.array([1, 4, 6])
    every = balanced_sets(counts, 6, np.random.default_rng(0), pool)
    mine = balanced_sets(counts, 6, np.random.default_rng(0), pool, victims)
    for whole, rows in zip(every, mine, strict=True):
        assert torch.equal(whole[victims], rows)
    small_blocks = mia.DRAW_BLOCK
    try:
        mia.DRAW_BLOCK = 7  # one row of held-out keys a block
        again = balanced_sets(counts, 6, np.random.default_rng(0), pool, victims)
    finally:
        mia.DRAW_BLOCK = small_blocks
    assert all(torch.equal(a, b) for a, b in zip(mine, again, strict=True))


def test_scoring_a_victim_group_at_a_time_gives_the_same_table(tmp_path, monkeypatch):
    """The relabellings are drawn a few victims at a time (a thousand neighbours of one node held them all
    at once: 50 GB): with one victim a group the mia table is the one of a single group, null included."""
    import pandas as pd

    from decpriv.attacks.p2p import mia
    from decpriv.cli import main

    monkeypatch.chdir(tmp_path)
    line = ["run", "topology=complete", "topology.n=8", "protocol.rounds=2", "plots=false"]
    assert main([*line, "hydra.run.dir=one"]) == 0
    monkeypatch.setattr(mia, "MIA_MEMORY", 1)  # one tested model and one victim a chunk
    assert main([*line, "hydra.run.dir=many"]) == 0
    one, many = pd.read_csv("one/mia.csv"), pd.read_csv("many/mia.csv")
    assert one.victim.nunique() == 7
    pd.testing.assert_frame_equal(one, many)
