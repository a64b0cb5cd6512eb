"""decpriv's robust rules and Byzantine vectors against ByzFL (Allouah et al. 2025), the field's library, on
random inputs with f Byzantine among n: every row of a ragged batch of neighbourhoods equals ByzFL's call
on that row's vectors alone; and against hand-solved cases and the edge-loop self-centred clipping."""

import numpy as np
import pytest
import torch

from decpriv.adversary.behaviour import Forgery
from decpriv.adversary.recorder import Recorder
from decpriv.attacks.poisoning import vectors
from decpriv.defenses import robust_rules as rules
from decpriv.defenses.neighbourhoods import Inbox
from decpriv.defenses.robust import CentredClipping, CoordinateMedian, Krum, MultiKrum, TrimmedMean
from decpriv.defenses.self_centred_clipping import SelfCentredClipping

byzfl = pytest.importorskip("byzfl")


def ragged(seed: int, sizes=(5, 7, 9, 6), p: int = 4):
    """A padded batch: row v holds sizes[v] random vectors (f = sizes // 3 of them far off, Byzantine)."""
    g = np.random.default_rng(seed)
    width = max(sizes)
    x = np.zeros((len(sizes), width, p))
    valid = np.zeros((len(sizes), width), dtype=bool)
    for v, m in enumerate(sizes):
        honest = g.normal(size=(m, p))
        honest[: m // 3] = g.normal(10, 5, size=(m // 3, p))  # the Byzantine ones
        x[v, :m] = honest
        x[v, m:] = g.normal(size=(width - m, p)) * 1e6  # padding must never be read
        valid[v, :m] = True
    return torch.as_tensor(x), torch.as_tensor(valid), sizes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rules_equal_byzfl_row_by_row(seed):
    x, valid, sizes = ragged(seed)
    f = [m // 3 for m in sizes]
    got = {
        "median": rules.median(x, valid),
        "trmean": rules.trimmed_mean(x, valid, torch.tensor(f)),
        "krum": torch.stack([rules.krum(x[v : v + 1], valid[v : v + 1], f[v])[0] for v in range(len(sizes))]),
        "multikrum": torch.stack(
            [rules.multi_krum(x[v : v + 1], valid[v : v + 1], f[v])[0] for v in range(len(sizes))]
        ),
        "cc": rules.centred_clipping(x, valid, torch.zeros(len(sizes), x.shape[2], dtype=x.dtype), 2.0, 3),
    }
    for v, m in enumerate(sizes):
        rows = x[v, :m].numpy()
        want = {
            "median": byzfl.Median()(rows),
            "trmean": byzfl.TrMean(f=f[v])(rows),
            "krum": byzfl.Krum(f=f[v])(rows),
            "multikrum": byzfl.MultiKrum(f=f[v])(rows),
            "cc": byzfl.CenteredClipping(tau=2.0, L=3)(rows),
        }
        for name, value in want.items():
            np.testing.assert_allclose(got[name][v].numpy(), value, rtol=1e-10, atol=1e-10, err_msg=name)


def test_krum_batch_equals_krum_per_row_with_one_f():
    x, valid, sizes = ragged(3, sizes=(6, 8, 7))
    batch = rules.krum(x, valid, 1)
    for v, m in enumerate(sizes):
        np.testing.assert_allclose(batch[v].numpy(), byzfl.Krum(f=1)(x[v, :m].numpy()))
    multi = rules.multi_krum(x, valid, 1)
    for v, m in enumerate(sizes):
        np.testing.assert_allclose(multi[v].numpy(), byzfl.MultiKrum(f=1)(x[v, :m].numpy()))


def test_trimmed_mean_and_median_by_hand():
    x = torch.tensor([[[1.0], [100.0], [2.0], [3.0], [-50.0]]], dtype=torch.float64)
    valid = torch.ones(1, 5, dtype=torch.bool)
    assert rules.trimmed_mean(x, valid, torch.tensor([1])).item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert rules.median(x, valid).item() == 2.0
    assert rules.median(x[:, :4], valid[:, :4]).item() == pytest.approx(2.5)  # (2 + 3) / 2


@pytest.mark.parametrize("seed", [0, 1])
def test_attack_vectors_equal_byzfl(seed):
    honest = np.random.default_rng(seed).normal(size=(7, 5))
    t = torch.as_tensor(honest)
    mean, std = vectors.masked_moments(t, torch.ones(1, 7, dtype=torch.bool))
    np.testing.assert_allclose(vectors.sign_flip(mean, std, 1.0)[0].numpy(), byzfl.SignFlipping()(honest))
    np.testing.assert_allclose(
        vectors.ipm(mean, std, 0.5)[0].numpy(), byzfl.InnerProductManipulation(tau=0.5)(honest)
    )
    np.testing.assert_allclose(
        vectors.alie(mean, std, 1.5)[0].numpy(), byzfl.ALittleIsEnough(tau=1.5)(honest)
    )


def test_alie_z_max_by_hand():
    # Baruch et al. 2019: n = 50, f = 12 -> s = 14, z = Phi^-1(36 / 50) = 0.5828...
    assert vectors.alie_z(50, 12) == pytest.approx(0.58284, abs=1e-4)


def ring(n: int) -> torch.Tensor:
    W = np.zeros((n, n))
    for v in range(n):
        W[v, v] = W[v, (v + 1) % n] = W[v, (v - 1) % n] = 1 / 3
    return torch.as_tensor(W)


def test_fixed_radius_clipped_gossip_is_self_centred_clipping():
    W = ring(6)
    msgs = torch.as_tensor(np.random.default_rng(0).normal(size=(6, 3)))
    hood = Inbox.of(W)
    (group,) = hood.groups
    got = rules.clipped_gossip(hood.received(msgs)[0], group.weight, msgs, 0.5)
    np.testing.assert_allclose(got.numpy(), SelfCentredClipping(tau=0.5).aggregate(W, msgs).numpy())


def test_forged_message_lands_on_its_edge_only():
    """Node 0 sends node 1 a forged value and node 5 its honest one: only node 1's median moves."""
    W = ring(6)
    msgs = torch.arange(6, dtype=torch.float64)[:, None].repeat(1, 2)
    hood = Inbox.of(W)
    valid = hood.groups[0].valid
    forged = Forgery(np.array([0]), np.array([1]), torch.full((1, 2), 100.0, dtype=torch.float64))
    plain = rules.median(hood.received(msgs)[0], valid)
    attacked = rules.median(hood.received(msgs, forged)[0], valid)
    assert torch.equal(plain[0], attacked[0]) and torch.equal(plain[5], attacked[5])
    # node 1 hears {100 (from 0, forged), 1, 2}: median 2, not the honest 1
    assert attacked[1].tolist() == [2.0, 2.0] and plain[1].tolist() == [1.0, 1.0]


def test_neighbourhoods_of_sparse_and_dense_agree():
    W = ring(7)
    (dense,) = Inbox.of(W).groups
    (sparse,) = Inbox.of(W.to_sparse_csr()).groups
    assert torch.equal(dense.index, sparse.index) and torch.equal(dense.valid, sparse.valid)
    assert dense.size.tolist() == [3] * 7


@pytest.mark.parametrize(
    "defense, oracle",
    [
        (CoordinateMedian(), lambda: byzfl.Median()),
        (TrimmedMean(fraction=0.25), lambda: byzfl.TrMean(f=2)),  # floor(0.25 * 8) = 2
        (Krum(f=2), lambda: byzfl.Krum(f=2)),
        (MultiKrum(f=2), lambda: byzfl.MultiKrum(f=2)),
    ],
)
def test_fedavg_server_round_equals_byzfl_on_the_chosen_updates(defense, oracle):
    updates = torch.as_tensor(np.random.default_rng(5).normal(size=(12, 6)))
    chosen = torch.tensor([0, 2, 3, 5, 7, 8, 10, 11])
    weights, held = torch.ones(12, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    off = Recorder.broadcast(np.zeros(0, dtype=np.int64), False)
    got = defense.federate(updates, weights, chosen, held, off, 0)
    np.testing.assert_allclose(got.numpy(), oracle()(updates[chosen].numpy()), rtol=1e-12)


def test_fedavg_centred_clipping_is_centred_on_the_global_model():
    updates = torch.as_tensor(np.random.default_rng(6).normal(size=(5, 3)))
    held = torch.full((3,), 0.5, dtype=torch.float64)
    off = Recorder.broadcast(np.zeros(0, dtype=np.int64), False)
    got = CentredClipping(tau=0.3).federate(updates, torch.ones(5), torch.arange(5), held, off, 0)
    pulled = updates - held
    pulled = pulled * (0.3 / pulled.norm(dim=1, keepdim=True)).clamp(max=1.0)
    np.testing.assert_allclose(got.numpy(), (held + pulled.mean(0)).numpy(), rtol=1e-12)


def test_norm_bounding_without_noise_is_fixed_radius_clipped_gossip():
    from decpriv.defenses.norm_bounding import NormBounding

    W = ring(6)
    msgs = torch.as_tensor(np.random.default_rng(1).normal(size=(6, 3)))
    got = NormBounding(bound=0.4, sigma=0.0).receive(W, msgs, None)
    np.testing.assert_allclose(
        got.numpy(), SelfCentredClipping(tau=0.4).aggregate(W, msgs).numpy(), rtol=1e-12
    )


def test_norm_bounding_by_hand_and_its_noise():
    """Node 1 of a ring hears 0 (at +10 e1), itself and 2 (at 0), weights 1/3: bounded to norm 1, it moves
    by e1 / 3. With sigma the step adds N(0, sigma^2) per coordinate (std within 3% over 6000 draws)."""
    from decpriv.defenses.norm_bounding import NormBounding

    msgs = torch.zeros(6, 2, dtype=torch.float64)
    msgs[0, 0] = 10.0
    assert NormBounding(bound=1.0, sigma=0.0).receive(ring(6), msgs, None)[1].tolist() == pytest.approx(
        [1 / 3, 0]
    )
    noisy = NormBounding(bound=1.0, sigma=0.5)
    noisy._noise = torch.Generator().manual_seed(0)  # bind's stream: defense.norm_bounding
    wide = torch.zeros(6, 1000, dtype=torch.float64)
    spread = noisy.receive(ring(6), wide, None).std().item()
    assert spread == pytest.approx(0.5, rel=0.03)


def test_a_neighbourhood_over_the_memory_bound_is_refused_in_a_sentence():
    from decpriv.errors import ConfigError

    with pytest.raises(ConfigError, match="a node hears 40000 senders.*24.4 GB.*at most 15891 senders"):
        Krum(f=1).check_memory(40_000, 1000, 4)
    CoordinateMedian().check_memory(10_000, 1000, 4)  # a star of 10^4 at p = 1000: 160 MB
    with pytest.raises(ConfigError, match="at most 268435 senders"):  # 4 x 2^30 / (4 x 1000 x 4)
        CoordinateMedian().check_memory(10**6, 1000, 4)
