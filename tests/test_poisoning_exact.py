"""The robust rules exact at any width and dtype, ALIE's vector and z defined for every neighbourhood, and
memory by edges (docs/poisoning.md): against ByzFL (Allouah et al. 2025) in float64 on near-agreeing
models, where float32 formulas that cancel choose wrong."""

import networkx as nx
import numpy as np
import pytest
import torch

from decpriv.attacks.poisoning import vectors
from decpriv.attacks.poisoning.model_poisoning import FALLBACK_Z, default_z
from decpriv.defenses import robust_rules as rules
from decpriv.defenses.neighbourhoods import CPU_BLOCK_BYTES, Inbox
from decpriv.defenses.robust import CoordinateMedian, MultiKrum, TrimmedMean
from decpriv.graphs.gossip_matrix import metropolis_hastings

byzfl = pytest.importorskip("byzfl")


def near_agreement(seed: int, m: int, f: int, p: int = 64) -> np.ndarray:
    """m models near agreement (a common model of norm ~10^4, honest spread 10^-3), the first f Byzantine
    at 10^-1 from it: squared norms ~10^8 against squared distances ~10^-4 and ~1, which float32's
    ||a||^2 + ||b||^2 - 2 a.b (resolution ~10 at 10^8) cannot tell apart."""
    g = np.random.default_rng(seed)
    common = g.normal(size=p) * 1000
    x = common + 1e-3 * g.normal(size=(m, p))
    x[:f] = common + 0.1 * g.normal(size=(f, p))
    return x


@pytest.mark.parametrize("seed", range(4))
def test_multi_krum_float32_past_25_slots_equals_byzfl_float64(seed):
    """40 senders, 8 Byzantine: torch.cdist's matrix-product formula (used above 25 rows) kept Byzantine
    vectors in 10-23 of 60 draws (issue 55); the differences keep none, as ByzFL in float64."""
    m, f = 40, 8
    x = near_agreement(seed, m, f)
    t = torch.as_tensor(x, dtype=torch.float32)[None]
    valid = torch.ones(1, m, dtype=torch.bool)
    scores = rules.krum_scores(t, valid, f)[0]
    kept = set(scores.argsort()[: m - f].tolist())
    assert kept.isdisjoint(range(f))
    want = byzfl.MultiKrum(f=f)(x)
    np.testing.assert_allclose(rules.multi_krum(t, valid, f)[0].double().numpy(), want, rtol=0, atol=1e-3)
    assert (rules.krum(t, valid, f)[0] == t[0, f:]).all(1).any()  # an honest vector


def test_seven_sender_node_in_a_padded_batch_equals_byzfl():
    """A row of 7 real senders padded to 40 slots (the old layout padded every node to the widest): its
    Krum and Multi-Krum are ByzFL's on its 7 vectors alone."""
    wide, small = near_agreement(7, 40, 8), near_agreement(8, 7, 2)
    x = np.zeros((2, 40, wide.shape[1]))
    x[0], x[1, :7], x[1, 7:] = wide, small, small[3]  # the padding repeats a real vector
    valid = torch.zeros(2, 40, dtype=torch.bool)
    valid[0], valid[1, :7] = True, True
    t = torch.as_tensor(x, dtype=torch.float32)
    got = rules.multi_krum(t, valid, 2)[1].double().numpy()
    np.testing.assert_allclose(got, byzfl.MultiKrum(f=2)(small), rtol=0, atol=1e-3)
    assert (rules.krum(t, valid, 2)[1] == t[1, 2:7]).all(1).any()


def test_trimmed_mean_keeps_the_honest_digits_beside_a_far_value():
    """The kept values are summed, not the whole sum less the extremes: beside 1e8 in float32 the honest
    mean (1 + 2 + 3) / 3 stays 2 exactly."""
    x = torch.tensor([[[1.0], [1e8], [2.0], [3.0], [-1e8]]], dtype=torch.float32)
    assert rules.trimmed_mean(x, torch.ones(1, 5, dtype=torch.bool), torch.tensor([1])).item() == 2.0


@pytest.mark.parametrize("sizes", [(9, 9, 9), (5, 8, 6, 7), (12, 3, 16)])
def test_partial_selection_trimmed_mean_equals_byzfl(sizes):
    """Ragged rows (padding among the largest), trim 1-3: the bubble passes select what a sort would."""
    g = np.random.default_rng(sum(sizes))
    width = max(sizes)
    x = torch.as_tensor(g.normal(size=(len(sizes), width, 5)))
    valid = torch.arange(width)[None, :] < torch.tensor(sizes)[:, None]
    trim = torch.tensor([max(1, m // 5) for m in sizes])
    got = rules.trimmed_mean(x, valid, trim)
    for v, m in enumerate(sizes):
        want = byzfl.TrMean(f=int(trim[v]))(x[v, :m].numpy())
        np.testing.assert_allclose(got[v].numpy(), want, rtol=1e-12, atol=1e-12)


def test_alie_standard_deviation_is_two_pass():
    """Models equal to 1 + 1e-7 noise: one-pass E[x^2] - mean^2 loses every digit of the variance (1e-14
    against 1 in float64); the two-pass std is numpy's, and ALIE's vector ByzFL's."""
    g = np.random.default_rng(0)
    honest = 1 + 1e-7 * g.normal(size=(9, 6))
    mask = torch.tensor([[True] * 9, [True] * 4 + [False] * 5])
    mean, std = vectors.masked_moments(torch.as_tensor(honest), mask)
    np.testing.assert_allclose(std[0].numpy(), honest.std(0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(std[1].numpy(), honest[:4].std(0, ddof=1), rtol=1e-6)
    got = vectors.alie(mean, std, 1.5)[0].numpy()
    np.testing.assert_allclose(got - 1, byzfl.ALittleIsEnough(tau=1.5)(honest) - 1, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", range(2, 41))
def test_alie_z_positive_finite_or_none_for_every_f(n):
    for f in range(1, n):
        z = vectors.alie_z(n, f)
        assert z is None or 0 < z < float("inf")
    assert vectors.alie_z(n, 1) is None if n % 2 == 0 else vectors.alie_z(n, 1) > 0


def network(graph: nx.Graph):
    W = metropolis_hastings(graph)
    return W, nx.to_scipy_sparse_array(graph, format="csr")


@pytest.mark.parametrize(
    "graph, attackers, z, rule",
    [
        (nx.cycle_graph(16), [0, 2], 0.430727, "Baruch"),  # node 1 (f = 2 of 3) has none; 3 and 15 do
        (nx.complete_graph(16), [0], FALLBACK_Z, "ByzFL"),  # 16 senders, one Byzantine: z_max = 0
        (nx.star_graph(9), [0], FALLBACK_Z, "ByzFL"),  # a hub beside each leaf: 2 senders, one Byzantine
        (nx.complete_graph(15), [0], 0.0836, "Baruch"),  # s = 7, Phi^-1(8 / 15)
    ],
)
def test_alie_default_z_is_stated_where_the_formula_degenerates(graph, attackers, z, rule):
    W, adjacency = network(graph)
    got, said = default_z(W, adjacency, np.array(attackers))
    assert got == pytest.approx(z, abs=1e-4) and said.startswith(rule)


def star(n: int) -> torch.Tensor:
    W = metropolis_hastings(nx.star_graph(n - 1))
    return torch.sparse_csr_tensor(
        torch.as_tensor(W.indptr), torch.as_tensor(W.indices), torch.as_tensor(W.data), W.shape
    )


def test_star_of_ten_thousand_is_stored_by_edges():
    """A star of 10^4: two groups (leaves of 2 senders, the hub of 10^4), 3 x 10^4 slots in all where the
    old layout padded every node to 10^4 (10^8 slots), and no block above the cache budget but the hub's
    own row."""
    inbox = Inbox.of(star(10_000))
    assert sorted(g.index.shape[1] for g in inbox.groups) == [2, 10_000]
    assert sum(g.index.numel() for g in inbox.groups) == 2 * 9_999 + 10_000
    x = torch.randn(10_000, 16)
    widest = max(x.numel() * x.element_size() for _, x in inbox.blocks(x) if x.shape[1] == 2)
    assert widest <= CPU_BLOCK_BYTES


@pytest.mark.parametrize("defense", [CoordinateMedian(), TrimmedMean(fraction=0.2), MultiKrum(f=1)])
def test_power_law_graph_by_buckets_equals_rows_one_by_one(defense):
    """A Barabasi-Albert graph (degrees 5 to ~100): every node's aggregate through the degree buckets
    equals the rule on its own row alone."""
    graph = nx.barabasi_albert_graph(400, 5, seed=0)
    W = torch.as_tensor(metropolis_hastings(graph).toarray())
    x = torch.randn(400, 7, dtype=torch.float64)
    got = defense.receive(W, x, None)
    inbox = Inbox.of(W)
    assert len(inbox.groups) <= 6  # buckets of sizes (4, 8], (8, 16], ..., not one per degree
    for v in [0, 1, 17, 399]:
        senders = torch.nonzero(W[v]).flatten()
        alone = torch.ones(1, len(senders), dtype=torch.bool)
        want = defense.rule(x[senders][None], _row(senders, alone), x[v : v + 1])[0]
        torch.testing.assert_close(got[v], want, rtol=1e-12, atol=1e-12)


def _row(senders, valid):
    from decpriv.defenses.neighbourhoods import Neighbourhoods

    return Neighbourhoods(
        torch.zeros(1, dtype=torch.long), senders[None], valid, valid.double(), valid.sum(1)
    )


def test_forgeries_land_in_their_block(monkeypatch):
    """One row per block (a 1-byte budget): forged messages to nodes 1, 3 and 5 of a ring, from 0, 2 and 4,
    land on their edges in their own blocks, as in one block of every row."""
    from decpriv.adversary.behaviour import Forgery
    from decpriv.defenses import neighbourhoods

    W = torch.as_tensor(metropolis_hastings(nx.cycle_graph(6)).toarray())
    x = torch.randn(6, 4, dtype=torch.float64)
    forged = Forgery(np.array([0, 2, 4]), np.array([1, 3, 5]), torch.randn(3, 4, dtype=torch.float64) * 100)
    whole = CoordinateMedian().receive(W, x, forged)
    monkeypatch.setattr(neighbourhoods, "CPU_BLOCK_BYTES", 1)
    inbox = Inbox.of(W)
    assert len(list(inbox.blocks(x))) == 6
    rows = CoordinateMedian().receive(W, x, forged)
    assert torch.equal(whole, rows)
    for v, sender, value in zip([1, 3, 5], [0, 2, 4], forged.values, strict=True):
        block = next(x_ for b, x_ in inbox.blocks(x, forged) if int(b.nodes[0]) == v)
        slot = int(torch.nonzero(inbox.groups[0].index[v] == sender))
        assert torch.equal(block[0, slot], value)
