"""Accountants: SecLDP reference values (DECOR), RDP via dp-accounting, Muffliato pairwise network DP."""

import itertools
import math
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from decpriv.graphs.gossip_matrix import metropolis_hastings
from decpriv.graphs.network import Network
from decpriv.privacy.network_dp import gossip_operators, pairwise_loss
from decpriv.privacy.random_walk import random_walk_loss, walk_log_matrix
from decpriv.privacy.rdp import calibrate_noise_multiplier, gaussian_epsilon
from decpriv.privacy.secldp_bounds import (
    algebraic_connectivity,
    calibrate_sigma_cor,
    epsilon_from_slope,
    node_slopes,
    precision_diagonal,
    slope_for_epsilon,
    theorem1_bound,
    threat_bound,
    worst_slopes,
)


def adjacency(graph: nx.Graph) -> sp.csr_array:
    return sp.csr_array(nx.to_scipy_sparse_array(nx.convert_node_labels_to_integers(graph)), dtype=float)


COMPLETE, TORUS, RING = (
    adjacency(nx.complete_graph(16)),
    adjacency(nx.grid_2d_graph(4, 4, periodic=True)),
    adjacency(nx.cycle_graph(16)),
)


def test_secldp_reference_slope_complete_graph():
    """DECOR reference result: complete n=16, sigma_cdp=11.1495, sigma_cor=16, C=1 -> slope 0.0014498."""
    assert node_slopes(COMPLETE, 11.1495, 16.0, 1.0).max() == pytest.approx(0.0014498, abs=5e-8)


def test_algebraic_connectivities():
    assert algebraic_connectivity(COMPLETE) == pytest.approx(16.0)
    assert algebraic_connectivity(TORUS) == pytest.approx(2.0)
    assert algebraic_connectivity(RING) == pytest.approx(0.1522, abs=1e-4)


def test_precision_diagonal_closed_form_on_complete_graph_and_dense_inverse_elsewhere():
    n, s, c = 16, 3.0, 5.0
    closed = 1 / (n * s**2) + (n - 1) / n / (s**2 + n * c**2)  # eigen-decomposition of s^2 I + c^2 (nI - J)
    certified = precision_diagonal(COMPLETE, s, c)
    assert np.all(certified >= closed)  # an upper bound, within its certificate's 1e-9
    np.testing.assert_allclose(certified, closed, rtol=1e-9)
    graph = adjacency(nx.erdos_renyi_graph(30, 0.2, seed=3))
    L = np.diag(graph.sum(1)) - graph.toarray()
    dense = np.diag(np.linalg.inv(s**2 * np.eye(30) + c**2 * L))
    np.testing.assert_allclose(precision_diagonal(graph, s, c), dense, rtol=1e-9)


def test_theorem1_exact_on_complete_looser_on_sparse_graphs():
    grid = np.geomspace(1, 1000, 40)

    def worst_ratio(A):
        a = algebraic_connectivity(A)
        return max(
            theorem1_bound(16, a, 11.1495, c, 1.0) / node_slopes(A, 11.1495, c, 1.0).max() for c in grid
        )

    for c in grid:
        exact = node_slopes(COMPLETE, 11.1495, c, 1.0).max()
        assert theorem1_bound(16, 16.0, 11.1495, c, 1.0) == pytest.approx(exact, rel=1e-9)
    ring, torus = worst_ratio(RING), worst_ratio(TORUS)
    assert 2.6 < ring < 3.0  # "about 2.8x loose on the ring"
    assert 1.3 < torus < 1.6  # "1.4x on the torus"


def test_conversion_round_trip_and_optimal_order_formula():
    for eps in (1.0, 10.0, 40.0):
        c = slope_for_epsilon(eps, 3500, 1e-5)
        assert epsilon_from_slope(c, 3500, 1e-5) == pytest.approx(eps, rel=1e-12)
        # the closed form is the minimum over alpha of T alpha c + log(1/delta)/(alpha - 1)
        alphas = np.linspace(1.001, 2000, 400000)
        assert np.min(3500 * alphas * c + math.log(1e5) / (alphas - 1)) == pytest.approx(eps, rel=1e-5)


def test_epsilon_monotone_in_sigma_cor_and_threats_ordered():
    slopes = [worst_slopes(RING, 10.0, c, 1.0, "eavesdropper").max() for c in np.geomspace(0.1, 1e3, 30)]
    assert np.all(np.diff(slopes) <= 1e-15)
    assert slopes[0] == pytest.approx(2 / 10.0**2, rel=1e-3)  # sigma_cor -> 0: LDP level 2 C^2 / sigma_cdp^2
    eaves = worst_slopes(TORUS, 10.0, 20.0, 1.0, "eavesdropper").max()
    curious = worst_slopes(TORUS, 10.0, 20.0, 1.0, "curious").max()
    colluding = worst_slopes(TORUS, 10.0, 20.0, 1.0, "collusion", 3).max()
    assert eaves < curious < colluding < 2 / 10.0**2


def test_calibrated_sigma_cor_meets_target_slope():
    target = slope_for_epsilon(10.0, 3500, 1e-5)
    sigma_cdp = 1.2 * math.sqrt(2 / target) / 4
    cor = calibrate_sigma_cor(RING, sigma_cdp, 1.0, target, "eavesdropper", 1)
    assert worst_slopes(RING, sigma_cdp, cor, 1.0, "eavesdropper").max() == pytest.approx(target, rel=1e-8)


def test_rdp_gaussian_matches_analytic_bound_and_subsampling_helps():
    z, T, delta = 4.0, 100, 1e-5
    eps, order = gaussian_epsilon(z, T, delta)
    alphas = np.linspace(1.01, 200, 100000)
    analytic = np.min(T * alphas / (2 * z**2) + math.log(1 / delta) / (alphas - 1))
    assert 0.8 * analytic < eps <= analytic * (1 + 1e-9)  # dp-accounting's conversion is tighter
    assert gaussian_epsilon(z, T, delta, rate=0.1)[0] < eps < gaussian_epsilon(z, 4 * T, delta)[0]
    sigma = calibrate_noise_multiplier(3.0, delta, 200, 0.05, 1.0)
    assert gaussian_epsilon(sigma, 200, delta, 0.05)[0] == pytest.approx(3.0, rel=1e-6)


def loop_pairwise_loss(W: np.ndarray, A: np.ndarray, K: int, level: float) -> np.ndarray:
    """The Muffliato sum written pair by pair (independent path for the vectorised version)."""
    n = len(W)
    F = np.zeros((n, n))
    for u in range(n):
        for v in range(n):
            if u == v:
                continue
            total = 0.0
            M = np.eye(n)
            for _ in range(K):
                for w in np.flatnonzero(A[v]):
                    total += M[w, u] ** 2 / np.sum(M[w] ** 2)
                M = W @ M
            F[u, v] = min(level * total, level)
    return F


def test_network_dp_vectorised_equals_pairwise_loop_and_k0_term_is_ldp_level():
    net = Network.build(nx.random_regular_graph(3, 10, seed=1), metropolis_hastings)
    level = 10 * 2 / 3.0**2  # alpha Delta^2 / (2 sigma^2 C^2), Delta = 2C
    F = pairwise_loss(net.W, net.adjacency, 4, level)
    np.testing.assert_allclose(
        F, loop_pairwise_loss(net.W.toarray(), net.adjacency.toarray(), 4, level), rtol=1e-12
    )
    one_step = pairwise_loss(net.W, net.adjacency, 1, level)
    np.testing.assert_allclose(one_step, level * net.adjacency.toarray())  # k=0: neighbours at LDP level


def test_network_dp_loss_decreases_with_distance():
    net = Network.build(nx.cycle_graph(30), metropolis_hastings)
    F = pairwise_loss(net.W, net.adjacency, 15, 1.0)
    by_distance = [F[0, d] for d in range(1, 16)]
    assert by_distance[0] == 1.0
    assert np.all(np.diff(by_distance) <= 1e-12) and by_distance[-1] < 0.2 * by_distance[0]


def test_accelerated_operators_follow_chebyshev_recursion():
    net = Network.build(nx.cycle_graph(12), metropolis_hastings)
    W = net.W.toarray()
    ops = list(gossip_operators(net.W, 4, accelerated=True))
    np.testing.assert_allclose(ops[1], W)
    # every operator is a polynomial in W, so it keeps rows summing to one (averages preserved)
    for M in ops:
        np.testing.assert_allclose(M.sum(1), 1.0, atol=1e-12)
    assert not np.allclose(ops[3], np.linalg.matrix_power(W, 3))


def test_random_walk_log_matrix_equals_series_and_loss_decreases_with_distance():
    net = Network.build(nx.cycle_graph(9), metropolis_hastings)
    W = net.W.toarray()
    series = sum((np.linalg.matrix_power(W, k) - 1 / 9) / k for k in range(1, 3000))
    np.testing.assert_allclose(walk_log_matrix(W), series, atol=1e-8)
    F = random_walk_loss(W, 1000, 4.0, 2.0)
    assert np.all(np.diff([F[0, d] for d in range(1, 5)]) < 0)
    assert F[0, 1] == pytest.approx(2 * 1000 / 16 * (math.log(1000) / 81 + series[0, 1] / 9), rel=1e-8)


def test_random_walk_follows_w_and_visits_nodes_uniformly():
    from decpriv.protocols.random_walk import RandomWalkSGD

    net = Network.build(nx.cycle_graph(10), metropolis_hastings)
    path = RandomWalkSGD(rounds=20000).walk(net, np.random.default_rng(0))
    steps = net.W.toarray()[path[:-1], path[1:]]
    assert np.all(steps > 0)  # every move is along an edge of W (or a stay, W_vv > 0)
    stays = np.mean(path[1:] == path[:-1])
    assert stays == pytest.approx(1 / 3, abs=0.02)  # Metropolis-Hastings on the ring: W_vv = 1/3
    np.testing.assert_allclose(np.bincount(path, minlength=10) / len(path), 0.1, atol=0.02)


def dense_worst_slope(
    graph: nx.Graph, sigma_cdp: float, sigma_cor: float, clip: float, removed: int
) -> float:
    """2 C^2 max_i [Sigma_H^-1]_ii over every coalition of ``removed`` nodes, by dense inverses."""
    full = nx.to_numpy_array(nx.convert_node_labels_to_integers(graph))
    worst = 0.0
    for coalition in itertools.combinations(range(len(full)), removed):
        keep = np.setdiff1d(np.arange(len(full)), coalition)
        A = full[np.ix_(keep, keep)]
        cov = sigma_cdp**2 * np.eye(len(keep)) + sigma_cor**2 * (np.diag(A.sum(1)) - A)
        worst = max(worst, 2 * clip**2 * np.diag(np.linalg.inv(cov)).max())
    return worst


@pytest.mark.parametrize(
    "graph",
    [
        nx.cycle_graph(16),
        nx.grid_2d_graph(4, 4, periodic=True),
        nx.path_graph(9),
        nx.star_graph(7),
        nx.erdos_renyi_graph(12, 0.35, seed=2),
        nx.complete_graph(8),
    ],
)
def test_slope_bound_is_above_the_dense_worst_slope_under_every_threat(graph):
    A = adjacency(graph)
    for sigma_cdp, sigma_cor in ((3.0, 300.0), (1.0, 5.0), (11.1495, 16.0), (2.0, 0.5)):
        for threat, removed in (("eavesdropper", 0), ("curious", 1), ("collusion", 2)):
            slope = dense_worst_slope(graph, sigma_cdp, sigma_cor, 1.0, removed)
            certified = worst_slopes(A, sigma_cdp, sigma_cor, 1.0, threat, 2).max()
            assert slope * (1 - 1e-12) <= certified <= slope * (1 + 2e-9)  # the reference is float64 too
            assert threat_bound(A, sigma_cdp, sigma_cor, 1.0, threat, 2) >= slope * (
                1 - 1e-9
            )  # exact on complete graphs


def test_curious_slope_bound_on_the_ring_example_is_no_longer_below_the_slope():
    """Issue example: ring n=16, sigma_cdp=3, sigma_cor=300, threat=curious: slope 0.014915; the
    eavesdropper form of Theorem 1 gave 0.014026, below it."""
    from decpriv.defenses.decor import Decor
    from decpriv.privacy.secldp_accountant import SecLDPAccountant

    network = Network.build(nx.cycle_graph(16), metropolis_hastings)
    defense = Decor(clip=1.0, sigma_cdp=3.0, sigma_cor=300.0, epsilon=None, level="user")
    setup = SimpleNamespace(
        network=network, defense=defense, protocol=SimpleNamespace(rounds=10, local_steps=1)
    )
    summary = SecLDPAccountant(threat="curious").account(setup).summary
    assert summary["slope"] == pytest.approx(0.014915, abs=1e-6)
    assert summary["slope_bound"] >= summary["slope"]
