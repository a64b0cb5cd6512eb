"""The simulated network: a connected graph on nodes 0..n-1, its node names and its gossip matrix."""

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch

from decpriv.errors import bad_value
from decpriv.graphs.gossip_matrix import check_gossip_matrix
from decpriv.graphs.spectrum import SpectralGap, gap


def index_nodes(graph: nx.Graph) -> tuple[nx.Graph, list[str]]:
    """Relabel nodes to 0..n-1 and return the index -> name mapping.

    Graphs whose names are exactly the integers 0..n-1 keep them; otherwise indices follow the graph's
    node order (insertion order: file order for edge lists, networkx's order for built-in graphs).
    """
    nodes = list(graph.nodes)
    n = len(nodes)
    if sorted(nodes, key=repr) == sorted(range(n), key=repr) and all(isinstance(v, int) for v in nodes):
        order = list(range(n))
    else:
        order = nodes
    mapping = {name: i for i, name in enumerate(order)}
    loops = list(nx.selfloop_edges(graph))
    if not loops and nodes == list(range(n)):  # already 0..n-1 in order: no copy (two passes over every edge)
        return graph, [str(name) for name in order]
    if loops:
        warnings.warn(
            f"topology: {len(loops)} self-loop(s) dropped (node {loops[0][0]} first): a node does not gossip "
            "with itself, the gossip matrix's diagonal carries its own weight",
            stacklevel=2,
        )
    indexed = nx.relabel_nodes(graph, mapping, copy=True)
    relabelled = nx.Graph()
    relabelled.add_nodes_from(range(n))
    relabelled.add_edges_from((u, v) for u, v in indexed.edges if u != v)
    relabelled.graph.update(graph.graph)
    for name, i in mapping.items():
        relabelled.nodes[i].update(graph.nodes[name])
    return relabelled, [str(name) for name in order]


@dataclass(frozen=True, eq=False)
class Network:
    """Public knowledge about the network: graph, node names and gossip matrix W (scipy CSR, float64)."""

    graph: nx.Graph
    names: tuple[str, ...]
    W: sp.csr_array

    @classmethod
    def build(cls, graph: nx.Graph, weights: Callable[[nx.Graph], sp.sparray]) -> "Network":
        if graph.number_of_nodes() < 2:
            raise bad_value(
                "topology",
                f"{graph.number_of_nodes()} node(s)",
                "a network needs at least 2 nodes",
                "choose a larger topology.n",
            )
        if not nx.is_connected(graph):
            parts = nx.number_connected_components(graph)
            raise bad_value(
                "topology",
                f"{parts} components",
                "the graph is disconnected, so gossip cannot reach consensus",
                "pick a connected topology, or topology.largest_component=true for an edge list",
            )
        indexed, names = index_nodes(graph)
        W = sp.csr_array(weights(indexed), dtype=np.float64)
        check_gossip_matrix(W, indexed)
        return cls(indexed, tuple(names), W)

    @property
    def n(self) -> int:
        return self.graph.number_of_nodes()

    @cached_property
    def edges(self) -> np.ndarray:
        """Undirected edges (E, 2) with u < v, sorted."""
        e = np.sort(np.array(self.graph.edges, dtype=np.int64).reshape(-1, 2), axis=1)
        return e[np.lexsort((e[:, 1], e[:, 0]))]

    @cached_property
    def spectral_gap(self) -> SpectralGap:
        """W's spectral gap, in closed form for the graph families that have one (graphs.spectrum)."""
        return gap(self.W, self.graph)

    @cached_property
    def degrees(self) -> np.ndarray:
        return np.bincount(self.edges.ravel(), minlength=self.n)

    @cached_property
    def adjacency(self) -> sp.csr_array:
        e = self.edges
        ones = np.ones(2 * len(e))
        return sp.csr_array(
            (ones, (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(self.n, self.n)
        )

    def neighbours(self, v: int) -> np.ndarray:
        return np.sort(np.fromiter(self.graph.neighbors(v), dtype=np.int64))

    def distances_from(self, sources: list[int] | np.ndarray) -> np.ndarray:
        """Hop distance from the nearest source to every node (multi-source BFS)."""
        dist = np.full(self.n, -1, dtype=np.int64)
        frontier = np.unique(np.asarray(sources, dtype=np.int64))
        dist[frontier] = 0
        level = 0
        A = self.adjacency
        while frontier.size:
            level += 1
            reach = np.zeros(self.n, dtype=bool)
            reach[A[frontier].indices] = True
            frontier = np.flatnonzero(reach & (dist < 0))
            dist[frontier] = level
        return dist

    def gossip_operator(self, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """W as a torch sparse CSR tensor, or dense when W is dense enough (over 1/8 of the entries, or
        n <= 32) that a dense matmul, n^2 p flops, beats sparse indexing, ~8 nnz p (measured on CPU)."""
        if self.n <= 32 or 8 * self.W.nnz > self.n**2:
            return torch.as_tensor(self.W.toarray(), dtype=dtype, device=device)
        coo = self.W.tocoo()
        # built and coalesced on the CPU, then moved: one summation order whatever the device
        indices = torch.as_tensor(np.vstack([coo.row, coo.col]), dtype=torch.int64, device="cpu")
        values = torch.as_tensor(coo.data, dtype=dtype, device="cpu")
        coo_tensor = torch.sparse_coo_tensor(indices, values, coo.shape, device="cpu", check_invariants=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            return coo_tensor.coalesce().to_sparse_csr().to(device)
