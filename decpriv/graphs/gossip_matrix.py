"""Gossip matrices: pure functions from a graph on nodes 0..n-1 to a sparse stochastic matrix.

W[v, w] > 0 only on edges and the diagonal; rows sum to one (Boyd et al. 2006; Bellet, PODL 2024, Sec. 1).
Selected by the ``gossip_matrix`` config group; ``gossip_matrix=hook gossip_matrix.function=pkg.mod.fn``
plugs in a user's ``fn(graph) -> scipy.sparse``, whose result :func:`check_gossip_matrix` verifies.
"""

import inspect

import networkx as nx
import numpy as np
import scipy.sparse as sp

from decpriv.errors import bad_value
from decpriv.graphs.spectrum import gap


def _edges_and_degrees(graph: nx.Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n = graph.number_of_nodes()
    edges = np.array([(u, v) for u, v in graph.edges if u != v], dtype=np.int64).reshape(-1, 2)
    degree = np.bincount(edges.ravel(), minlength=n).astype(np.float64)
    return edges[:, 0], edges[:, 1], degree, n


def _with_diagonal(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int) -> sp.csr_array:
    off = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    diag = 1.0 - np.asarray(off.sum(axis=1)).ravel()
    return (off + sp.diags_array(diag)).tocsr()


def metropolis_hastings(graph: nx.Graph) -> sp.csr_array:
    """W[u,v] = 1 / (1 + max(d_u, d_v)) on edges, diagonal completes rows to one. Symmetric.

    The weights of El Mrini et al. 2024 (their code calls them "Hamilton") and of DECOR.
    """
    u, v, degree, n = _edges_and_degrees(graph)
    w = 1.0 / (1.0 + np.maximum(degree[u], degree[v]))
    return _with_diagonal(np.r_[u, v], np.r_[v, u], np.r_[w, w], n)


def max_degree(graph: nx.Graph) -> sp.csr_array:
    """W = I - L / d_max (the D-GD attack's matrix in El Mrini et al. 2024). Symmetric.

    The diagonal 1 - d_v/d_max is zero at the nodes of maximum degree.
    """
    u, v, degree, n = _edges_and_degrees(graph)
    w = np.full(len(u), 1.0 / degree.max())
    return _with_diagonal(np.r_[u, v], np.r_[v, u], np.r_[w, w], n)


def uniform(graph: nx.Graph) -> sp.csr_array:
    """W[v,u] = 1 / |N(v)| over the closed neighbourhood (D-PSGD, Lian et al. 2017; Pasquini et al.).

    Row-stochastic; symmetric only on regular graphs.
    """
    u, v, degree, n = _edges_and_degrees(graph)
    rows, cols = np.r_[u, v, np.arange(n)], np.r_[v, u, np.arange(n)]
    return sp.csr_array((1.0 / (degree[rows] + 1.0), (rows, cols)), shape=(n, n))


def hook(graph: nx.Graph, function: str | None = None) -> sp.csr_array:
    """A user-supplied weighting: ``function`` is the dotted path of ``f(graph) -> (n, n) matrix``."""
    from hydra.utils import get_method

    if not function:
        raise bad_value(
            "gossip_matrix.function",
            function,
            "the hook needs a function",
            "pass gossip_matrix.function=package.module.function",
        )
    try:
        weights = get_method(function)
    except Exception:
        raise bad_value(
            "gossip_matrix.function",
            function,
            "no such importable function",
            "give the dotted path of f(graph) -> matrix on the Python path",
        ) from None
    try:
        inspect.signature(weights).bind(graph)
    except TypeError:  # called with the graph alone (a builtin without a signature is tried as it is)
        raise bad_value(
            "gossip_matrix.function",
            function,
            "the function is called with the graph alone and does not take it",
            "give f(graph) -> (n, n) stochastic matrix",
        ) from None
    except ValueError:
        pass
    try:
        return sp.csr_array(weights(graph), dtype=np.float64)
    except (TypeError, ValueError) as error:  # what it returned is no matrix
        raise bad_value(
            "gossip_matrix.function",
            function,
            f"its result is not an (n, n) matrix ({type(error).__name__}: {str(error)[:80]})",
            "return an (n, n) array or scipy sparse matrix of weights",
        ) from None


def check_gossip_matrix(W: sp.sparray, graph: nx.Graph, tol: float = 1e-9) -> None:
    """Refuse a W that is not (n, n), has negative entries, rows not summing to one, or weight off the
    edges and diagonal of ``graph`` (nodes 0..n-1)."""
    n = graph.number_of_nodes()
    if W.shape != (n, n):
        raise bad_value(
            "gossip_matrix", f"shape {W.shape}", f"the graph has {n} nodes", f"return an ({n}, {n}) matrix"
        )
    coo = sp.coo_array(W)
    if (coo.data < -tol).any():
        raise bad_value(
            "gossip_matrix", "negative weight", "gossip weights must be >= 0", "fix the weighting"
        )
    rows = np.asarray(W.sum(axis=1)).ravel()
    worst = int(np.argmax(np.abs(rows - 1.0)))
    if abs(rows[worst] - 1.0) > 1e-6:
        raise bad_value(
            "gossip_matrix",
            f"row {worst} sums to {rows[worst]:.6g}",
            "every row of W must sum to 1",
            "normalise the weighting's rows",
        )
    u, v, _, _ = _edges_and_degrees(graph)
    allowed = sp.csr_array(
        (np.ones(2 * len(u) + n), (np.r_[u, v, np.arange(n)], np.r_[v, u, np.arange(n)])), shape=(n, n)
    )
    big = coo.data > tol
    pattern = sp.csr_array((np.ones(big.sum()), (coo.row[big], coo.col[big])), shape=(n, n))
    outside = sp.coo_array(pattern - pattern.multiply(allowed))
    outside.eliminate_zeros()
    if outside.nnz:
        pair = (int(outside.row[0]), int(outside.col[0]))
        raise bad_value(
            "gossip_matrix",
            f"weight on {pair}",
            "W may be non-zero only on edges and the diagonal",
            "zero the weights between non-neighbours",
        )


def spectral_gap(W: sp.sparray) -> float:
    """1 - |lambda_2|, lambda_2 the second largest eigenvalue modulus of W (gossip converges as exp(-k gap)),
    dense or by a bounded ARPACK run (:func:`decpriv.graphs.spectrum.gap`; nan when it does not converge)."""
    return gap(W).value
