"""Pasquini et al. (2023) building blocks checked by hand: membership scores, the threshold advantage,
functional marginalisation, self-centred clipping against a per-edge loop."""

import math

import numpy as np
import pytest
import torch

from decpriv.attacks.p2p.neighbour_discovery import all_subsets, hadamard_log_ratio
from decpriv.attacks.p2p.neighbourhood import marginalise
from decpriv.attacks.p2p.scores import best_threshold_advantage, loss_score, modified_entropy
from decpriv.defenses.self_centred_clipping import SelfCentredClipping


def test_modified_entropy_by_hand():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float64))
    y = torch.tensor([0])
    eps = 1e-5
    expected = -(0.3) * math.log(0.7 + eps) - (0.2 * math.log(0.8 + eps) + 0.1 * math.log(0.9 + eps))
    assert float(modified_entropy(logits, y)) == pytest.approx(expected, rel=1e-12)
    assert float(loss_score(logits, y)) == pytest.approx(-math.log(0.7), rel=1e-12)
    # a confident correct prediction scores lower (more "member") than a confident wrong one
    right = modified_entropy(torch.tensor([[9.0, 0.0]]), torch.tensor([0]))
    wrong = modified_entropy(torch.tensor([[9.0, 0.0]]), torch.tensor([1]))
    assert right < wrong


def test_threshold_advantage_separable_and_mixed():
    members = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.1, 0.5, 0.9, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [True, True, True, False]])
    others = torch.tensor([[1.0, 2.0, 3.0], [0.1, 0.5, 0.9]], dtype=torch.float64)
    adv = best_threshold_advantage(members, mask, others, 150)
    assert float(adv[0]) == pytest.approx(0.5)  # perfectly separated (padding ignored)
    # identical score sets: best threshold gains 1/6 at most (one of three points split off)
    assert 0 <= float(adv[1]) <= 1 / 6 + 1e-12


def test_marginalisation_eq8_and_consensus_fixed_point():
    rng = torch.Generator().manual_seed(0)
    received = torch.randn(4, 5, generator=rng, dtype=torch.float64)  # |N(A)| = 4 updates, victim row 1
    k = torch.tensor(4.0, dtype=torch.float64)
    total = received.sum(0)
    others = (total - received[1]) / 4
    assert torch.allclose(marginalise(received[1], k, total), 4 * (received[1] - others))
    same = received[0].expand(4, -1)
    assert torch.allclose(
        marginalise(same[1], k, same.sum(0)), same[1]
    )  # consensus: no contribution to isolate


def test_subsets_and_hadamard_ratio():
    S = all_subsets(3)
    assert S.shape == (8, 3) and len({tuple(r.tolist()) for r in S}) == 8
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    orthogonal = torch.tensor([[3.0, 0.0], [0.0, 0.5]], dtype=torch.float64)
    assert hadamard_log_ratio(singular) == -math.inf
    assert float(hadamard_log_ratio(orthogonal)) == pytest.approx(0.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_self_centred_clipping_matches_edge_loop(sparse):
    rng = np.random.default_rng(1)
    n, p, tau = 6, 4, 0.7
    A = (rng.random((n, n)) < 0.5).astype(float)
    A = np.triu(A, 1)
    A = A + A.T + np.eye(n)
    W = A / A.sum(1, keepdims=True)
    x = torch.as_tensor(rng.normal(size=(n, p)))
    expected = torch.zeros_like(x)
    for v in range(n):
        for u in range(n):
            if W[v, u]:
                d = x[u] - x[v]
                expected[v] += (
                    W[v, u] * (x[v] + min(1.0, tau / float(d.norm())) * d) if d.norm() > 0 else W[v, u] * x[v]
                )
    Wt = torch.as_tensor(W)
    got = SelfCentredClipping(tau).aggregate(Wt.to_sparse_csr() if sparse else Wt, x)
    assert torch.allclose(got, expected, atol=1e-12)
    # a radius larger than every difference is plain gossip
    assert torch.allclose(SelfCentredClipping(1e9).aggregate(Wt, x), Wt @ x, atol=1e-12)
