"""Topologies and gossip matrices: sizes, degrees, connectivity, node-name mapping, W's properties."""

import math
import re

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.errors import ConfigError
from decpriv.graphs import gossip_matrix as gm
from decpriv.graphs import topologies as topo
from decpriv.graphs.network import Network

MATRICES = [gm.metropolis_hastings, gm.max_degree, gm.uniform]


@pytest.mark.parametrize(
    ("graph", "n", "edges", "degrees"),
    [
        (lambda: topo.ring(10), 10, 10, {2}),
        (lambda: topo.line(7), 7, 6, {1, 2}),
        (lambda: topo.complete(6), 6, 15, {5}),
        (lambda: topo.star(9), 9, 8, {1, 8}),
        (lambda: topo.torus(16), 16, 32, {4}),
        (lambda: topo.torus(9), 9, 18, {4}),
        (lambda: topo.hypercube(32), 32, 80, {5}),
        (lambda: topo.random_regular(36, 6, seed=3), 36, 108, {6}),
        (topo.florentine, 15, 20, None),
        (topo.davis, 32, 89, None),
        (topo.karate, 34, 78, None),
        (topo.les_miserables, 77, 254, None),
    ],
)
def test_sizes_and_degrees(graph, n, edges, degrees):
    g = graph()
    assert g.number_of_nodes() == n
    assert g.number_of_edges() == edges
    assert nx.is_connected(g)
    if degrees is not None:
        assert {d for _, d in g.degree} == degrees


def test_star_centre_is_node_zero():
    g = topo.star(9)
    assert g.degree[0] == 8


def test_random_graphs_are_connected_reproducible_and_count_tries():
    a = topo.expander(128, seed=1)
    b = topo.expander(128, seed=1)
    assert nx.is_connected(a)
    assert sorted(a.edges) == sorted(b.edges)
    assert sorted(a.edges) != sorted(topo.expander(128, seed=2).edges)
    tries = [topo.expander(64, seed=s).graph["tries"] for s in range(8)]
    # p = log(n)/n sits at the connectivity threshold: some draws must have been rejected
    assert all(t >= 1 for t in tries) and max(tries) > 1
    er = topo.erdos_renyi(200, 0.05, seed=0)
    assert abs(2 * er.number_of_edges() / 200 - 0.05 * 199) < 2.0
    rgg = topo.random_geometric(60, 0.3, seed=0)
    pos = nx.get_node_attributes(rgg, "pos")
    u, v = next(iter(rgg.edges))
    assert math.dist(pos[u], pos[v]) <= 0.3


def test_unreachable_connectivity_is_refused():
    with pytest.raises(ConfigError, match="no connected"):
        topo.erdos_renyi(50, 0.001, seed=0)


@pytest.mark.parametrize(
    ("call", "key"),
    [
        (lambda: topo.torus(15), "topology.n=15"),
        (lambda: topo.hypercube(12), "topology.n=12"),
        (lambda: topo.random_regular(10, 10), "topology.d=10"),
        (lambda: topo.random_regular(9, 3), "topology.d=3"),
        (lambda: topo.erdos_renyi(10, 0.0), "topology.p=0.0"),
        (lambda: topo.ring(2), "topology.n=2"),
        (lambda: topo.edgelist(None), "topology.path=null"),
    ],
)
def test_bad_topology_input(call, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        call()


def test_edgelist_integer_names_keep_their_index(tmp_path):
    file = tmp_path / "g.edges"
    file.write_text("# a ring read in shuffled order\n3 4\n0 1\n4 0\n2 3\n1 2\n")
    net = Network.build(topo.edgelist(str(file)), gm.metropolis_hastings)
    assert net.names == ("0", "1", "2", "3", "4")
    assert sorted(map(tuple, net.edges.tolist())) == [(0, 1), (0, 4), (1, 2), (2, 3), (3, 4)]


def test_edgelist_string_and_sparse_integer_names(tmp_path):
    file = tmp_path / "names.edges"
    file.write_text("alice bob\nbob carol\ncarol alice\ncarol dave\n")
    net = Network.build(topo.edgelist(str(file)), gm.uniform)
    assert net.names == ("alice", "bob", "carol", "dave")
    assert net.degrees.tolist() == [2, 2, 3, 1]
    ids = tmp_path / "ids.edges"
    ids.write_text("10 20\n20 30\n")
    assert Network.build(topo.edgelist(str(ids)), gm.uniform).names == ("10", "20", "30")


def test_edgelist_disconnected_handling(tmp_path):
    file = tmp_path / "two.edges"
    file.write_text("0 1\n1 2\n2 0\n5 6\n")
    assert sorted(topo.edgelist(str(file)).nodes) == [0, 1, 2]
    with pytest.raises(ConfigError, match="topology.largest_component=False"):
        topo.edgelist(str(file), largest_component=False)
    with pytest.raises(ConfigError, match="topology.path"):
        topo.edgelist(str(tmp_path / "missing.edges"))


def test_named_graph_mapping_is_stable():
    net = Network.build(topo.florentine(), gm.metropolis_hastings)
    assert net.names[:3] == tuple(list(nx.florentine_families_graph().nodes)[:3])
    medici = net.names.index("Medici")
    assert net.degrees[medici] == 6


def test_disconnected_graph_is_refused():
    g = nx.disjoint_union(nx.cycle_graph(4), nx.cycle_graph(3))
    with pytest.raises(ConfigError, match="2 components"):
        Network.build(g, gm.metropolis_hastings)


@pytest.mark.parametrize("weights", MATRICES)
@pytest.mark.parametrize("graph", [topo.star(7), topo.davis(), topo.torus(16), topo.expander(60, seed=0)])
def test_gossip_matrix_properties(weights, graph):
    net = Network.build(graph, weights)
    W = net.W.toarray()
    assert np.allclose(W.sum(1), 1.0)
    assert (W >= -1e-15).all()
    allowed = net.adjacency.toarray() + np.eye(net.n)
    assert (W[allowed == 0] == 0).all()
    assert (W[net.adjacency.toarray() > 0] > 0).all()
    if weights is not gm.uniform or len(set(net.degrees)) == 1:
        assert np.allclose(W, W.T)


def test_gossip_matrix_values_by_hand():
    line = Network.build(topo.line(3), gm.metropolis_hastings).W.toarray()
    third = 1 / 3
    assert np.allclose(line, [[1 - third, third, 0], [third, third, third], [0, third, 1 - third]])
    star = Network.build(topo.star(4), gm.max_degree).W.toarray()
    assert np.allclose(star[0], [0, third, third, third])
    assert np.allclose(star[1], [third, 2 * third, 0, 0])
    uni = Network.build(topo.line(3), gm.uniform).W.toarray()
    assert np.allclose(uni, [[0.5, 0.5, 0], [third, third, third], [0, 0.5, 0.5]])


def test_spectral_gap_matches_closed_forms():
    # complete graph with W = 11^T/n: gap 1; ring with MH weights 1/3: eigenvalues (1 + 2cos(2 pi k/n))/3
    assert gm.spectral_gap(Network.build(topo.complete(8), gm.uniform).W) == pytest.approx(1.0)
    n = 20
    ring = Network.build(topo.ring(n), gm.metropolis_hastings).W
    assert gm.spectral_gap(ring) == pytest.approx(1 - (1 + 2 * math.cos(2 * math.pi / n)) / 3)
    big = Network.build(topo.ring(1600), gm.metropolis_hastings)
    found = big.spectral_gap
    assert found.method == "closed form (ring)"
    assert found.value == pytest.approx(1 - (1 + 2 * math.cos(2 * math.pi / 1600)) / 3, abs=1e-15)


def shuffled_uniform(graph: nx.Graph) -> sp.csr_array:
    """A valid user weighting (lazy uniform) for the hook test."""
    return (gm.uniform(graph) + sp.eye_array(graph.number_of_nodes())) / 2


def bad_user_weights(graph: nx.Graph) -> np.ndarray:
    return np.full((graph.number_of_nodes(),) * 2, 1.0 / graph.number_of_nodes())


def test_user_weighting_hook_is_checked():
    net = Network.build(topo.ring(6), lambda g: gm.hook(g, f"{__name__}.shuffled_uniform"))
    assert np.allclose(net.W.toarray().diagonal(), 2 / 3)
    with pytest.raises(ConfigError, match="non-zero only on edges"):
        Network.build(topo.ring(6), lambda g: gm.hook(g, f"{__name__}.bad_user_weights"))
    with pytest.raises(ConfigError, match="gossip_matrix.function"):
        Network.build(topo.ring(6), lambda g: gm.hook(g, "no.such.function"))


def test_cli_reports_spectral_gap_and_node_names(cli, tmp_path):
    cli(
        "run",
        "topology=florentine",
        "protocol=gossip",
        "partition=one_per_node",
        "hydra.run.dir=out",
        check=True,
    )
    import pandas as pd

    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    W = Network.build(topo.florentine(), gm.metropolis_hastings).W
    assert summary.spectral_gap[0] == pytest.approx(gm.spectral_gap(W))
    nodes = pd.read_csv(tmp_path / "out" / "nodes.csv")
    assert list(nodes.name) == list(nx.florentine_families_graph().nodes)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("topology=random_regular", "topology.n=10", "topology.d=10"), "topology.d=10"),
        (("topology=ring", "adversary.nodes=[20]"), "adversary.nodes"),
        (("topology=edgelist", "topology.path=/nonexistent/x.edges"), "topology.path"),
        (("topology=erdos_renyi", "topology.p=0.001"), "no connected"),
    ],
)
def test_bad_graph_input_is_refused_by_build(args, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        experiment.build(compose_config(list(args))[0])


def test_bad_graph_input_through_cli(cli):
    proc = cli("run", "topology=torus", "topology.n=15", "hydra.run.dir=out")
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == [
        "error: topology.n=15: a torus needs a perfect square; use topology.n=9 or 16."
    ]
