"""Pairwise network DP of Muffliato-SGD: the whole view of v over all rounds against a dense computation.

The independent path builds v's view y = G (s + sigma C xi) over all rounds, gossip steps and closed
neighbours explicitly and takes the projector G^T (G G^T)^+ G (numpy pinv); the accountant runs a Kalman
filter in innovations form. The worst case over +-1 contributions is brute-forced on the dense side.
"""

import itertools
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
from conftest import explicit_view_matrix
from scipy.sparse.csgraph import shortest_path

from decpriv.defenses.dp import LocalDP
from decpriv.defenses.muffliato import Muffliato
from decpriv.errors import ConfigError
from decpriv.graphs.gossip_matrix import metropolis_hastings
from decpriv.graphs.network import Network
from decpriv.privacy.linear_view import reach_bound, view_quadratic, whole_view_loss
from decpriv.privacy.network_dp import NetworkDPAccountant
from decpriv.protocols.dsgd import DSGD
from decpriv.protocols.gossip import GossipAveraging


def dense_view_quadratic(W: np.ndarray, A: np.ndarray, K: int, T: int) -> np.ndarray:
    """Q[v, u] (T x T) from the explicit view matrix of each observer, pair by pair."""
    n = len(W)
    Q = np.zeros((n, n, T, T))
    for v in range(n):
        G = explicit_view_matrix(W, A, K, T, v)
        projector = G.T @ np.linalg.pinv(G @ G.T, rcond=1e-12, hermitian=True) @ G
        for u in range(n):
            idx = np.arange(T) * n + u
            Q[v, u] = projector[np.ix_(idx, idx)]
    return Q


def dense_worst_sign(Q: np.ndarray) -> np.ndarray:
    """max over x in {-1, 1}^T of x^T Q x per pair (the box maximum of a convex form is at a vertex)."""
    T = Q.shape[-1]
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=T)))
    return np.einsum("sa,...ab,sb->...s", signs, Q, signs).max(-1)


GRAPHS = [
    (nx.path_graph(3), 1, 2),
    (nx.path_graph(5), 1, 3),
    (nx.cycle_graph(6), 2, 3),
    (nx.random_regular_graph(3, 8, seed=1), 1, 4),
    (nx.star_graph(4), 1, 3),
]


@pytest.mark.parametrize(("graph", "K", "T"), GRAPHS)
def test_whole_view_matches_dense_projector_and_never_reports_below_it(graph, K, T):
    net = Network.build(graph, metropolis_hastings)
    W, A = net.W.toarray(), net.adjacency.toarray()
    dense = dense_view_quadratic(W, A, K, T)
    Q, _ = view_quadratic(net.W, net.adjacency, K, T, np.arange(net.n))
    np.testing.assert_allclose(Q.numpy(), dense, atol=1e-10)
    F, exact, *_ = whole_view_loss(net.W, net.adjacency, K, T)
    worst = dense_worst_sign(dense).T  # (u, v)
    np.fill_diagonal(worst, 0.0)
    assert np.all(worst - 1e-9 <= F)  # a reported value is never below the dense worst case
    np.testing.assert_allclose(F[exact], worst[exact], atol=1e-9)  # "exact" pairs are the dense worst case
    lower = whole_view_loss(net.W, net.adjacency, K, T).lower
    assert np.all(lower <= worst + 1e-9)  # a loss some +-1 contributions reach
    np.testing.assert_allclose(lower[exact], F[exact], atol=1e-12)
    assert np.all(reach_bound(shortest_path(A, unweighted=True, directed=False), K, T) + 1e-9 >= F)


def sgd_setup(graph: nx.Graph, rounds: int, gossip_steps: int, sigma: float):
    network = Network.build(graph, metropolis_hastings)
    protocol = DSGD(rounds=rounds, gossip_steps=gossip_steps, local_steps=1)
    return SimpleNamespace(network=network, protocol=protocol, defense=LocalDP(sigma=sigma))


def test_three_node_path_far_end_sees_round_one_through_round_two_gossip():
    """Path 0-1-2, T = 2, K = 1: u=0's round-0 contribution reaches node 2 through node 1's round-1 message;
    the per-round composition gave 0, the exact view 0.1 of the per-round LDP level."""
    setup = sgd_setup(nx.path_graph(3), rounds=2, gossip_steps=1, sigma=4.0)
    report = NetworkDPAccountant(alpha=10.0).account(setup)
    table = report.tables["privacy"].set_index(["source", "observer"])
    level = 10 * 2 / 4.0**2
    far = table.loc[(0, 2)]
    assert far.epsilon_rdp >= 0.1 * level - 1e-12
    assert far.method == "exact"
    dense = dense_worst_sign(
        dense_view_quadratic(setup.network.W.toarray(), setup.network.adjacency.toarray(), 1, 2)
    )
    assert far.epsilon_rdp == pytest.approx(level * dense[2, 0], rel=1e-9)
    assert table.loc[(0, 1)].epsilon_rdp == pytest.approx(2 * level)  # a neighbour: LDP level each round
    assert report.summary["ldp_level"] == pytest.approx(2 * level)


def test_sgd_loss_nonzero_beyond_neighbours_and_decreasing_with_distance():
    setup = sgd_setup(nx.path_graph(5), rounds=4, gossip_steps=1, sigma=4.0)  # distances <= T
    report = NetworkDPAccountant().account(setup)
    profile = report.tables["privacy_distance"].set_index("distance")["mean"]
    assert np.all(profile.loc[2:] > 0)
    assert np.all(np.diff(profile.to_numpy()) < 0)
    assert report.summary["epsilon_mean_max"] > report.summary["epsilon_mean_max_theorem1"]


def test_bound_method_is_the_reach_count_and_dominates_exact():
    setup = sgd_setup(nx.cycle_graph(7), rounds=3, gossip_steps=1, sigma=2.0)
    exact = NetworkDPAccountant(method="exact").account(setup)
    bound = NetworkDPAccountant(method="bound").account(setup)
    e, b = exact.tables["privacy"], bound.tables["privacy"]
    assert (b.method == "bound").all() and bound.summary["accounting"] == "bound"
    assert np.all(b.epsilon_rdp.to_numpy() >= e.epsilon_rdp.to_numpy() - 1e-9)
    level = 10 * 2 / 2.0**2
    # distance 3 on the 7-ring with K = 1: rounds 0 only (3 <= 1 * (3 - r) -> r = 0)
    assert b[b.distance == 3].epsilon_rdp.eq(level).all()
    auto = NetworkDPAccountant(max_flops=0).account(setup)
    assert auto.summary["accounting"] == "bound"


def test_gossip_view_is_exact_leverage_and_acceleration_does_not_change_it():
    """Muffliato gossip (noise once, T = 1): the loss is level x the leverage of e_u in v's observed rows."""
    net = Network.build(nx.random_regular_graph(3, 12, seed=4), metropolis_hastings)
    F, exact, *_ = whole_view_loss(net.W, net.adjacency, 3, 1)
    dense = dense_view_quadratic(net.W.toarray(), net.adjacency.toarray(), 3, 1)[..., 0, 0].T
    np.fill_diagonal(dense, 0.0)
    np.testing.assert_allclose(F, dense, atol=1e-10)
    assert exact.all()
    gossip = GossipAveraging(rounds=3, accelerated=True)
    setup = SimpleNamespace(network=net, protocol=gossip, defense=Muffliato(sigma=1.0))
    table = NetworkDPAccountant().account(setup).tables["privacy"]
    np.testing.assert_allclose(table.epsilon_rdp, 20.0 * F[table.source, table.observer], atol=1e-9)


def test_bad_method_refused():
    with pytest.raises(ConfigError, match="accountant.method"):
        NetworkDPAccountant(method="fast")
