"""Topology builders: each returns a connected networkx graph with the user's node names.

Random graphs take their own seed and are resampled until connected (at most ``tries`` draws); the
number of draws is stored in ``graph.graph["tries"]`` and written to the run's summary. Every builder is
selected by the ``topology`` config group through ``_target_``.
"""

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import networkx as nx
import numpy as np

from decpriv.config.types import Range, checked
from decpriv.errors import ConfigError, bad_value

MAX_TRIES = 100
FAST_GNP = 2000


MAX_NODES = 10_000_000  # a networkx graph holds about 1 KB a node and edge: 10^7 nodes fill 10+ GB


def nodes(minimum: int = 2) -> Range:
    """``topology.n``: at least ``minimum`` nodes, at most what one machine simulates."""
    return Range(ge=minimum, le=MAX_NODES, what="the number of nodes")


Nodes = Annotated[int, nodes()]


def _connected(sample: Callable[[int], nx.Graph], seed: int, what: str) -> nx.Graph:
    """Draw ``sample(seed_k)`` until the graph is connected; record the number of draws."""
    rng = np.random.default_rng(seed)
    for attempt in range(1, MAX_TRIES + 1):
        graph = sample(int(rng.integers(2**31 - 1)))
        if nx.is_connected(graph):
            graph.graph["tries"] = attempt
            return graph
    raise ConfigError(
        f"topology: no connected {what} in {MAX_TRIES} draws; raise the density (degree, p or radius)."
    )


def _family(graph: nx.Graph, name: str) -> nx.Graph:
    """Mark the graph's family: its Laplacian spectrum is known in closed form (graphs.spectrum)."""
    graph.graph["family"] = name
    return graph


@checked("topology")
def ring(n: Annotated[int, nodes(3)] = 16) -> nx.Graph:
    """Cycle graph C_n."""
    return _family(nx.cycle_graph(n), "ring")


@checked("topology")
def line(n: Nodes = 16) -> nx.Graph:
    """Path graph P_n (El Mrini et al. 2024, Fig. 4: D-GD on a line of 31 nodes)."""
    return nx.path_graph(n)


@checked("topology")
def complete(n: Nodes = 16) -> nx.Graph:
    """Complete graph K_n: every node talks to every other (the federated / CDP limit)."""
    return _family(nx.complete_graph(n), "complete")


@checked("topology")
def star(n: Nodes = 16) -> nx.Graph:
    """Star with node 0 as the server and n-1 clients (federated protocols)."""
    return _family(nx.star_graph(n - 1), "star")


@checked("topology")
def torus(n: Annotated[int, nodes(9)] = 16) -> nx.Graph:
    """Periodic 2-D grid of side sqrt(n): every node has 4 neighbours (Pasquini et al. torus-n)."""
    side = math.isqrt(n)
    if side * side != n:
        lo, hi = side * side, (side + 1) ** 2
        raise bad_value("topology.n", n, "a torus needs a perfect square", f"use topology.n={lo} or {hi}")
    grid = nx.grid_2d_graph(side, side, periodic=True)
    return _family(nx.convert_node_labels_to_integers(grid, ordering="sorted"), "torus")


@checked("topology")
def hypercube(n: Nodes = 16) -> nx.Graph:
    """Hypercube on n = 2^k nodes."""
    k = n.bit_length() - 1
    if 2**k != n:
        raise bad_value(
            "topology.n", n, "a hypercube needs a power of two", f"use topology.n={2**k} or {2 ** (k + 1)}"
        )
    return _family(nx.convert_node_labels_to_integers(nx.hypercube_graph(k), ordering="sorted"), "hypercube")


@checked("topology")
def random_regular(n: Nodes = 16, d: int = 4, seed: int = 0) -> nx.Graph:
    """Uniform random d-regular graph, resampled until connected."""
    if not 1 <= d < n:
        raise bad_value(
            "topology.d", d, f"a regular graph on {n} nodes needs 1 <= d < n", f"pick d in 1..{n - 1}"
        )
    if (n * d) % 2:
        raise bad_value("topology.d", d, f"n*d must be even (n={n})", "change d or n by one")
    return _connected(lambda s: nx.random_regular_graph(d, n, seed=s), seed, f"{d}-regular graph")


@checked("topology")
def erdos_renyi(
    n: Nodes = 16,
    p: Annotated[float, Range(gt=0, le=1, what="an edge probability", eg=0.3)] = 0.3,
    seed: int = 0,
) -> nx.Graph:
    """Erdos-Renyi G(n, p), resampled until connected."""
    # the O(n + m) sampler above FAST_GNP nodes: gnp_random_graph flips all n^2/2 coins (docs/speed.md);
    # the same G(n, p), another draw for a seed, so smaller graphs keep the ones they always had
    sample = nx.fast_gnp_random_graph if n > FAST_GNP else nx.gnp_random_graph
    return _connected(lambda s: sample(n, p, seed=s), seed, f"G({n}, {p})")


@checked("topology")
def expander(n: Annotated[int, nodes(3)] = 36, seed: int = 0) -> nx.Graph:
    """Erdos-Renyi with p = log(n)/n (Pasquini et al.'s expander-n)."""
    return erdos_renyi(n, min(1.0, math.log(n) / n), seed)


@checked("topology")
def random_geometric(
    n: Nodes = 50,
    radius: Annotated[float, Range(gt=0, what="the radius", eg="sqrt(log n / n)")] = 0.2,
    seed: int = 0,
) -> nx.Graph:
    """n points uniform in the unit square, an edge when closer than ``radius``.

    Connects with probability >= 1 - 1/n^2 when radius >= sqrt(log n / n) (Yu 2023). Positions are
    kept in the node attribute ``pos`` for drawing.
    """
    return _connected(lambda s: nx.random_geometric_graph(n, radius, seed=s), seed, f"RGG({n}, r={radius})")


def florentine() -> nx.Graph:
    """Florentine families (15 nodes; El Mrini et al. Fig. 5)."""
    return nx.florentine_families_graph()


def davis() -> nx.Graph:
    """Davis Southern Women bipartite graph (32 nodes, 89 edges; Pasquini et al.'s social-32)."""
    return nx.davis_southern_women_graph()


def karate() -> nx.Graph:
    """Zachary's karate club (34 nodes)."""
    return nx.karate_club_graph()


def les_miserables() -> nx.Graph:
    """Les Miserables co-occurrence graph (77 nodes)."""
    return nx.les_miserables_graph()


def edgelist(path: str | None = None, largest_component: bool = True) -> nx.Graph:
    """A user's edge-list file (one ``u v`` pair a line, ``#`` comments), e.g. a SNAP Facebook ego graph.

    Node names that are all integers are read as integers. With ``largest_component`` the largest
    connected component is kept (the ego-414 experiment uses it); otherwise a disconnected file is refused.
    """
    if not path:
        raise bad_value(
            "topology.path",
            path,
            "the edgelist topology needs a file",
            "pass topology.path=/path/to/edges.txt",
        )
    file = Path(path).expanduser()
    if not file.is_file():
        raise bad_value(
            "topology.path",
            str(file),
            "no such file",
            "download the edge list (e.g. SNAP facebook/414.edges) and pass its path",
        )
    graph = _read_edges(file)
    if all(name.lstrip("-").isdigit() for name in graph.nodes):
        graph = nx.relabel_nodes(graph, {name: int(name) for name in graph.nodes})
    if not nx.is_connected(graph):
        if not largest_component:
            raise bad_value(
                "topology.largest_component",
                False,
                "the edge list is disconnected",
                "set it to true or fix the file",
            )
        parts = nx.number_connected_components(graph)
        kept = graph.subgraph(max(nx.connected_components(graph), key=len)).copy()
        warnings.warn(
            f"topology.path={str(file)!r}: the edge list has {parts} components; kept the largest, "
            f"{kept.number_of_nodes()} of {graph.number_of_nodes()} nodes "
            "(topology.largest_component=false refuses a disconnected file instead)",
            stacklevel=2,
        )
        graph = kept
    return graph


def _read_edges(file: Path) -> nx.Graph:
    """One ``u v`` pair a line (``#`` comments, extra columns such as weights ignored); anything else is
    refused naming the line."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise bad_value(
            "topology.path", str(file), "is not a text file", "give a text file of 'u v' lines"
        ) from None
    except OSError as error:
        raise bad_value(
            "topology.path", str(file), f"cannot be read ({error.strerror})", "check the file"
        ) from None
    graph = nx.Graph()
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) < 2 or "\x00" in line:
            raise bad_value(
                "topology.path",
                str(file),
                f"line {number} ({line.strip()[:40]!r}) is not an edge 'u v'",
                "write one pair of node names a line",
            )
        graph.add_edge(fields[0], fields[1])
    if graph.number_of_nodes() == 0:
        raise bad_value(
            "topology.path", str(file), "the file holds no edges", "give a file with one 'u v' pair a line"
        )
    return graph
