"""Which nodes the adversary controls and which messages it can see."""

from dataclasses import dataclass

import numpy as np

from decpriv.errors import bad
from decpriv.graphs.network import Network
from decpriv.rng import Seeds

STRATEGIES = ("random", "max_degree", "min_degree", "first")


@dataclass(frozen=True, eq=False)
class Adversary:
    """Corrupt nodes (honest-but-curious unless an active behaviour is configured) and an optional
    eavesdropper on every edge. Attackers pool their knowledge (El Mrini et al. 2024, Sec. 2)."""

    nodes: np.ndarray
    eavesdropper: bool = False

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


def choose_adversary(
    network: Network,
    seeds: Seeds,
    nodes: list[int] | None = None,
    count: int = 0,
    strategy: str = "random",
    eavesdropper: bool = False,
) -> Adversary:
    """``adversary.nodes`` if given; else ``adversary.count`` nodes picked by ``adversary.strategy``."""
    n = network.n
    if nodes and not all(isinstance(v, int) and not isinstance(v, bool) for v in nodes):
        raise bad(
            "adversary.nodes", list(nodes), "node indices are integers", "use e.g. adversary.nodes=[0,3]"
        )
    if nodes:
        chosen = np.array(sorted({int(v) for v in nodes}), dtype=np.int64)
        outside = chosen[(chosen < 0) | (chosen >= n)]
        if outside.size:
            raise bad(
                "adversary.nodes",
                list(nodes),
                f"node {int(outside[0])} is not in the graph",
                f"use indices 0..{n - 1}",
            )
        return Adversary(chosen, eavesdropper)
    if not 0 <= count <= n:
        raise bad("adversary.count", count, f"the graph has {n} nodes", f"use 0..{n}")
    if strategy not in STRATEGIES:
        raise bad("adversary.strategy", strategy, "unknown strategy", f"use one of {', '.join(STRATEGIES)}")
    if strategy == "random":
        chosen = seeds.numpy("adversary").choice(n, size=count, replace=False)
    elif strategy == "first":
        chosen = np.arange(count)
    else:
        sign = -1 if strategy == "max_degree" else 1
        chosen = np.lexsort((np.arange(n), sign * network.degrees))[:count]
    return Adversary(np.sort(chosen).astype(np.int64), eavesdropper)
