"""What El Mrini et al.'s Fig. 2 sweep needs beyond the stock plugins: Erdos-Renyi graphs with n * p held
fixed while n varies, conditioned on being connected, and the authors' horizon, which grows with n.

In the authors' released script (decAttack, ``exp_erdos_renyi.py``) the edge probabilities p_20 are given at
the smallest size n_0 = 20 (n_0 p_20 = 3, 4, 5, 6), a graph of size n gets p = n_0 p_20 / n, and the attack
runs T = int(min(n p_20 / |A|, n / 2)) gossip steps, with p_20, not p: at n = 100 and n p = 6 one attacker
listens for 30 steps, not 6.
"""

import networkx as nx
import numpy as np

from decpriv.errors import ConfigError, bad_value

FIG2_BASE_N = 20  # n_0: the size at which the authors give p (their n_list[0])
MAX_DRAWS = 100_000  # ER(100, 3/100) is connected once in about 150 draws


def erdos_renyi_mean_degree(n: int = 40, mean_degree: float = 4.0, seed: int = 0) -> nx.Graph:
    """G(n, p) with p = mean_degree / n, conditioned on being connected: draws k = 1, 2, ... use the k-th
    seed of ``numpy.random.default_rng(seed)`` until one is connected; ``graph["tries"]`` records k."""
    if not 0 < mean_degree <= n:
        raise bad_value(
            "topology.mean_degree", mean_degree, f"n * p must lie in (0, n = {n}]", "use e.g. 3..6"
        )
    rng = np.random.default_rng(seed)
    for tries in range(1, MAX_DRAWS + 1):
        graph = nx.gnp_random_graph(n, mean_degree / n, seed=int(rng.integers(2**31 - 1)))
        if nx.is_connected(graph):
            graph.graph.update(mean_degree=mean_degree, tries=tries)
            return graph
    raise ConfigError(
        f"topology: no connected G({n}, {mean_degree}/{n}) in {MAX_DRAWS} draws; raise topology.mean_degree."
    )


def fig2_horizon(n: int, mean_degree: float, attackers: int) -> int:
    """T = int(min(n p_20 / |A|, n / 2)) with p_20 = mean_degree / 20 (El Mrini et al., Fig. 2, as run)."""
    p_base = mean_degree / FIG2_BASE_N
    return max(1, int(min(n * p_base / attackers, n / 2)))
