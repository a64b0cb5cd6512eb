"""What El Mrini et al.'s Fig. 2 sweep needs beyond the stock plugins: Erdos-Renyi graphs with n * p held
fixed while n varies (the reference code's parametrisation), and its horizon T = int(min(n p / |A|, n / 2))."""

import networkx as nx

from decpriv.errors import bad
from decpriv.graphs.topologies import erdos_renyi


def erdos_renyi_mean_degree(n: int = 40, mean_degree: float = 4.0, seed: int = 0) -> nx.Graph:
    """G(n, p) with p = mean_degree / n, resampled until connected (El Mrini et al., Fig. 2)."""
    if not 0 < mean_degree <= n:
        raise bad("topology.mean_degree", mean_degree, f"n * p must lie in (0, n = {n}]", "use e.g. 3..6")
    graph = erdos_renyi(n, mean_degree / n, seed)
    graph.graph["mean_degree"] = mean_degree
    return graph


def fig2_horizon(n: int, mean_degree: float, attackers: int) -> int:
    """T = int(min(n p / |A|, n / 2)) (reference code of El Mrini et al., Fig. 2)."""
    return max(1, int(min(mean_degree / attackers, n / 2)))
