"""The spectral gap of a gossip matrix, found in bounded time at any size.

Gossip converges as exp(-k gap), gap = 1 - |lambda_2| (Boyd et al. 2006). Three routes, the first that
applies:

1. closed form: W = I - c L (symmetric, one weight c on every edge: Metropolis-Hastings, uniform and
   max-degree weights on regular graphs and stars, max-degree weights on any graph) on a graph whose
   Laplacian spectrum is known (Brouwer & Haemers, *Spectra of Graphs*, Springer 2012, Sec. 1.4): the ring
   C_n has mu_j = 2 - 2 cos(2 pi j / n); the torus C_s x C_s the sums of two of those (Laplacian
   eigenvalues of a Cartesian product add); the hypercube Q_k has mu = 2 j, j = 0..k; the complete graph
   K_n has 0 and n; the star K_{1,n-1} has 0, 1 and n. W's eigenvalues are 1 - c mu, monotone in mu, so
   |lambda_2| = max(|1 - c mu_2|, |1 - c mu_max|). The builder marks its graph's family
   (``graph.graph["family"]``), and both extreme eigenpairs are verified on W itself (W v = (1 - c mu) v
   to 1e-9), so a graph changed after it was built (Sybils rewiring it) falls through to the next route;
2. dense: every eigenvalue (``numpy.linalg.eigvalsh``), up to ``DENSE_MAX`` nodes (O(n^3));
3. LOBPCG (``scipy.sparse.linalg.lobpcg``, Knyazev 2001) on W or its symmetric similar form, deflated
   by the eigenvector of eigenvalue 1, for the second largest and the smallest eigenvalue, at most
   ``MAXITER`` iterations (each one sparse product): the residual norm r bounds the error (a symmetric
   matrix has an eigenvalue within r of the estimate) and is reported as ``spectral_gap_tolerance``; above
   ``ACCEPT`` the gap is left undefined (nan) with a warning, rather than waiting without bound (a ring of
   10^4 nodes has a gap of 10^-7). A W that is not similar to a symmetric one (a user's hook) goes to
   ARPACK (``eigs``) with at most ``MAXITER`` restarts.
"""

import math
import warnings
from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

DENSE_MAX = 800
TOL = 1e-9
MAXITER = 200
NCV = 32
ACCEPT = 1e-6  # largest residual norm kept: the gap's absolute error is at most this


@dataclass(frozen=True)
class SpectralGap:
    value: float  # 1 - |lambda_2|; nan when the bounded solver did not converge
    method: str  # closed form (<family>) | dense | lobpcg | arpack | not converged
    tolerance: float  # bound on the absolute error of value (0 for a closed form)


def _extremes(family: str, n: int) -> list[tuple[float, np.ndarray]] | None:
    """(mu, eigenvector) for the smallest non-zero and the largest Laplacian eigenvalue of the family's
    graph on nodes 0..n-1, numbered as its builder numbers them."""
    i = np.arange(n)
    if family == "ring" and n >= 3:
        m = n // 2
        return [
            (2 - 2 * math.cos(2 * math.pi / n), np.cos(2 * math.pi * i / n)),
            (2 - 2 * math.cos(2 * math.pi * m / n), np.cos(2 * math.pi * m * i / n)),
        ]
    if family == "torus" and math.isqrt(n) ** 2 == n and n >= 9:
        s = math.isqrt(n)
        row, col, m = i // s, i % s, s // 2
        return [
            (2 - 2 * math.cos(2 * math.pi / s), np.cos(2 * math.pi * row / s)),
            (
                2 * (2 - 2 * math.cos(2 * math.pi * m / s)),
                np.cos(2 * math.pi * m * row / s) * np.cos(2 * math.pi * m * col / s),
            ),
        ]
    if family == "hypercube" and n >= 2 and n & (n - 1) == 0:
        k = n.bit_length() - 1
        bits = (i[:, None] >> np.arange(k)) & 1
        return [(2.0, 1.0 - 2.0 * bits[:, -1]), (2.0 * k, (-1.0) ** bits.sum(axis=1))]
    if family == "complete" and n >= 2:
        v = np.zeros(n)
        v[:2] = 1, -1
        return [(float(n), v), (float(n), v)]
    if family == "star" and n >= 3:
        leaves = np.zeros(n)
        leaves[1:3] = 1, -1
        hub = np.full(n, -1.0)
        hub[0] = n - 1
        return [(1.0, leaves), (float(n), hub)]
    return None


def _closed_form(W: sp.csr_array, graph: nx.Graph | None) -> SpectralGap | None:
    family = graph.graph.get("family") if graph is not None else None
    pairs = _extremes(family, W.shape[0]) if family else None
    if pairs is None:
        return None
    off = sp.csr_array(W - sp.diags_array(W.diagonal()))
    off.eliminate_zeros()
    c = off.data.max(initial=0.0)
    if c <= 0 or np.ptp(off.data) > 1e-12 * c or abs(W - W.T).max() > 1e-12:
        return None  # not I - c L
    for mu, v in pairs:
        if np.linalg.norm(W @ v - (1 - c * mu) * v) > 1e-9 * np.linalg.norm(v):
            return None  # not the family's graph (changed after it was built)
    modulus = max(abs(1 - c * pairs[0][0]), abs(1 - c * pairs[1][0]))
    return SpectralGap(float(1.0 - modulus), f"closed form ({family})", 0.0)


def _symmetric_form(W: sp.csr_array) -> tuple[sp.csr_array, np.ndarray] | None:
    """A symmetric matrix with W's eigenvalues and its top (eigenvalue 1) unit eigenvector: W itself, or
    D^1/2 W D^-1/2 with D = diag(1 / W_vv) when D W is symmetric (the ``uniform`` weights on a
    non-regular graph: a reversible chain); None for any other W."""
    n = W.shape[0]
    if abs(W - W.T).max() < 1e-12:
        return W, np.full(n, 1 / math.sqrt(n))
    diagonal = W.diagonal()
    if (diagonal <= 0).any():
        return None
    d = sp.diags_array(1 / diagonal)
    if abs(d @ W - (d @ W).T).max() > 1e-12:
        return None
    root = np.sqrt(1 / diagonal)
    S = sp.csr_array(sp.diags_array(root) @ W @ sp.diags_array(1 / root))
    return sp.csr_array((S + S.T) / 2), root / np.linalg.norm(root)


def _extreme(S: sp.csr_array, top: np.ndarray, largest: bool) -> tuple[float, float]:
    """The largest (smallest) eigenvalue of symmetric S orthogonal to ``top``, and its residual norm: some
    eigenvalue of S lies that close to it (S symmetric)."""
    start = np.random.default_rng(0).normal(size=(S.shape[0], 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lobpcg warns when it stops at maxiter: the residual says it
        values, vectors = spla.lobpcg(S, start, Y=top[:, None], largest=largest, maxiter=MAXITER, tol=TOL)
    k = int(np.argmax(values) if largest else np.argmin(values))
    return float(values[k]), float(np.linalg.norm(S @ vectors[:, k] - values[k] * vectors[:, k]))


def _iterative(W: sp.csr_array) -> SpectralGap:
    symmetric = _symmetric_form(W)
    if symmetric is None:  # a user's hook weighting that is not reversible: ARPACK, bounded restarts
        try:
            moduli = np.sort(np.abs(spla.eigs(W, k=3, which="LM", tol=TOL, maxiter=MAXITER, ncv=NCV)[0]))
        except spla.ArpackNoConvergence:
            return _unresolved(W.shape[0], math.nan)
        return SpectralGap(float(1.0 - moduli[-2]), "arpack", TOL)
    S, top = symmetric
    ends = [_extreme(S, top, largest=True), _extreme(S, top, largest=False)]
    modulus, error = max((abs(value), residual) for value, residual in ends)
    # an end whose modulus stays below the other's even with its error cannot be lambda_2: its error is moot
    residual = max(r for value, r in ends if abs(value) + r >= modulus - error)
    if residual > ACCEPT:
        return _unresolved(W.shape[0], residual)
    return SpectralGap(1.0 - modulus, "lobpcg", residual)


def _unresolved(n: int, residual: float) -> SpectralGap:
    warnings.warn(
        f"spectral_gap: the eigen-solver stopped after {MAXITER} iterations on {n} nodes with a residual of "
        f"{residual:.1e} (the gap is too small to resolve within that bound); spectral_gap is left blank",
        stacklevel=4,
    )
    return SpectralGap(math.nan, "not converged", residual)


def gap(W: sp.sparray, graph: nx.Graph | None = None) -> SpectralGap:
    """The spectral gap of W, by the first route of the module's docstring that applies."""
    W = sp.csr_array(W, dtype=np.float64)
    found = _closed_form(W, graph)
    if found is not None:
        return found
    n = W.shape[0]
    if n <= DENSE_MAX:
        dense = W.toarray()
        eig = np.linalg.eigvalsh(dense) if np.allclose(dense, dense.T) else np.linalg.eigvals(dense)
        moduli = np.sort(np.abs(eig))[::-1]
        return SpectralGap(float(1.0 - moduli[1]), "dense", 1e-12)
    return _iterative(W)
