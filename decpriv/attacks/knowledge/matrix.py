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

Large networks (more than ``DENSE_LIMIT`` nodes): the dense float64 decision costs O(n^3) time and three n x n
arrays (at n = 5000, minutes and 0.6 GB), and its long-horizon rows (W^t)[v, :], all close to 1/n, blur its
margins. There the certified test comes first (:func:`.modular.full_rank_steps`): the rows are eliminated
modulo a prime as they stream in, and once the leading t steps reach rank n over GF(p) they have full column
rank over Q, so every node is determined, exactly. The values then solve the least-squares system of those
leading rows only (the best-conditioned ones; the system is consistent, so any full-rank subset gives the
same solution). When no prime reaches rank n, the dense path below decides as usual.

Exact mode: the same rows over the rationals (W's entries are ratios of small integers for the usual gossip
matrices), reduced to RREF with sympy's DomainMatrix; e_j is in the row space iff it is a row of the RREF.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from decpriv.attacks.knowledge.modular import Certificate, IntegerMatrix, certify, full_rank_steps
from decpriv.errors import ConfigError, bad_value
from decpriv.graphs.rational import rational_form
from decpriv.report.progress import updates

MARGIN = 1e3  # how far from a threshold a float64 decision must lie to be taken without a certificate
DENSE_LIMIT = 2000  # above this many nodes the certified full-rank test runs before the dense float64 one
DENSE_MAX = 12000  # the dense decision's four n x n float64 arrays: 4.6 GB and ~2e12 operations here


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
    blocks: Iterator[tuple[np.ndarray, np.ndarray]],
    n: int,
    rcond: float | None,
    tol: float,
    certify: Callable[[], Certificate | None] | None = None,
) -> Knowledge:
    """Float64 row-space test on K_T given as blocks (K_t, Y_t); when its margins are ambiguous, the decision
    is handed to ``certify`` (:mod:`.modular`, exact) and the values are re-solved at the certified rank."""
    R11, QtY, rows = fold_qr(blocks, n)
    U, s, Vt = la.svd(R11, check_finite=False)
    cutoff = (max(rows, n) * np.finfo(np.float64).eps if rcond is None else rcond) * s[0]
    rank = int((s > cutoff).sum())
    distance = np.linalg.norm(Vt[rank:].T, axis=1)
    reconstructible = distance <= tol
    numerics = {
        "rank_cutoff": float(cutoff),
        "smallest_kept_singular_value": float(s[rank - 1]) if rank else 0.0,
        "largest_dropped_singular_value": float(s[rank]) if rank < n else 0.0,
        "distance_tolerance": tol,
        "largest_distance_reconstructed": float(distance[reconstructible].max(initial=0.0)),
        "smallest_distance_not_reconstructed": float(distance[~reconstructible].min(initial=np.inf)),
        "float_rank": rank,
    }
    numerics["float_ambiguous"] = ambiguous(numerics, rows, n)
    numerics["decided_by"] = "float64"
    numerics["float_disagreements"] = 0
    numerics["certificate_primes"] = 0
    estimate = solve_at_rank(U, s, Vt, QtY, rank)
    groups = column_groups(R11)
    if numerics["float_ambiguous"]:
        certificate = certify() if certify is not None else None
        numerics["decided_by"] = "undecided" if certificate is None else certificate.method
        if certificate is not None:
            numerics["float_disagreements"] = int((certificate.reconstructible != reconstructible).sum())
            numerics["certificate_primes"] = certificate.primes
            # nodes float64 already determined keep its better-conditioned solution
            estimate = np.where(
                reconstructible[:, None], estimate, solve_at_rank(U, s, Vt, QtY, certificate.rank)
            )
            rank, reconstructible, groups = certificate.rank, certificate.reconstructible, certificate.groups
            distance = np.linalg.norm(Vt[rank:].T, axis=1)
    return Knowledge(rows, rank, reconstructible, distance, groups, estimate, numerics)


def fold_qr(blocks: Iterator[tuple[np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(R11, Q^T Y, number of rows) of the QR of [K_T | Y_T], folding the blocks in as they come."""
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
            updates.debug("elimination: %d rows of K_T folded into R", rows)
    if width is None:
        raise ValueError("the knowledge matrix has no rows")
    if pending:
        R = fold(R, pending)
    k = min(R.shape[0], n)
    R11, QtY = np.zeros((n, n)), np.zeros((n, width - n))
    R11[:k], QtY[:k] = R[:k, :n], R[:k, n:]
    return R11, QtY, rows


def solve_at_rank(U: np.ndarray, s: np.ndarray, Vt: np.ndarray, QtY: np.ndarray, rank: int) -> np.ndarray:
    """Minimum-norm solution of R11 X = Q^T Y keeping the ``rank`` largest singular values."""
    return Vt[:rank].T @ ((U[:, :rank].T @ QtY) / s[:rank, None])


def ambiguous(numerics: dict[str, float], rows: int, n: int, margin: float = MARGIN) -> bool:
    """True when float64 cannot be trusted with the decision: a kept singular value within ``margin`` of the
    cutoff, a dropped one above cutoff / ``margin`` (a true zero lands near eps * s_max, far below), or a
    row-space distance within ``margin`` of the tolerance on either side. K_T's rows (W^t)[v, :] all tend to
    1/n, so long horizons get here."""
    cutoff, tol = numerics["rank_cutoff"], numerics["distance_tolerance"]
    kept = numerics["smallest_kept_singular_value"]
    full = numerics["float_rank"] == min(rows, n)  # nothing more to keep: dropped values are exact zeros
    return bool(
        (kept and kept < margin * cutoff)
        or (not full and numerics["largest_dropped_singular_value"] > cutoff / margin)
        or numerics["largest_distance_reconstructed"] > tol / margin
        or numerics["smallest_distance_not_reconstructed"] < margin * tol
    )


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
    W: sp.csr_array,
    attackers: np.ndarray,
    steps: int,
    rcond: float | None = None,
    tol: float = 1e-6,
    certified: bool = True,
    dense_limit: int = DENSE_LIMIT,
    dense_max: int = DENSE_MAX,
) -> Knowledge:
    """Reconstructibility alone (no values): the benchmark's "build K_T and decide" (``certified``: hand
    ambiguous margins to the modular certificate and, above ``dense_limit`` nodes, try the certified
    full-rank test first, as the attack does)."""
    blocks = ((K_t, np.zeros((K_t.shape[0], 0))) for _, K_t in knowledge_blocks(W, attackers, steps))
    return gossip_row_space(W, attackers, steps, blocks, rcond, tol, certified, dense_limit, dense_max)


def gossip_row_space(
    W: sp.csr_array,
    attackers: np.ndarray,
    steps: int,
    blocks: Iterator[tuple[np.ndarray, np.ndarray]],
    rcond: float | None,
    tol: float,
    certified: bool = True,
    dense_limit: int = DENSE_LIMIT,
    dense_max: int = DENSE_MAX,
) -> Knowledge:
    """The gossip system's answer from its blocks (K_t, Y_t): certified full rank first on large networks
    (module docstring), else :func:`row_space`, refused in one sentence past ``dense_max`` nodes."""
    n = W.shape[0]
    integer = integer_matrix(W) if certified else None
    check = None
    if integer is not None:
        seen = observed_nodes(sp.csr_array(W != 0), attackers)
        leading = full_rank_steps(integer, attackers, seen, steps) if n > dense_limit else None
        if leading is not None:
            total = len(attackers) + steps * len(seen)
            return full_rank_knowledge(islice(blocks, leading + 1), n, total, tol, leading)
        check = gossip_decider(W, integer, attackers, seen, steps)
    if n > dense_max:  # a bound, not a swap storm: memory and time grow as n^2 and n^3
        raise too_dense(n, f"the certified test found no full rank in {steps} steps", dense_max)
    return row_space(blocks, n, rcond, tol, check)


def too_dense(n: int, why: str, dense_max: int = DENSE_MAX) -> ConfigError:
    """The refusal of a decision only the dense float64 path could make, past ``dense_max`` nodes."""
    return bad_value(
        "topology.n",
        n,
        f"{why}, and the dense decision would take about {4 * 8 * n * n / 1e9:.1f} GB "
        f"and {n**3:.1e} operations",
        f"use topology.n <= {dense_max}, or more corrupt nodes or rounds so that the attackers' view "
        "reaches every node",
    )


def check_decidable(W: sp.csr_array, attackers: np.ndarray, steps: int, dense_max: int = DENSE_MAX) -> None:
    """Before the simulation: refuse a gossip run past ``dense_max`` nodes whose certified full-rank test
    cannot succeed (fewer rows in K_T than nodes, or a gossip matrix of no small-denominator fractions),
    so that only the dense decision :func:`gossip_row_space` refuses could answer. Whether the certified
    test reaches full rank with enough rows is known only by running it, after the simulation."""
    n = W.shape[0]
    if n <= dense_max:
        return
    seen = len(observed_nodes(sp.csr_array(W != 0), attackers))
    rows = len(attackers) + steps * seen
    if rows < n:
        why = (
            f"K_T has {rows} rows ({len(attackers)} corrupt nodes, {steps} steps of {seen} observed "
            f"neighbours) for {n} unknowns, so no full rank can be certified"
        )
        raise too_dense(n, why, dense_max)
    if integer_matrix(W) is None:
        raise too_dense(
            n, "the gossip matrix has no small-denominator form, so no full rank can be certified", dense_max
        )


def full_rank_knowledge(
    blocks: Iterator[tuple[np.ndarray, np.ndarray]], n: int, rows: int, tol: float, leading: int
) -> Knowledge:
    """Every node determined (full column rank, certified mod p by the caller); values by least squares on
    the given leading blocks, through the folded QR (R11 is invertible: those rows have rank n)."""
    R11, QtY, _ = fold_qr(blocks, n)
    estimate = la.solve_triangular(R11, QtY, check_finite=False) if QtY.shape[1] else np.zeros((n, 0))
    diagonal = np.abs(np.diag(R11))
    numerics = {
        "rank_cutoff": float("nan"),
        "smallest_kept_singular_value": float("nan"),
        "largest_dropped_singular_value": 0.0,
        "distance_tolerance": tol,
        "largest_distance_reconstructed": 0.0,
        "smallest_distance_not_reconstructed": float("inf"),
        "float_rank": float("nan"),
        "float_ambiguous": float("nan"),
        "decided_by": "modular",
        "float_disagreements": float("nan"),
        "certificate_primes": 1,
        "certified_steps": leading,
        # how well the values are conditioned: the spread of |diag R| bounds kappa(R11) from below
        "r_diagonal_ratio": float(diagonal.min() / diagonal.max()),
    }
    ones = np.ones(n, dtype=bool)
    return Knowledge(rows, n, ones, np.zeros(n), np.arange(n), estimate, numerics)


def integer_matrix(M: sp.csr_array) -> IntegerMatrix | None:
    """M = A / d with A integer (:func:`rational_matrix`), or None when M is not a matrix of
    small-denominator fractions."""
    try:
        rows, d = rational_matrix(M)
    except ConfigError:
        return None
    return IntegerMatrix.from_rows(rows, d, M.shape[0])


def certifier(
    M: sp.csr_array, fixed: np.ndarray, seen: np.ndarray, steps: int
) -> Callable[[], Certificate | None] | None:
    """The exact decision for K = [E_F; (M^t)[S, :], t < steps] as a deferred call (only ambiguous runs pay
    for it), or None when M is not a matrix of small-denominator fractions."""
    integer = integer_matrix(M)
    if integer is None:
        return None
    return lambda: certify(integer, np.asarray(fixed), np.asarray(seen), steps)


def gossip_certifier(
    W: sp.csr_array, attackers: np.ndarray, steps: int
) -> Callable[[], Certificate | None] | None:
    """:func:`certifier` for K_T of gossip averaging (F = the attackers, S = their other neighbours), falling
    back to sympy's rational RREF when no modular certificate is found."""
    integer = integer_matrix(W)
    if integer is None:
        return None
    return gossip_decider(W, integer, attackers, observed_nodes(sp.csr_array(W != 0), attackers), steps)


def gossip_decider(
    W: sp.csr_array, integer: IntegerMatrix, attackers: np.ndarray, seen: np.ndarray, steps: int
) -> Callable[[], Certificate]:
    """:func:`gossip_certifier` on W's integer form and observed nodes already built."""

    def decide() -> Certificate:
        found = certify(integer, np.asarray(attackers), np.asarray(seen), steps)
        if found is not None:
            return found
        exact = exact_knowledge(W, attackers, steps)
        return Certificate(exact.rank, exact.reconstructible, exact.groups, 0, "rational")

    return decide


def rational_matrix(W: sp.csr_array, max_denominator: int = 10**6) -> tuple[dict[int, dict[int, int]], int]:
    """W = A / d with A integer (returned as {row: {col: value}}), refused with the attack's key when W is not
    a matrix of small-denominator fractions (:func:`decpriv.graphs.rational.rational_form`)."""
    form = rational_form(W, max_denominator)
    if form.rows is None:
        raise bad_value(
            "attack.exact",
            True,
            f"the gossip matrix has an entry that is no small-denominator fraction (off by {form.error:.1e})",
            "use attack.exact=false (float mode) or a rational gossip_matrix such as metropolis_hastings",
        )
    return form.rows, form.d


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
