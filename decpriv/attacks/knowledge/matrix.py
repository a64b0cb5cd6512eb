"""The knowledge matrix K_T of El Mrini, Cyffers & Bellet (ICML 2024, Sec. 3.1, Eq. 3) and the question it
answers: which private values x_j does K_T X = Y_T determine?

Rows of K_T: e_a for every attacker a, then (W^t)[v, :] for t = 0..T-1 and every non-attacker neighbour v of
the attackers (t = 0 gives e_v). Node j is reconstructible iff e_j lies in the row space of K_T; its value is
then (K_T^+ Y_T)_j, whatever the other unknowns are.

Float mode (default): K_T is never stored whole. Blocks of rows [K_t | Y_t] are folded into the R factor of a
QR decomposition of [K_T | Y_T] (R = [[R11, Q^T Y], [0, *]]), so memory is (n + p)^2 whatever T is; then an SVD
of R11 (same row space as K_T) gives the rank with the cutoff ``rcond * s_max`` and an orthonormal basis N of
the null space. The distance of e_j from the row space is ||N[j, :]||: node j is reconstructible iff it is at
most ``tol``. Both thresholds and the margins around them are reported, so a decision close to the edge is
visible, not hidden (the reference code's fixed-threshold Gauss-Jordan silently fails at a few hundred nodes).

Exact mode: the same rows over the rationals (W's entries are ratios of small integers for the usual gossip
matrices), reduced to RREF with sympy's DomainMatrix; e_j is in the row space iff it is a row of the RREF.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from decpriv.errors import bad


@dataclass(frozen=True, eq=False)
class Knowledge:
    """What K_T determines. ``distance[j]`` is the distance of e_j from the row space (0 in exact mode when
    reconstructible, 1 otherwise); ``groups[j]`` labels identical columns of K_T (nodes the attackers cannot
    tell apart); ``estimate`` is the minimum-norm solution of K_T X = Y_T (exact on reconstructible nodes)."""

    rows: int
    rank: int
    reconstructible: np.ndarray
    distance: np.ndarray
    groups: np.ndarray
    estimate: np.ndarray | None
    numerics: dict[str, float]


def observed_nodes(adjacency: sp.csr_array, attackers: np.ndarray) -> np.ndarray:
    """N(A): the non-attacker neighbours of the attackers, sorted."""
    reach = np.unique(adjacency[attackers].indices)
    return np.setdiff1d(reach, attackers)


def knowledge_blocks(W: sp.csr_array, attackers: np.ndarray, steps: int) -> Iterator[tuple[int, np.ndarray]]:
    """Blocks of K_T in float64: (-1, E_A) then (t, (W^t)[N(A), :]) for t = 0..steps-1, by the sparse product
    M_{t+1} = M_t W (|N(A)| rows at a time, never a power of the whole matrix)."""
    n = W.shape[0]
    eye = sp.identity(n, format="csr", dtype=np.float64)
    yield -1, eye[attackers].toarray()
    seen = observed_nodes(sp.csr_array(W != 0), attackers)
    block = eye[seen].toarray()
    Wt = sp.csr_array(W).T.tocsr()
    for t in range(steps):
        yield t, block
        if t + 1 < steps:
            block = (Wt @ block.T).T


def row_space(
    blocks: Iterator[tuple[np.ndarray, np.ndarray]], n: int, rcond: float | None, tol: float
) -> Knowledge:
    """Float64 row-space test on K_T given as blocks (K_t, Y_t); see the module docstring."""
    R = np.zeros((0, 0))
    rows, width, pending = 0, None, []

    def fold(R: np.ndarray, pending: list[np.ndarray]) -> np.ndarray:
        stacked = np.vstack([R, *pending]) if R.size else np.vstack(pending)
        return la.qr(stacked, mode="r", check_finite=False, overwrite_a=True)[0][: stacked.shape[1]]

    # Folding every few thousand rows at once: one Householder pass over a tall block costs about the same
    # per row as over the whole K_T, while re-factoring R after each small block would dominate.
    for K_t, Y_t in blocks:
        rows += K_t.shape[0]
        pending.append(np.hstack([K_t, Y_t]))
        width = pending[-1].shape[1]
        if sum(b.shape[0] for b in pending) >= 4 * width:
            R, pending = fold(R, pending), []
    if width is None:
        raise ValueError("the knowledge matrix has no rows")
    if pending:
        R = fold(R, pending)
    k = min(R.shape[0], n)
    R11, QtY = np.zeros((n, n)), np.zeros((n, width - n))
    R11[:k], QtY[:k] = R[:k, :n], R[:k, n:]
    U, s, Vt = la.svd(R11, check_finite=False)
    cutoff = (max(rows, n) * np.finfo(np.float64).eps if rcond is None else rcond) * s[0]
    rank = int((s > cutoff).sum())
    null = Vt[rank:].T
    distance = np.linalg.norm(null, axis=1)
    reconstructible = distance <= tol
    estimate = Vt[:rank].T @ ((U[:, :rank].T @ QtY) / s[:rank, None])
    numerics = {
        "rank_cutoff": float(cutoff),
        "smallest_kept_singular_value": float(s[rank - 1]) if rank else 0.0,
        "largest_dropped_singular_value": float(s[rank]) if rank < n else 0.0,
        "distance_tolerance": tol,
        "largest_distance_reconstructed": float(distance[reconstructible].max(initial=0.0)),
        "smallest_distance_not_reconstructed": float(distance[~reconstructible].min(initial=np.inf)),
    }
    # Kept singular values close to the cutoff, or distances near the tolerance: the decision could
    # flip with the thresholds (K_T's rows (W^t)[v,:] all tend to 1/n, so long horizons get here).
    kept = numerics["smallest_kept_singular_value"]
    numerics["ambiguous"] = bool(
        (rank and kept < 1e3 * cutoff)
        or numerics["largest_distance_reconstructed"] > 1e-3 * tol
        or numerics["smallest_distance_not_reconstructed"] < 1e3 * tol
    )
    return Knowledge(rows, rank, reconstructible, distance, column_groups(R11), estimate, numerics)


def column_groups(R11: np.ndarray, digits: int = 9) -> np.ndarray:
    """Labels of equal columns of K_T, read on R11 (K_T = Q R11 with Q injective, so columns of K_T agree iff
    those of R11 do), compared after rounding to ``digits`` significant digits of the largest entry."""
    scale = np.abs(R11).max() or 1.0
    _, labels = np.unique(np.round(R11.T / scale, digits), axis=0, return_inverse=True)
    return canonical(labels.ravel())


def canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel groups 0, 1, ... in order of their first member, so two labellings of one partition agree."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


def float_knowledge(
    W: sp.csr_array, attackers: np.ndarray, steps: int, rcond: float | None = None, tol: float = 1e-6
) -> Knowledge:
    """Reconstructibility alone (no values): the benchmark's "build K_T and decide"."""
    blocks = ((K_t, np.zeros((K_t.shape[0], 0))) for _, K_t in knowledge_blocks(W, attackers, steps))
    return row_space(blocks, W.shape[0], rcond, tol)


def rational_matrix(W: sp.csr_array, max_denominator: int = 10**6) -> tuple[dict[int, dict[int, int]], int]:
    """W = A / d with A integer (returned as {row: {col: value}}): each entry read as the nearest fraction
    with denominator <= max_denominator, refused unless that reproduces the float to 1e-15."""
    coo = sp.coo_array(W)
    fractions = [Fraction(float(x)).limit_denominator(max_denominator) for x in coo.data]
    worst = max((abs(float(f) - x) for f, x in zip(fractions, coo.data, strict=True)), default=0.0)
    if worst > 1e-15:
        raise bad(
            "attack.exact",
            True,
            f"the gossip matrix has an entry that is no small-denominator fraction (off by {worst:.1e})",
            "use attack.exact=false (float mode) or a rational gossip_matrix such as metropolis_hastings",
        )
    d = int(np.lcm.reduce([f.denominator for f in fractions])) if fractions else 1
    A: dict[int, dict[int, int]] = {}
    for i, j, f in zip(coo.row.tolist(), coo.col.tolist(), fractions, strict=True):
        A.setdefault(i, {})[j] = f.numerator * (d // f.denominator)
    return A, d


def exact_knowledge(W: sp.csr_array, attackers: np.ndarray, steps: int) -> Knowledge:
    """Rank, reconstructible nodes and equal columns of K_T in exact rational arithmetic (rows scaled by
    powers of the common denominator d, which leaves the row space unchanged)."""
    from sympy import QQ, ZZ
    from sympy.polys.matrices import DomainMatrix

    n = W.shape[0]
    A, _ = rational_matrix(W)
    seen = observed_nodes(sp.csr_array(W != 0), attackers)

    def unit_rows(nodes: np.ndarray) -> DomainMatrix:
        return DomainMatrix({i: {int(v): ZZ(1)} for i, v in enumerate(nodes)}, (len(nodes), n), ZZ)

    Wz = DomainMatrix({i: {j: ZZ(x) for j, x in row.items()} for i, row in A.items()}, (n, n), ZZ)
    block = unit_rows(seen)
    parts = [unit_rows(attackers)]
    for t in range(steps):
        parts.append(block)
        if t + 1 < steps:
            block = block * Wz
    K = parts[0].vstack(*parts[1:]).convert_to(QQ)
    rref, pivots = K.rref()
    entries = rref.to_sdm()
    reconstructible = np.zeros(n, dtype=bool)
    for i, j in enumerate(pivots):
        reconstructible[j] = len(entries.get(i, {})) == 1
    labels: dict[tuple, int] = {}
    columns = K.transpose().to_sdm()
    groups = np.array(
        [labels.setdefault(tuple(sorted(columns.get(j, {}).items())), len(labels)) for j in range(n)]
    )
    groups = canonical(groups)
    return Knowledge(
        K.shape[0], len(pivots), reconstructible, (~reconstructible).astype(float), groups, None, {}
    )
