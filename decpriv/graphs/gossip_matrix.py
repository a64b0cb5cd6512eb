"""Gossip matrices: pure functions from a graph on nodes 0..n-1 to a sparse stochastic matrix.

W[v, w] > 0 only on edges and the diagonal; rows sum to one. Selected by the ``gossip_matrix`` config
group; a user hook is any importable ``f(graph) -> scipy.sparse`` named by ``gossip_matrix._target_``.
"""

import networkx as nx
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla


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


def spectral_gap(W: sp.sparray) -> float:
    """1 - |lambda_2|, lambda_2 the second largest eigenvalue modulus of W (gossip converges as exp(-k gap))."""
    n = W.shape[0]
    if n <= 1500:
        dense = W.toarray()
        sym = np.allclose(dense, dense.T)
        eig = np.linalg.eigvalsh(dense) if sym else np.linalg.eigvals(dense)
        moduli = np.sort(np.abs(eig))[::-1]
    else:
        moduli = np.sort(np.abs(spla.eigs(W.astype(np.float64), k=3, which="LM", return_eigenvectors=False)))[
            ::-1
        ]
    return float(1.0 - moduli[1])
