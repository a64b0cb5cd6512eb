"""A gossip matrix read exactly: W = A / d with A integer, when its entries are small-denominator fractions.

The usual weightings (Metropolis-Hastings, max-degree, uniform) are ratios of small integers, so the exact
questions asked of W (is e_j in a row space? what is the projector onto it?) can be answered over the
rationals. Each float entry is read as the nearest fraction with denominator <= ``max_denominator`` and
accepted only when that fraction reproduces the float to 1e-15.
"""

from fractions import Fraction
from math import lcm
from typing import NamedTuple

import scipy.sparse as sp


class RationalForm(NamedTuple):
    """``rows[i][j]`` the integer A[i, j] (non-zero entries only), ``d`` the common denominator, ``error``
    the largest |A / d - W| entry (above 1e-15 the form is refused and ``rows`` is None)."""

    rows: dict[int, dict[int, int]] | None
    d: int
    error: float


def rational_form(W: sp.sparray, max_denominator: int = 10**6) -> RationalForm:
    """W = A / d, or ``rows=None`` with the reading error when W is not a matrix of small fractions."""
    coo = sp.coo_array(W)
    fractions = [Fraction(float(x)).limit_denominator(max_denominator) for x in coo.data]
    # A diagonal that completes its row to 1 (metropolis_hastings, max_degree...) has the lcm of the row's
    # denominators, past max_denominator on graphs of a few hundred nodes: read it as 1 - the row's others.
    off: dict[int, Fraction] = {}
    for i, j, f in zip(coo.row.tolist(), coo.col.tolist(), fractions, strict=True):
        if i != j:
            off[i] = off.get(i, 0) + f
    fractions = [
        1 - off.get(i, 0) if i == j and abs(float(f) - x) > 1e-15 else f
        for i, j, f, x in zip(coo.row.tolist(), coo.col.tolist(), fractions, coo.data, strict=True)
    ]
    worst = max((abs(float(f) - x) for f, x in zip(fractions, coo.data, strict=True)), default=0.0)
    d = lcm(*(f.denominator for f in fractions))  # Python ints: lcm(1..60) overflows int64
    if worst > 1e-15:
        return RationalForm(None, d, worst)
    A: dict[int, dict[int, int]] = {}
    for i, j, f in zip(coo.row.tolist(), coo.col.tolist(), fractions, strict=True):
        A.setdefault(i, {})[j] = f.numerator * (d // f.denominator)
    return RationalForm(A, d, worst)
