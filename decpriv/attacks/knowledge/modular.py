"""A certified rank test for knowledge matrices, for the cases where float64 cannot tell (El Mrini, Cyffers &
Bellet, ICML 2024, Sec. 3.1: node j is reconstructible iff e_j lies in the row space of K_T).

The knowledge matrices here are K = [E_F; (M^t)[S, :] for t < T] with M = A / d rational (A integer): gossip
has M = W, F the attackers, S their neighbours; D-GD has M = W_TT, F empty (its rows (sum_{i<=t} M^i)[S, :]
span the same space). Its row space is decided in two certified halves:

- lower bound: Gaussian elimination modulo a prime p (not dividing d). Every minor of K is a p-integral
  rational, so a minor that is non-zero mod p is non-zero over Q: rank_p(K) <= rank_Q(K), whatever p.
- upper bound: the number of rows, when rank_p reaches it (full row rank); then e_j outside the row space
  mod p is outside it over Q, and e_j that is itself a row of K is inside: certified when these cover every
  node. Otherwise the kernel basis mod p is lifted to Q by the Chinese remainder theorem over several primes
  and rational reconstruction (Wang 1981), scaled to integers and checked exactly: v[F] = 0 and
  (A^t v)[S] = 0 for t < T, in Python integers. n - rank_p independent verified kernel vectors prove
  rank_Q(K) <= rank_p(K).

When both hold, the rank is rank_p and the verified kernel spans ker K over Q, so node j is reconstructible
iff row j of that basis is zero: an exact answer, not a probable one. The primes only decide whether a
certificate is found (a prime dividing a minor lowers rank_p and is outvoted); they never make it wrong.
Equal columns of K (nodes the attackers cannot tell apart) are proposed by equal columns mod p and each
pair i, j kept only when e_i - e_j is verified exactly to lie in the kernel.
"""

from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from math import gcd, isqrt, lcm

import numpy as np
import scipy.sparse as sp

PRIME_BITS = 25  # p < 2^25: products of two residues stay below 2^50, sums of 2^13 of them fit in int64


@cache
def primes(count: int, below: int = 2**PRIME_BITS) -> list[int]:
    """The ``count`` largest primes below ``below`` (deterministic, so runs repeat exactly)."""
    from sympy import prevprime

    found, p = [], below
    while len(found) < count:
        p = prevprime(p)
        found.append(p)
    return found


@dataclass(frozen=True, eq=False)
class IntegerMatrix:
    """M = A / d with A integer, in CSR form; ``values`` are Python ints (object array) for exact products."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    d: int

    @property
    def n(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def from_rows(cls, rows: dict[int, dict[int, int]], d: int, n: int) -> "IntegerMatrix":
        indptr, indices, values = [0], [], []
        for i in range(n):
            row = rows.get(i, {})
            cols = sorted(row)
            indices += cols
            values += [int(row[j]) for j in cols]
            indptr.append(len(indices))
        return cls(np.array(indptr), np.array(indices, dtype=np.int64), np.array(values, dtype=object), d)

    def modular(self, p: int) -> sp.csr_array:
        """M mod p = (A mod p) (d^-1 mod p), as int64 residues."""
        inverse = pow(self.d, -1, p)
        data = np.array([v % p * inverse % p for v in self.values], dtype=np.int64)
        return sp.csr_array((data, self.indices, self.indptr), shape=(self.n, self.n))

    def times(self, X: np.ndarray) -> np.ndarray:
        """A X exactly, for an (n, k) object array of Python ints."""
        products = self.values[:, None] * X[self.indices]
        out = np.zeros((self.n, X.shape[1]), dtype=object)
        full = np.diff(self.indptr) > 0
        if products.size:
            out[full] = np.add.reduceat(products, self.indptr[:-1][full], axis=0)
        return out


def modular_rows(M: sp.csr_array, fixed: np.ndarray, seen: np.ndarray, steps: int, p: int) -> np.ndarray:
    """K mod p: E_F, then (M^t)[S, :] mod p for t < steps, built by |S| rows at a time."""
    n = M.shape[0]
    eye = np.eye(n, dtype=np.int64)
    Mt = sp.csr_array(M).T.tocsr()
    block, blocks = eye[seen], [eye[fixed]]
    for t in range(steps):
        blocks.append(block)
        if t + 1 < steps:
            block = np.asarray((Mt @ block.T).T) % p
    return np.vstack(blocks)


def rref_mod(K: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of K over GF(p): (its non-zero rows, pivot columns)."""
    K = K % p
    r, pivots = 0, []
    for c in range(K.shape[1]):
        if r == K.shape[0]:
            break
        nonzero = np.flatnonzero(K[r:, c])
        if not nonzero.size:
            continue
        i = r + int(nonzero[0])
        K[[r, i]] = K[[i, r]]
        K[r] = K[r] * pow(int(K[r, c]), -1, p) % p
        column = K[:, c].copy()
        column[r] = 0
        hit = np.flatnonzero(column)
        K[hit] = (K[hit] - column[hit, None] * K[r]) % p
        pivots.append(c)
        r += 1
    return K[:r], pivots


def kernel_mod(R: np.ndarray, pivots: list[int], n: int, p: int) -> np.ndarray:
    """(n, n - rank) kernel basis mod p from an RREF: identity on the free columns."""
    free = np.setdiff1d(np.arange(n), pivots)
    N = np.zeros((n, len(free)), dtype=np.int64)
    N[free, np.arange(len(free))] = 1
    N[pivots] = (-R[:, free]) % p
    return N


def rational(u: int, m: int) -> Fraction | None:
    """a / b = u mod m with |a|, |b| <= sqrt(m / 2), or None (Wang's rational reconstruction)."""
    bound = isqrt(m // 2)
    r0, r1, s0, s1 = m, u % m, 0, 1
    while r1 > bound:
        q = r0 // r1
        r0, r1, s0, s1 = r1, r0 - q * r1, s1, s0 - q * s1
    if s1 == 0 or abs(s1) > bound or gcd(r1, abs(s1)) != 1:
        return None
    return Fraction(r1, s1)


def lift(residues: list[np.ndarray], moduli: list[int]) -> np.ndarray | None:
    """Integer columns (object array) whose residues are ``residues`` up to a rational scale per column, by
    CRT + rational reconstruction; None when some entry does not reconstruct yet."""
    m = 1
    combined = np.zeros(residues[0].shape, dtype=object)
    for N, p in zip(residues, moduli, strict=True):
        # x = combined mod m, x = N mod p  ->  x = combined + m * ((N - combined) * m^-1 mod p)
        step = ((N.astype(object) - combined) % p * pow(m, -1, p)) % p
        combined = combined + m * step
        m *= p
    out = np.zeros(combined.shape, dtype=object)
    for k in range(combined.shape[1]):
        column = []
        for u in combined[:, k]:
            f = rational(int(u), m) if u else Fraction(0)
            if f is None:
                return None
            column.append(f)
        scale = lcm(*(f.denominator for f in column))
        out[:, k] = [f.numerator * (scale // f.denominator) for f in column]
    return out


def vanishing(M: IntegerMatrix, fixed: np.ndarray, seen: np.ndarray, steps: int, V: np.ndarray) -> np.ndarray:
    """(k,) True where column v of V satisfies K v = 0 exactly: v[F] = 0 and (A^t v)[S] = 0 for t < steps."""
    ok = ~(V[fixed] != 0).any(0)
    X = V
    for t in range(steps):
        ok &= ~(X[seen] != 0).any(0)
        if t + 1 < steps:
            X = M.times(X)
    return ok


@dataclass(frozen=True, eq=False)
class Certificate:
    """rank_Q(K), the reconstructible columns, labels of equal columns, the primes it took and how it was
    decided (``modular`` here; ``rational`` for sympy's RREF, the fallback)."""

    rank: int
    reconstructible: np.ndarray
    groups: np.ndarray
    primes: int
    method: str = "modular"


def certify(
    M: IntegerMatrix, fixed: np.ndarray, seen: np.ndarray, steps: int, max_primes: int = 64
) -> Certificate | None:
    """The exact row-space answer for K = [E_F; (M^t)[S, :], t < steps], or None when ``max_primes`` primes
    do not produce a verified certificate (see the module docstring)."""
    n = M.n
    best: tuple[int, ...] | None = None
    residues: list[np.ndarray] = []
    moduli: list[int] = []
    columns: np.ndarray | None = None
    used = 0
    for p in primes(max_primes + 4):
        if M.d % p == 0:
            continue
        used += 1
        if used > max_primes:
            break
        K = modular_rows(M.modular(p), fixed, seen, steps, p)
        R, pivots = rref_mod(K, p)
        key = tuple(pivots)
        # rank_p <= rank_Q, and with equal rank the pivots over Q come first: keep the highest rank, then
        # the earliest pivots; primes that do worse divide a minor and are ignored.
        if best is None or len(key) > len(best) or (len(key) == len(best) and key < best):
            best, residues, moduli, columns = key, [], [], K
        if key != best:
            continue
        if len(key) == n:
            return Certificate(n, np.ones(n, dtype=bool), np.arange(n), used)
        if len(key) == len(K):
            # full row rank: rank_Q = rank_p; e_j outside the row space mod p is outside it over Q
            # (rank_p [K; e_j] = rank + 1), and e_j among K's own rows is inside it trivially
            member = np.zeros(n, dtype=bool)
            member[[j for i, j in enumerate(pivots) if np.count_nonzero(R[i]) == 1]] = True
            if np.isin(np.flatnonzero(member), np.union1d(fixed, seen)).all():
                return Certificate(len(key), member, equal_columns(M, fixed, seen, steps, K), used)
        residues.append(kernel_mod(R, pivots, n, p))
        moduli.append(p)
        if len(moduli) & (len(moduli) - 1):
            continue  # lift after 1, 2, 4, 8 ... primes: the reconstruction costs more than one prime
        V = lift(residues, moduli)
        if V is None or not vanishing(M, fixed, seen, steps, V).all():
            continue
        reconstructible = ~(V != 0).any(1)
        return Certificate(len(key), reconstructible, equal_columns(M, fixed, seen, steps, columns), used)
    return None


def equal_columns(
    M: IntegerMatrix, fixed: np.ndarray, seen: np.ndarray, steps: int, K: np.ndarray
) -> np.ndarray:
    """Labels of equal columns of K over Q: candidates share a column mod p, kept when e_i - e_rep is in the
    kernel exactly; labels in order of first member."""
    n = M.n
    _, first, labels = np.unique(K.T, axis=0, return_index=True, return_inverse=True)
    labels = labels.ravel()
    rep = first[labels]
    others = np.flatnonzero(rep != np.arange(n))
    if others.size:
        D = np.zeros((n, others.size), dtype=object)
        D[others, np.arange(others.size)] = 1
        D[rep[others], np.arange(others.size)] = -1
        split = others[~vanishing(M, fixed, seen, steps, D)]
        labels = labels.copy()
        labels[split] = labels.max() + 1 + np.arange(split.size)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


FLOAT_PRIME_BITS = 20  # residues below 2^20: a product is below 2^40, so 8191 of them sum exactly in float64
EXACT_TERMS = 2 ** (53 - 2 * FLOAT_PRIME_BITS) - 1


def matmul_mod(A: np.ndarray, B: np.ndarray, p: int) -> np.ndarray:
    """A @ B mod p for float64 residues below 2^20, by BLAS, exact: the inner dimension is summed
    ``EXACT_TERMS`` at a time and reduced in between."""
    out = np.zeros((A.shape[0], B.shape[1]))
    for start in range(0, A.shape[1], EXACT_TERMS):
        out += A[:, start : start + EXACT_TERMS] @ B[start : start + EXACT_TERMS]
        np.fmod(out, p, out=out)
    return out


class Echelon:
    """A reduced row echelon basis over GF(p) grown block by block (float64 residues, p < 2^20).

    Each block is first reduced by the basis (one matrix product), then put in RREF on the columns that are
    not pivots yet (a pivot loop over the block only), and the basis is cleared on the new pivot columns (a
    second product). The work is two products of the sizes (rows x rank x n) instead of a Python step per
    pivot over the whole matrix, which at n = 5000 is what makes a certified rank affordable.
    """

    def __init__(self, n: int, p: int):
        if p >= 2**FLOAT_PRIME_BITS:
            raise ValueError(f"the float64 elimination needs p < 2^{FLOAT_PRIME_BITS}")
        self.n, self.p = n, p
        self._rows = np.zeros((0, n))  # grown geometrically: the basis is its first ``rank`` rows
        self.pivots = np.zeros(0, dtype=np.int64)

    @property
    def rank(self) -> int:
        return len(self.pivots)

    @property
    def basis(self) -> np.ndarray:
        return self._rows[: self.rank]

    def add(self, rows: np.ndarray) -> int:
        """Fold in ``rows`` (integer residues mod p); returns how much the rank grew."""
        p = self.p
        X = np.mod(np.asarray(rows, dtype=np.float64), p)
        if self.rank:
            X = np.mod(X - matmul_mod(X[:, self.pivots], self.basis, p), p)
        free = np.setdiff1d(np.arange(self.n), self.pivots)
        R, local = rref_float(X[:, free], p)
        if not local:
            return 0
        new = np.zeros((len(local), self.n))
        new[:, free] = R
        pivots = free[local]
        basis = self.basis
        # in place, 1024 basis rows at a time: at n = 5000 the basis alone is 200 MB
        for start in range(0, self.rank, 1024):
            rows = basis[start : start + 1024]
            rows -= matmul_mod(rows[:, pivots], new, p)
            np.mod(rows, p, out=rows)
        end = self.rank + len(local)
        if end > len(self._rows):
            grown = np.zeros((min(self.n, max(end, 2 * len(self._rows))), self.n))
            grown[: self.rank] = basis
            self._rows = grown
        self._rows[self.rank : end] = new
        self.pivots = np.concatenate([self.pivots, pivots])
        return len(local)


def rref_float(X: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """RREF over GF(p) of a small block of float64 residues: (its non-zero rows, pivot columns)."""
    X = X.copy()
    r, pivots = 0, []
    while r < X.shape[0]:
        live = np.flatnonzero((X[r:] != 0).any(0))
        if not live.size:
            break
        c = int(live[0])
        i = r + int(np.flatnonzero(X[r:, c])[0])
        X[[r, i]] = X[[i, r]]
        X[r] = np.mod(X[r] * pow(int(X[r, c]), -1, p), p)
        column = X[:, c].copy()
        column[r] = 0
        hit = np.flatnonzero(column)
        X[hit] = np.mod(X[hit] - column[hit, None] * X[r], p)
        pivots.append(c)
        r += 1
    return X[:r], pivots


def full_rank_steps(
    M: IntegerMatrix, fixed: np.ndarray, seen: np.ndarray, steps: int, block: int = 128, tries: int = 2
) -> int | None:
    """The fewest leading steps t <= ``steps`` with rank_p [E_F; (M^s)[S, :], s < t] = n for a prime p, or
    None when no tried prime reaches n within ``steps``.

    Certified: a non-zero n x n minor mod p is non-zero over Q (module docstring), so those rows, and K_T
    which contains them, have full column rank over Q: every node is determined. The rows are streamed and
    the elimination stops at rank n, so the long tail of a horizon (rows ever closer to 1/n) is never read.
    """
    n = M.n
    if len(fixed) + steps * len(seen) < n:  # fewer rows than unknowns: no prime can reach rank n
        return None
    for p in primes(tries + 4, below=2**FLOAT_PRIME_BITS):
        if M.d % p == 0:
            continue
        tries -= 1
        echelon = Echelon(n, p)
        Mt = sp.csr_array(M.modular(p)).T.tocsr()
        if len(fixed):
            units = np.zeros((len(fixed), n))
            units[np.arange(len(fixed)), fixed] = 1
            echelon.add(units)
        current = np.zeros((len(seen), n), dtype=np.int64)
        current[np.arange(len(seen)), seen] = 1
        for t in range(steps):
            for start in range(0, len(seen), block):
                echelon.add(current[start : start + block])
                if echelon.rank == n:
                    return t + 1
            current = np.asarray((Mt @ current.T).T) % p
        if not tries:
            break
    return None
