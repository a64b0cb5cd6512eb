"""Which nodes the adversary controls and which messages it can see."""

from dataclasses import dataclass
from typing import Any, Literal

import networkx as nx
import numpy as np

from decpriv.config.types import checked
from decpriv.errors import ConfigError, bad_value
from decpriv.graphs.network import Network
from decpriv.random.streams import Seeds


@dataclass(frozen=True, eq=False)
class Adversary:
    """Corrupt nodes (honest-but-curious unless an active behaviour is configured) and an optional
    eavesdropper on every edge. Attackers pool their knowledge (El Mrini et al. 2024, Sec. 2)."""

    nodes: np.ndarray
    eavesdropper: bool = False
    sybils: "SybilPair | None" = None
    graph: nx.Graph | None = None  # the graph after the Sybils chose their edges (adversary.rewire)

    @property
    def present(self) -> bool:
        return self.nodes.size > 0 or self.eavesdropper

    def observed_senders(self, network: Network) -> np.ndarray:
        """Nodes whose broadcast messages the adversary receives: the attackers and their neighbours
        (every node for an eavesdropper)."""
        if self.eavesdropper:
            return np.arange(network.n)
        if self.nodes.size == 0:
            return self.nodes
        reach = network.adjacency[self.nodes].indices
        return np.union1d(self.nodes, reach)

    def observed_edges(self, network: Network) -> np.ndarray:
        """Directed edges (sender, receiver) whose per-edge messages the adversary sees: every edge into or
        out of an attacker, or every directed edge for an eavesdropper."""
        e = network.edges
        directed = np.vstack([e, e[:, ::-1]])
        if not self.eavesdropper:
            corrupt = np.isin(directed, self.nodes).any(axis=1)
            directed = directed[corrupt]
        return directed[np.lexsort((directed[:, 1], directed[:, 0]))]


@dataclass(frozen=True)
class SybilPair:
    """Two corrupt nodes placed around ``victim`` (Pasquini et al. 2023, Sec. 6.1, Fig. 10): the honest
    members of N(b) are those of N(a) minus v (closed neighbourhoods), so SA(N(a)) - SA(N(b)) is v's
    update; or, on a complete graph (``dropout``), b's aggregate leaves v out by faking its drop-out."""

    victim: int
    a: int
    b: int
    dropout: bool
    rewired: bool = False


def rewire_sybils(network: Network, victim: int, nodes: list[int] | None) -> tuple[SybilPair, nx.Graph]:
    """Sybils that choose their edges (a P2P newcomer picks its neighbours, Pasquini et al. 2023, Sec. 6.1):
    a is a neighbour of v and keeps its edges, b drops its own and links to a and to a's other neighbours,
    so N(b) = N(a) minus v. The first (a, b) that leaves the graph connected, or ``nodes`` = [a, b]."""
    graph = network.graph
    if nodes:
        candidates = [(int(nodes[0]), int(nodes[1]))]
    else:
        hood = set(network.neighbours(victim).tolist()) | {victim}
        firsts = [a for a in network.neighbours(victim).tolist() if network.degrees[a] >= 2]
        candidates = [(a, b) for a in firsts[:1] for b in range(network.n) if b not in hood]
    for a, b in candidates:
        if victim in (a, b) or a == b or not graph.has_edge(a, victim):
            continue
        rewired = graph.copy()
        rewired.remove_edges_from(list(graph.edges(b)))
        shared = [u for u in graph.neighbors(a) if u not in (victim, b)]
        rewired.add_edges_from([(b, a), *((b, u) for u in shared)])
        if shared and nx.is_connected(rewired):
            named = nx.relabel_nodes(rewired, dict(enumerate(network.names)))
            return SybilPair(victim, a, b, False, True), named
    raise bad_value(
        "adversary.sybils",
        victim,
        "no Sybil pair (a neighbour a of the victim with another neighbour, and a b whose edges can move "
        "without disconnecting the graph) can be rewired around this victim",
        "pick another victim or other adversary.nodes",
    )


def place_sybils(network: Network, victim: int, nodes: list[int] | None) -> SybilPair:
    """The first pair (a, b) of the graph (or ``nodes``, in either order) realising the Sybil condition."""
    n = network.n
    if isinstance(victim, bool) or not isinstance(victim, int) or not 0 <= victim < n:
        raise bad_value(
            "adversary.sybils", victim, "the victim must be a node index", f"use 0..{n - 1} or null"
        )
    hood = network.adjacency.toarray() > 0
    hood[np.arange(n), np.arange(n)] = True
    if nodes:
        pair = sorted({int(u) for u in nodes})
        if len(pair) != 2 or victim in pair:
            raise bad_value(
                "adversary.nodes",
                list(nodes),
                "Sybils are two corrupt nodes other than the victim",
                "give two indices or leave adversary.nodes empty to let the adversary place them",
            )
        cand_a = np.array(pair)
        cand_b = np.array(pair[::-1])
    else:
        cand_a, cand_b = np.meshgrid(np.flatnonzero(hood[victim]), np.arange(n), indexing="ij")
        cand_a, cand_b = cand_a.ravel(), cand_b.ravel()
    keep = (cand_a != victim) & (cand_b != victim) & (cand_a != cand_b)
    cand_a, cand_b = cand_a[keep], cand_b[keep]
    differ = hood[cand_a] != hood[cand_b]
    rows = np.arange(len(cand_a))
    differ[rows, cand_a] = differ[rows, cand_b] = False
    ok = hood[cand_a, victim] & ~hood[cand_b, victim] & (differ.sum(1) == 1)
    if ok.any():
        k = int(np.flatnonzero(ok)[0])
        return SybilPair(victim, int(cand_a[k]), int(cand_b[k]), False)
    if (network.degrees == n - 1).all():
        others = np.array(sorted(nodes)) if nodes else np.setdiff1d(np.arange(n), [victim])[:2]
        return SybilPair(victim, int(others[0]), int(others[1]), True)
    raise bad_value(
        "adversary.sybils",
        victim,
        "no two nodes a, b of this graph have N(b) = N(a) minus the victim, so no pair of Sybils' "
        "aggregates differs by the victim's update alone",
        "set adversary.rewire=true (the Sybils choose their edges), use topology=complete (fault-tolerant "
        "secure aggregation: b fakes the victim's drop-out) or a graph with such a pair",
    )


def _unread(node: Any) -> dict[str, str]:
    """The keys a mode of :func:`choose_adversary` ignores (validation refuses them when set by hand)."""
    if node.get("sybils") is not None:
        mode = "with adversary.sybils (two Sybils are placed around the victim)"
        return {"count": mode, "strategy": mode}
    rewire = {"rewire": "without adversary.sybils (only Sybils rewire)"}
    if node.get("nodes"):
        mode = "with adversary.nodes (the corrupt nodes are listed)"
        return {"count": mode, "strategy": mode, **rewire}
    return rewire


@checked("adversary")
def choose_adversary(
    network: Network,
    seeds: Seeds,
    nodes: list[int] | None = None,
    count: int = 0,
    strategy: Literal["random", "max_degree", "min_degree", "first"] = "random",
    eavesdropper: bool = False,
    sybils: int | None = None,
    rewire: bool = False,
) -> Adversary:
    """``adversary.nodes`` if given; else ``adversary.count`` nodes picked by ``adversary.strategy``;
    with ``adversary.sybils`` = a victim, two Sybils placed around it (``nodes`` may name them), on the
    graph as it is or, with ``adversary.rewire``, by letting them choose their edges."""
    n = network.n
    if nodes and not all(isinstance(v, int) and not isinstance(v, bool) for v in nodes):
        raise bad_value(
            "adversary.nodes", list(nodes), "node indices are integers", "use e.g. adversary.nodes=[0,3]"
        )
    if nodes and len(set(nodes)) < len(nodes):
        twice = next(v for v in nodes if list(nodes).count(v) > 1)
        raise bad_value(
            "adversary.nodes", list(nodes), f"node {twice} is listed twice", "list each node once"
        )
    if sybils is not None:
        graph = None
        try:
            pair = place_sybils(network, sybils, nodes)
        except ConfigError:
            if not rewire:
                raise
            pair, graph = rewire_sybils(network, sybils, nodes)
        return Adversary(np.array(sorted([pair.a, pair.b]), dtype=np.int64), eavesdropper, pair, graph)
    if nodes:
        chosen = np.array(sorted({int(v) for v in nodes}), dtype=np.int64)
        outside = chosen[(chosen < 0) | (chosen >= n)]
        if outside.size:
            raise bad_value(
                "adversary.nodes",
                list(nodes),
                f"node {int(outside[0])} is not in the graph",
                f"use indices 0..{n - 1}",
            )
        return Adversary(chosen, eavesdropper)
    if not 0 <= count <= n:
        raise bad_value("adversary.count", count, f"the graph has {n} nodes", f"use 0..{n}")
    if strategy == "random":
        chosen = seeds.numpy("adversary").choice(n, size=count, replace=False)
    elif strategy == "first":
        chosen = np.arange(count)
    else:
        sign = -1 if strategy == "max_degree" else 1
        chosen = np.lexsort((np.arange(n), sign * network.degrees))[:count]
    return Adversary(np.sort(chosen).astype(np.int64), eavesdropper)


choose_adversary.unread = _unread
