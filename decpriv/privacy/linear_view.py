"""Exact Renyi divergence of a node's whole view of Muffliato gossip / Muffliato-SGD (linear Gaussian view).

Per coordinate, round r adds to every node w the noisy contribution x_{r,w} = s_{r,w} + sigma C xi_{r,w}
(xi standard normal, fresh each round; s the clipped value or gradient). The state after the noise of
round t is z_t = W^K z_{t-1} + x_t (K gossip steps a round), and during round t node v sends and receives
(W^k z_t)_w for k < K and w in its closed neighbourhood N[v] (Network DP: the messages v sends and
receives; Cyffers & Bellet 2022, Def. 3). With H_v the rows {e_w^T W^k : w in N[v], k < K}, the view is
y_t = H_v z_t, t < T: a linear Gaussian mechanism y = G (s + sigma C xi) in which signal and noise
enter through the same G. For two datasets differing at u only, by Delta_r (||Delta_r|| <= 2C) in round r,

    D_alpha(view || view') = (alpha / (2 sigma^2 C^2)) sum_coords Delta^T Pi Delta,   Pi = G^T (G G^T)^+ G,

Pi the orthogonal projector onto G's row space. Restricted to u's T entries Pi is a T x T matrix Q_uv,
and with level = alpha (2C)^2 / (2 sigma^2 C^2) the worst case over the contributions is
level * max {<Q_uv, X> : X PSD, X_rr <= 1}. When Q_uv >= 0 entrywise this is 1^T Q_uv 1, reached by equal
contributions each round (exact); otherwise min(sum |Q_uv|, T lambda_max(Q_uv)) bounds it.

Q_uv comes from the innovations form of the Kalman filter on the state-space model (Anderson & Moore,
Optimal Filtering, Ch. 3): with U_v an orthonormal basis of H_v's row space (same information as
y_t), the innovation covariance S_t = U_v^T P_t U_v >= I (fresh noise each round) and the mean shift of
the innovations is linear in Delta, so Q_uv = sum_t nu_t^T S_t^-1 nu_t, batched over observers and
sources. T = 1 (Muffliato gossip, noise once) reduces to the leverage ||U_v^T e_u||^2. Accelerated gossip
has the same view: its operators are polynomials of W of degree k with non-zero leading coefficient.

The row spaces are certified, not decided by a float64 tolerance (:func:`certified_bases`,
:mod:`decpriv.privacy.exact_view`): a pair is labelled exact only where its value is known within 1e-9 of
the level; everywhere else the reported value is a sound upper bound, labelled a bound.

The model takes the clipped contributions as fixed inputs (non-adaptive): the dependence of later
gradients on earlier noisy models is not accounted, as in the Muffliato analysis.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path

from decpriv.graphs.rational import RationalForm
from decpriv.privacy.exact_view import integer_gossip, krylov_rows, orthonormal_basis, projector

EXACT_WIDTH = 1e-9  # a worst case known within this (in units of the level) is reported as exact


def closed_neighbourhoods(adjacency: sp.sparray) -> np.ndarray:
    """(n, 1 + max degree) indices: v then its neighbours, padded by repeating v (same row space)."""
    A = sp.csr_array(adjacency)
    n, width = A.shape[0], 1 + int(np.diff(A.indptr).max())
    index = np.repeat(np.arange(n)[:, None], width, axis=1)
    degree = np.diff(A.indptr)
    rows = np.repeat(np.arange(n), degree)
    slots = 1 + np.arange(A.nnz) - np.repeat(A.indptr[:-1], degree)
    index[rows, slots] = A.indices
    return index


FLOAT_MARGIN = 1e-8  # without a rational W, float64 decides only a full rank whose smallest singular value
# stands this far (relative) above the largest: far above the SVD's backward error (~ n eps)
LEVERAGE_TOLERANCE = 1e-9  # a float64 projector certified this close to the exact one counts as exact
RATIONAL_BUDGET = 2e7  # rank^2 x bits x n: past this an observer's projector is not computed over Q (~0.5 s)


class Bases(NamedTuple):
    """Observers' row spaces: orthonormal bases ``U`` (c, n, r) zero-padded beyond each rank (``mask``
    (c, r)), upper bounds on the projectors' diagonals ``leverage`` (c, n), ``certified`` (c,) where those
    are exact (within ``LEVERAGE_TOLERANCE``) and ``U`` spans the exact row space, and the smallest kept
    singular value relative to the largest, ``margin``."""

    U: torch.Tensor
    mask: torch.Tensor
    leverage: torch.Tensor
    certified: np.ndarray
    margin: float


def view_rows(W: sp.sparray, adjacency: sp.sparray, steps: int, observers: np.ndarray) -> np.ndarray:
    """(c, steps * b, n) float64 rows e_w^T W^k, w in N[v] (padded by repeating v), k < steps."""
    W = sp.csr_array(W, dtype=np.float64)
    index = closed_neighbourhoods(adjacency)[observers]  # (c, b)
    c, b = index.shape
    n = W.shape[0]
    rows = np.zeros((c * b, n))
    rows[np.arange(c * b), index.ravel()] = 1.0
    blocks = []
    for _ in range(steps):
        blocks.append(rows.reshape(c, b, n))
        rows = np.asarray(W.T @ rows.T).T  # e_w^T W^{k+1} = (e_w^T W^k) W
    return np.concatenate(blocks, axis=1)


def perturbation(W: sp.sparray, H: np.ndarray, s: np.ndarray, steps: int) -> np.ndarray:
    """(c,) bound on ||H_float - H_exact||_2 + the SVD's backward error: each row e_w^T W^k, built by k sparse
    products, is off by at most k gamma_{m+2} a^k in l1 (m the most non-zeros in a row, a the largest
    absolute row sum of W, 1 for a stochastic W); LAPACK's SVD is exact for a matrix within
    max(rows, n) eps s_1 (the backward-stability bound, constant read as 1)."""
    W = sp.csr_array(W)
    width = int(np.diff(W.indptr).max())
    a = float(abs(W).sum(axis=1).max())
    eps = np.finfo(np.float64).eps
    rows_error = np.sqrt(H.shape[1]) * steps * 1.01 * (width + 2) * eps * max(1.0, a) ** steps
    return rows_error + max(H.shape[1:]) * eps * s[:, 0]


def certified_bases(
    W: sp.sparray, adjacency: sp.sparray, steps: int, observers: np.ndarray, integer, full: bool
) -> Bases:
    """Each observer's row space from the float64 SVD, certified against its exact rank r over Q (Wedin:
    the leading r right singular vectors are within eta / (s_r - eta) of the exact row space, eta the
    :func:`perturbation`), over Q (:func:`~decpriv.privacy.exact_view.projector`) where that is too loose and
    affordable, else a labelled bound: the float leverage plus Wedin's error, or 1 when s_r <= eta. ``full``
    asks for the exact bases of rational projectors too (the filter of T > 1), not only their diagonals."""
    H = view_rows(W, adjacency, steps, observers)
    _, s, Vh = np.linalg.svd(H, full_matrices=False)  # LAPACK per matrix: faster than torch's batched SVD
    eta = perturbation(W, H, s, steps)
    index = closed_neighbourhoods(adjacency)[observers]
    c, n = len(observers), W.shape[0]
    U = np.zeros((c, n, s.shape[1]))
    mask = np.zeros((c, s.shape[1]), dtype=bool)
    leverage, certified, ranks = np.ones((c, n)), np.zeros(c, dtype=bool), np.zeros(c, dtype=np.int64)
    for i, neighbourhood in enumerate(index):  # exact ranks matrix by matrix: FLINT has no batches
        rows, rank = krylov_rows(integer, np.unique(neighbourhood), steps)
        ranks[i] = rank
        kept = Vh[i, :rank].T
        gap = s[i, rank - 1] - eta[i]
        error = eta[i] / gap if gap > 0 else np.inf
        if error > LEVERAGE_TOLERANCE and rank**2 * entry_bits(rows) * n <= RATIONAL_BUDGET:
            diagonal, P, _ = projector(rows, full)
            kept, error = (orthonormal_basis(P) if full else np.zeros((n, 0))), 0.0
            leverage[i] = diagonal
        else:
            leverage[i] = np.minimum(1.0, (kept**2).sum(1) + error)
        certified[i] = error <= LEVERAGE_TOLERANCE
        U[i, :, : kept.shape[1]], mask[i, : kept.shape[1]] = kept, True
    margin = float(np.min(s[np.arange(c), ranks - 1] / s[:, 0]))  # the exact rank's last singular value
    return Bases(torch.from_numpy(U), torch.from_numpy(mask), torch.from_numpy(leverage), certified, margin)


def entry_bits(rows) -> int:
    """Bits of the largest entry of a FLINT integer matrix."""
    return max(abs(int(x)) for x in rows.entries()).bit_length()


def float_bases(W: sp.sparray, adjacency: sp.sparray, steps: int, observers: np.ndarray) -> Bases:
    """Row spaces by float64 SVD (numpy's rank tolerance) when W is not rational: no exact rank to hold
    them against, so certified only where the rank is full with a clear margin (projector = I)."""
    H = view_rows(W, adjacency, steps, observers)
    n = W.shape[0]
    _, s, Vh = np.linalg.svd(H, full_matrices=False)
    s, Vh = torch.from_numpy(s), torch.from_numpy(Vh)
    tol = s[:, :1] * max(H.shape[1:]) * torch.finfo(torch.float64).eps
    mask = s > tol
    smallest = torch.where(mask, s, torch.inf).min(1).values / s[:, 0]
    U = Vh.transpose(1, 2) * mask[:, None, :]
    certified = (mask.sum(1) == n) & (smallest >= FLOAT_MARGIN)
    leverage = torch.where(certified[:, None], (U**2).sum(2), 1.0)  # no exact rank: 1 is all that is sure
    return Bases(U, mask, leverage, certified.numpy(), float(smallest.min()))


def observation_bases(
    W: sp.sparray, adjacency: sp.sparray, steps: int, observers: np.ndarray, full: bool, integer=None
) -> Bases:
    """Certified row spaces when W is rational (``integer`` = :func:`integer_gossip`'s d W), else float64
    ones (certified only where the rank is clearly full); ``full``: bases for the filter, not only the
    projectors' diagonals."""
    if integer is None:
        return float_bases(W, adjacency, steps, observers)
    return certified_bases(W, adjacency, steps, observers, integer, full)


def view_quadratic(
    W: sp.sparray, adjacency: sp.sparray, steps: int, rounds: int, observers: np.ndarray, integer=None
) -> tuple[torch.Tensor, Bases]:
    """Q (c, n, T, T): Q[v, u] the quadratic form of u's per-round contributions (unit = 2C, noise
    sigma C = 1) in observer v's whole view; and the observers' row spaces (which say what is certified).
    ``integer``: W's exact integer form d W (:func:`integer_gossip`), None for the float64 row spaces."""
    bases = observation_bases(W, adjacency, steps, observers, rounds > 1, integer)
    if rounds == 1:
        return bases.leverage[:, :, None, None], bases
    U, mask = bases.U, bases.mask
    c, n, r = U.shape
    Wd = torch.from_numpy(sp.csr_array(W, dtype=np.float64).toarray())
    A = torch.linalg.matrix_power(Wd, steps)
    eye = torch.eye(n, dtype=torch.float64)
    pad = torch.diag_embed((~mask).to(torch.float64))
    P = eye.expand(c, n, n).clone()
    # E[:, :, r n + u] is the state error left by a unit input of source u in round r; only rounds
    # r <= t are non-zero at round t, so the loop works on the first (t + 1) n columns.
    E = torch.zeros(c, n, rounds * n, dtype=torch.float64)
    Q = torch.zeros(c, n, rounds, rounds, dtype=torch.float64)
    Ut = U.transpose(1, 2)
    for t in range(rounds):
        if t > 0:
            P = A @ P @ A.T + eye
            E[:, :, : t * n] = A @ E[:, :, : t * n]
        E[:, :, t * n : (t + 1) * n] = eye
        S = Ut @ P @ U + pad
        root = torch.linalg.inv(torch.linalg.cholesky(S))  # L^-1, S^-1 = L^-T L^-1 (r x r: cheap)
        nu = Ut @ E[:, :, : (t + 1) * n]  # (c, r, (t+1) n)
        Z = (root @ nu).reshape(c, r, t + 1, n).permute(0, 3, 2, 1)  # (c, n, t+1, r)
        Q[:, :, : t + 1, : t + 1] += Z @ Z.transpose(2, 3)
        gain = P @ U @ root.transpose(1, 2) @ root  # P U S^-1
        E[:, :, : (t + 1) * n] -= gain @ nu
        P = P - gain @ U.transpose(1, 2) @ P
        P = (P + P.transpose(1, 2)) / 2
    return Q, bases


def worst_case(Q: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """max {<Q, X> : X PSD, X_rr <= 1} per pair, as an interval [lower, value]: value = 1^T Q 1 when
    Q >= 0 entrywise (then attained), else min(sum |Q|, T lambda_max(Q)) (|X_ij| <= 1 for such X); lower the
    best of two feasible contribution patterns (all equal; signs of Q's top eigenvector). A pair is exact
    when the interval is narrower than ``EXACT_WIDTH``: rounding-size negative entries of Q (round-off of
    the filter) then cost nothing. Returns (value, exact flag, lower)."""
    rounds = Q.shape[-1]
    total = Q.sum((-2, -1))
    value, lower = total, total
    if rounds > 1 and not bool((Q >= 0).all()):
        values, vectors = torch.linalg.eigh(Q)
        signs = torch.where(vectors[..., -1] >= 0, 1.0, -1.0).to(Q.dtype)
        lower = torch.maximum(total, torch.einsum("...a,...ab,...b->...", signs, Q, signs))
        bound = torch.minimum(Q.abs().sum((-2, -1)), rounds * values[..., -1])
        value = torch.where((Q >= 0).all(-1).all(-1), total, bound)
    value, lower = value.clamp(0.0, rounds), lower.clamp(0.0, rounds)
    return value.numpy(), (value - lower <= EXACT_WIDTH).numpy(), lower.numpy()


class ViewLoss(NamedTuple):
    """Losses in units of the per-round local-DP level: ``loss`` (reported), ``exact`` (False where
    ``loss`` is a bound), ``lower`` (a loss some contributions reach), the float rank ``margin`` (NaN when
    every row space was decided over Q) and ``row_space`` (``rational`` or ``float``)."""

    loss: np.ndarray
    exact: np.ndarray
    lower: np.ndarray
    margin: float
    row_space: str


def exact_cost(n: int, steps: int, rounds: int, width: int, bits: int = 0) -> float:
    """Operations of :func:`view_quadratic` over all observers (rank r <= min(n, K b)): the float SVDs, the
    filter for T > 1, and for a rational W = A / d (``bits`` = log2 d) the exact ranks, counted as 64 x
    (n x rows x n x entry bits) for an elimination on integers of K bits bits (calibrated on Erdos-Renyi,
    random geometric, karate and hypercube graphs: about 1e-8 s per unit, as 1e11 float operations take
    about 15 s)."""
    r = min(n, steps * width)
    svd = n * steps * width * n * r
    certify = 64.0 * n * steps * width * n * steps * bits
    if rounds == 1:
        return float(svd + certify)
    return float(
        svd + certify + n * rounds * (4 * n**3 * rounds + 4 * n**2 * r * rounds + 2 * r * n * rounds**2)
    )


def whole_view_loss(
    W: sp.sparray,
    adjacency: sp.sparray,
    steps: int,
    rounds: int,
    chunk_bytes: float = 2e8,
    form: RationalForm | None = None,
) -> ViewLoss:
    """Worst-case Renyi loss of u's T contributions in v's view, [u, v] matrices, in units of the
    per-round local-DP level (at most T); diagonal zero. An observer whose row space could not be decided
    exactly gets bounds, labelled as such: with T = 1 the float leverage plus its Wedin error (capped by the
    reach bound), with T > 1 the reach bound. ``form``: W's rational form when the caller has read it."""
    n = W.shape[0]
    width = closed_neighbourhoods(adjacency).shape[1]
    integer = integer_gossip(W, form)
    # bytes per observer: view rows and SVD factors, then (T > 1) the filter's state errors, Q and P
    per_observer = 8 * 3 * steps * width * n + (
        8 * (n * n * rounds + n * rounds**2 + 3 * n * n) if rounds > 1 else 0
    )
    size = max(1, min(n, int(chunk_bytes // per_observer)))
    F, lower, exact = np.zeros((n, n)), np.zeros((n, n)), np.ones((n, n), dtype=bool)
    certified, margin = np.ones(n, dtype=bool), float("nan")
    for begin in range(0, n, size):
        observers = np.arange(begin, min(n, begin + size))
        Q, bases = view_quadratic(W, adjacency, steps, rounds, observers, integer)
        value, flag, low = worst_case(Q)
        F[:, observers], exact[:, observers], lower[:, observers] = value.T, flag.T, low.T
        certified[observers] = bases.certified
        margin = float(np.fmin(margin, bases.margin))
    if not certified.all():
        distance = shortest_path(adjacency, unweighted=True, directed=False)
        reach = reach_bound(distance, steps, rounds)
        bound = np.minimum(F, reach) if rounds == 1 else reach
        F[:, ~certified], lower[:, ~certified], exact[:, ~certified] = bound[:, ~certified], 0.0, False
    for matrix, diagonal in ((F, 0.0), (lower, 0.0), (exact, True)):
        np.fill_diagonal(matrix, diagonal)
    return ViewLoss(F, exact, lower, margin, "float" if integer is None else "rational")


def reach_bound(distance: np.ndarray, steps: int, rounds: int) -> np.ndarray:
    """Rounds whose contribution of u can reach v's view: round r's is seen through K (T - r) gossip steps
    of N[v], so it reaches v iff dist(u, v) <= K (T - r); each reached round costs at most the local-DP
    level (post-processing of u's release), so F <= #reached rounds (in level units). Diagonal zero."""
    reached = np.clip(rounds - np.ceil(distance / steps) + 1, 0, rounds)
    np.fill_diagonal(reached, 0.0)
    return reached
