"""The row space of an observer's view of gossip, decided in exact rational arithmetic.

During a round, observer v sees y = H_v z with H_v's rows e_w^T W^k, w in N[v], k < K: the block Krylov
sequence of W started from the unit vectors of v's closed neighbourhood (Cyffers et al. 2022, Muffliato,
Sec. 4; the whole-view loss is in :mod:`decpriv.privacy.linear_view`). Everything the network-DP accountant
needs from H_v is its row space: the orthogonal projector Pi_v onto it (Muffliato gossip: f(u, v) = level x
Pi_v[u, u]) or an orthonormal basis U_v of it (the filter of Muffliato-SGD). Long gossip makes the rows
nearly parallel (e_w^T W^k tends to 1^T / n), so a float64 rank decision drops directions that ARE in the
row space and under-reports the loss: on the karate club with K = 20 (Metropolis-Hastings weights),
numpy's rank tolerance put 15% of the pairs below the truth, by up to 0.39 of the local level.

For W = A / d rational (:mod:`decpriv.graphs.rational`), the row space of H_v is that of the integer rows
e_w^T A^k, handled with FLINT (python-flint): the Krylov blocks stop as soon as one adds no rank (their span
is then invariant under A, so no later block adds any either), and the rank over Q is exact. With it,
:func:`decpriv.privacy.linear_view.certified_bases` either certifies the float64 projector (Wedin) or asks
for :func:`projector`: a maximal independent set B of the integer rows, Pi_v = B^T (B B^T)^{-1} B over Q,
rounded once at the end (the diagonal upwards). U_v is then read off the rounded Pi_v by a symmetric
eigendecomposition: Pi_v's eigenvalues are exactly 0 and 1, a gap of 1, so the float basis is accurate to a
few ulps (Davis-Kahan).
"""

import flint
import numpy as np
import scipy.sparse as sp

from decpriv.graphs.rational import RationalForm, rational_form


def integer_gossip(W: sp.sparray, form: RationalForm | None = None) -> flint.fmpz_mat | None:
    """A = d W as a FLINT integer matrix (same row spaces for every power), or None when W is not a
    matrix of small-denominator fractions; ``form``: W's rational form when the caller has read it."""
    form = form or rational_form(W)
    if form.rows is None:
        return None
    n = W.shape[0]
    dense = [[0] * n for _ in range(n)]
    for i, row in form.rows.items():
        for j, value in row.items():
            dense[i][j] = value
    return flint.fmpz_mat(dense)


PRIME = 2**61 - 1  # a Mersenne prime: ranks modulo it propose where the Krylov sequence stops


def krylov_rows(A: flint.fmpz_mat, start: np.ndarray, steps: int) -> tuple[flint.fmpz_mat, int]:
    """The integer rows e_w^T A^k (w in ``start``, k < ``steps``), cut at the first block that adds no rank,
    and their rank over Q.

    Growth is tested modulo a prime first (cheap); a block that adds no rank modulo p is confirmed over Z
    before the sequence stops, so the cut is exact (an unlucky prime can only make the sequence run longer)."""
    n = A.nrows()
    block = flint.fmpz_mat([[1 if j == w else 0 for j in range(n)] for w in start.tolist()])
    rows, modular_rank = [], 0
    for _ in range(steps):
        grown = rows + block.tolist()
        grown_rank = flint.nmod_mat(grown, PRIME).rank()
        # rank_p(rows) <= rank_Q(rows) <= rank_Q(grown): when the last equals rank_p(rows), all three do
        if grown_rank == modular_rank and exact_rank(flint.fmpz_mat(grown)) == modular_rank:
            return flint.fmpz_mat(rows), modular_rank
        rows, modular_rank = grown, grown_rank
        if modular_rank == n:  # rank mod p <= rank over Q <= n
            return flint.fmpz_mat(rows), n
        block = block * A
    H = flint.fmpz_mat(rows)
    return H, exact_rank(H)


def exact_rank(H: flint.fmpz_mat) -> int:
    """Rank over Q, from the echelon form of H^T (FLINT eliminates a tall H^T far faster than a wide H)."""
    return H.transpose().rref()[2]


def projector(H: flint.fmpz_mat, full: bool) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Pi = B^T (B B^T)^{-1} B onto H's row space, exactly (B: a maximal set of independent rows of H, kept
    as the integers they are), then rounded: its diagonal (n,), the whole (n, n) matrix when ``full``, and
    the rank."""
    n = H.ncols()
    echelon, _, rank = H.transpose().rref()
    if rank == n:
        return np.ones(n), (np.eye(n) if full else None), rank
    rows = H.tolist()
    pivots = [next(j for j, x in enumerate(row) if x != 0) for row in echelon.tolist()[:rank]]
    B = flint.fmpz_mat([rows[j] for j in pivots])
    X = (B * B.transpose()).solve(B, integer=False)  # (B B^T)^-1 B over Q
    pairs = zip(B.transpose().tolist(), X.transpose().tolist(), strict=True)
    exact = [float(sum((a * b for a, b in zip(r, x, strict=True)), flint.fmpq(0))) for r, x in pairs]
    diagonal = np.minimum(np.nextafter(np.array(exact), np.inf), 1.0)  # rounded up: never below the truth
    if not full:
        return diagonal, None, rank
    P = flint.fmpq_mat(B).transpose() * X
    return diagonal, np.array([[float(x) for x in row] for row in P.tolist()]), rank


def orthonormal_basis(P: np.ndarray) -> np.ndarray:
    """(n, r) orthonormal basis of the range of a rounded exact projector (eigenvalues 0 or 1)."""
    values, vectors = np.linalg.eigh((P + P.T) / 2)
    return vectors[:, values > 0.5]
