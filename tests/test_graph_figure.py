"""The graph picture: every node and edge drawn, coloured by category, without an O(n^2) layout on big
graphs, and a note instead of a blot past GRAPH_FIGURE_MAX nodes."""

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
from matplotlib.collections import LineCollection, PathCollection

from decpriv.report import plots


def drawn(fig):
    ax = fig.axes[0]
    nodes = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    edges = sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection))
    return ax, nodes, edges


def test_big_graph_draws_every_node_and_edge_in_its_category_without_the_spring_layout(monkeypatch):
    def no_spring(*args, **kwargs):
        raise AssertionError("spring layout on a big graph")

    monkeypatch.setattr(nx, "spring_layout", no_spring)
    graph = nx.random_regular_graph(4, 600, seed=0)
    categories = np.where(np.arange(600) < 10, "attacker", "other")
    fig = plots.graph_figure(graph, list(categories), {"attacker": "red", "other": "green"}, "t")
    ax, nodes, edges = drawn(fig)
    assert (nodes, edges) == (600, 1200)
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["attacker (10)", "other (590)"]
    plt.close(fig)


def test_segments_join_the_endpoints_of_each_edge():
    graph = nx.path_graph(5)
    fig = plots.graph_figure(graph, ["a"] * 5, {"a": "red"})
    xy = plots.graph_layout(graph)
    segments = next(c for c in fig.axes[0].collections if isinstance(c, LineCollection)).get_segments()
    assert np.allclose(np.array(segments), xy[np.array(graph.edges)])
    plt.close(fig)


def test_past_the_limit_the_figure_says_the_graph_was_not_drawn():
    n = plots.GRAPH_FIGURE_MAX + 1
    fig = plots.graph_figure(nx.path_graph(n), ["a"] * n, {"a": "red"})
    ax, nodes, edges = drawn(fig)
    assert (nodes, edges) == (0, 0)
    assert f"graph of {n} nodes not drawn" in ax.texts[0].get_text()
    plt.close(fig)


def test_radial_layout_puts_each_node_on_the_ring_of_its_hop_distance():
    # path 0-1-...-299 with a disconnected extra node: node v is v hops from root 0, the extra one outermost
    graph = nx.path_graph(300)
    graph.add_node(300)
    radius = np.linalg.norm(plots.radial_layout(graph, [0]), axis=1)
    assert np.allclose(radius[:300], np.arange(300))
    assert radius[300] == 300
    # two roots: distances from the nearer one, rings offset by 1/2
    radius = np.linalg.norm(plots.radial_layout(nx.path_graph(7), [0, 6]), axis=1)
    assert np.allclose(radius, np.array([0, 1, 2, 3, 2, 1, 0]) + 0.5)
