"""The knowledge matrix at scale: the blocked modular elimination against the one-pivot-at-a-time reference,
the certified full-rank path against the dense float64 path it pre-empts on large networks, and the exact
reading of gossip matrices whose diagonal has a large denominator."""

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import mh

from decpriv.attacks.knowledge.matrix import (
    check_decidable,
    float_knowledge,
    gossip_row_space,
    knowledge_blocks,
    observed_nodes,
    rational_matrix,
)
from decpriv.attacks.knowledge.modular import (
    FLOAT_PRIME_BITS,
    Echelon,
    IntegerMatrix,
    full_rank_steps,
    matmul_mod,
    primes,
    rref_mod,
)
from decpriv.errors import ConfigError


def er(n: int, seed: int) -> nx.Graph:
    graph = nx.gnp_random_graph(n, 2 * np.log(n) / n, seed=seed)
    assert nx.is_connected(graph)
    return graph


@pytest.mark.parametrize("seed", range(6))
def test_blocked_echelon_equals_pivot_by_pivot_rref(seed):
    """Random integer matrices, full and rank-deficient, fed in blocks of 7 rows: same rank, pivots and RREF
    over GF(p) as :func:`rref_mod` on the whole matrix."""
    rng = np.random.default_rng(seed)
    p = primes(1, below=2**FLOAT_PRIME_BITS)[0]
    m, n = (int(v) for v in rng.integers(5, 60, 2))
    r = int(rng.integers(1, min(m, n) + 1))
    K = (
        (rng.integers(0, p, (m, r)) @ rng.integers(0, 3, (r, n))) % p
        if seed % 2
        else rng.integers(0, p, (m, n))
    )
    K[rng.random(m) < 0.3] = 0
    R, pivots = rref_mod(K.copy(), p)
    echelon = Echelon(n, p)
    grown = sum(echelon.add(K[start : start + 7]) for start in range(0, m, 7))
    order = np.argsort(echelon.pivots)
    assert grown == echelon.rank == len(pivots) >= 1
    np.testing.assert_array_equal(echelon.pivots[order], pivots)
    np.testing.assert_array_equal(echelon.basis[order].astype(np.int64), R)


def test_float_matmul_mod_is_exact_past_one_chunk():
    """Inner dimension 20000 > the 8191 products float64 sums exactly: chunked, it equals Python integers."""
    rng = np.random.default_rng(0)
    p = primes(1, below=2**FLOAT_PRIME_BITS)[0]
    A, B = rng.integers(p - 5, p, (2, 20000)), rng.integers(p - 5, p, (20000, 3))
    exact = np.array(
        [[sum(int(a) * int(b) for a, b in zip(row, col, strict=True)) % p for col in B.T] for row in A]
    )
    np.testing.assert_array_equal(matmul_mod(A.astype(float), B.astype(float), p).astype(np.int64), exact)


def test_diagonal_read_as_one_minus_the_row():
    """ER(400): Metropolis-Hastings diagonals have denominators lcm(1 + max degrees) > 10^6, which the
    nearest-fraction reading cannot represent; read as 1 - the row's other entries, W is exactly A / d."""
    W = mh(er(400, 400))
    diagonal = [Fraction(float(x)).limit_denominator(10**6) for x in W.diagonal()]
    assert (
        max(abs(float(f) - x) for f, x in zip(diagonal, W.diagonal(), strict=True)) > 1e-12
    )  # the old reading fails
    rows, d = rational_matrix(W)
    for i in (0, 17, 399):
        assert sum(rows[i].values()) == d  # rows sum to exactly 1
        for j, a in rows[i].items():
            assert abs(a / d - W[i, j]) < 1e-15


@pytest.mark.parametrize(("n", "share", "steps"), [(150, 0.02, 10), (300, 0.01, 15)])
def test_certified_full_rank_path_equals_dense_path(n, share, steps):
    """Forced at small n (dense_limit=0): where the dense float64 path finds rank n with clear margins, the
    certified path finds it too, from fewer leading steps, and solves the values as accurately (the leading rows
    are the well-conditioned ones)."""
    W = mh(er(n, n))
    attackers = np.arange(max(1, round(share * n)))
    dense = float_knowledge(W, attackers, steps)
    assert dense.rank == n and not dense.numerics["float_ambiguous"]
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, 3))
    seen = observed_nodes(sp.csr_array(W != 0), attackers)
    powers = {}
    for t, K_t in knowledge_blocks(W, attackers, steps):
        powers[t] = K_t

    def blocks():
        yield powers[-1], X[attackers]
        for t in range(steps):
            yield powers[t], powers[t] @ X

    scaled = gossip_row_space(W, attackers, steps, blocks(), None, 1e-6, dense_limit=0)
    assert scaled.numerics["decided_by"] == "modular"
    assert 1 <= scaled.numerics["certified_steps"] <= steps
    assert scaled.rank == n and scaled.reconstructible.all() and scaled.rows == dense.rows
    reference = gossip_row_space(W, attackers, steps, blocks(), None, 1e-6)
    assert reference.numerics["decided_by"] == "float64"
    error, reference_error = np.abs(scaled.estimate - X).max(), np.abs(reference.estimate - X).max()
    assert error < 1e-5 and error < 10 * reference_error + 1e-12
    M = IntegerMatrix.from_rows(*rational_matrix(W), n)
    leading = scaled.numerics["certified_steps"]
    assert full_rank_steps(M, attackers, seen, leading - 1) is None  # one step fewer does not reach rank n


def test_rank_deficient_system_falls_back_to_the_dense_path():
    """Star with the attacker on a leaf: the other leaves stay indistinguishable at any horizon, so no prime
    reaches rank n and the answer is the dense path's (rank 3, two nodes)."""
    W = mh(nx.star_graph(6))
    scaled = float_knowledge(W, np.array([1]), 4, dense_limit=0)
    dense = float_knowledge(W, np.array([1]), 4)
    assert scaled.rank == dense.rank == 3
    np.testing.assert_array_equal(scaled.reconstructible, dense.reconstructible)
    # the dense path decides: float64 where its margins are clear, else its kernel certificate ("modular";
    # numpy 2.4's SVD puts this star's zero singular values close enough to the cutoff to ask for it)
    assert scaled.numerics["decided_by"] == dense.numerics["decided_by"] in ("float64", "modular")
    assert "certified_steps" not in scaled.numerics  # no prime certified a leading horizon
    np.testing.assert_array_equal(np.flatnonzero(scaled.reconstructible), [0, 1])  # hub and attacker


def test_a_dense_decision_past_its_bound_is_refused_before_allocating():
    """The same star past a (lowered) bound: one sentence naming topology.n, its cost and the fix, instead
    of three n x n arrays (at n = 20000 the unbounded run took 5.5 GB in 24 s and kept growing)."""
    W = mh(nx.star_graph(6))
    with pytest.raises(ConfigError, match=r"topology.n=7: .* GB and .* operations; use topology.n <= 5"):
        float_knowledge(W, np.array([1]), 4, dense_limit=0, dense_max=5)


def _refusal(decide) -> str | None:
    try:
        decide()
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize(
    ("graph", "attackers", "steps", "refused"),
    [
        (nx.cycle_graph(30), [0], 5, True),  # 1 + 5 x 2 rows for 30 unknowns
        (nx.star_graph(6), [1], 4, True),  # 1 + 4 x 1 rows for 7 unknowns
        (er(60, 1), [0, 1, 2], 30, False),  # enough rows, and the certified test reaches rank n
    ],
)
def test_the_precheck_refuses_before_simulating_only_what_the_decision_would(
    graph, attackers, steps, refused
):
    """``check_decidable`` (run by the attack's prepare, before the simulation) against the decision after
    it, both past a lowered bound: what the precheck refuses the decision refuses too, with the same fix."""
    W, attackers = mh(graph), np.array(attackers)
    early = _refusal(lambda: check_decidable(W, attackers, steps, dense_max=5))
    late = _refusal(lambda: float_knowledge(W, attackers, steps, dense_limit=0, dense_max=5))
    assert (early is not None) == refused
    if early is not None:
        assert late is not None and early.split("; ")[-1] == late.split("; ")[-1]
    else:
        assert late is None


def test_knowledge_matrix_past_its_bound_is_refused_before_any_folder(tmp_path, monkeypatch, capsys):
    """A ring of 12001 nodes seen by one attacker for 10 steps: refused by the precheck, nothing written
    (before, the run simulated, then failed and left its folder)."""
    from decpriv.cli import main

    monkeypatch.chdir(tmp_path)
    line = ["run", "attack=knowledge_matrix", "topology.n=12001", "data=gaussian_classes", "data.size=16002"]
    assert main(line) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert (
        "error: topology.n=12001: K_T has 21 rows (1 corrupt nodes, 10 steps of 2 observed neighbours) for "
        "12001 unknowns, so no full rank can be certified, and the dense decision would take about 4.6 GB"
        in said
    )
    assert not list(tmp_path.iterdir())
