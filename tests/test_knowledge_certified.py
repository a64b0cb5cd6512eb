"""The certified row-space test of the knowledge matrix (modular rank + verified rational kernel): it decides
what float64 cannot, and agrees with sympy's rational RREF, an independent exact path."""

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from conftest import mh
from sympy import GF
from sympy.polys.matrices import DomainMatrix

from decpriv.attacks.knowledge.matrix import (
    exact_knowledge,
    float_knowledge,
    gossip_certifier,
    rational_matrix,
)
from decpriv.attacks.knowledge.modular import IntegerMatrix, primes, rational, vanishing
from decpriv.graphs.topologies import erdos_renyi


def test_near_cutoff_rank_is_decided_exactly():
    """ER(100, 6/100), seed 1, one attacker, T = 30 (El Mrini et al.'s Fig. 2 horizon at n = 100): the
    dropped singular value 4.8077e-14 sits under the cutoff 4.8094e-14, so float64 says rank 99 and 6 of 100
    nodes. The certificate says rank 100; an independent sympy rank over GF(p) of K_T confirms rank_p = 100,
    which bounds rank_Q from below, so every node is determined."""
    W = mh(erdos_renyi(100, 0.06, 1))
    attackers = np.array([0])
    floating = float_knowledge(W, attackers, 30, certified=False)
    assert floating.rank == 99 and floating.reconstructible.sum() == 6
    assert floating.numerics["float_ambiguous"]
    k = float_knowledge(W, attackers, 30)
    assert k.rank == 100 and k.reconstructible.all()
    assert k.numerics["decided_by"] == "modular" and k.numerics["float_disagreements"] == 94

    rows, d = rational_matrix(W)
    p = primes(3)[-1]
    Wp = DomainMatrix(
        {i: {j: GF(p)(v) / GF(p)(d) for j, v in r.items()} for i, r in rows.items()}, (100, 100), GF(p)
    )
    seen = np.flatnonzero(W[[0]].toarray()[0])
    block = DomainMatrix({i: {int(v): GF(p)(1)} for i, v in enumerate(seen)}, (len(seen), 100), GF(p))
    parts = []
    for _ in range(30):
        parts.append(block)
        block = block * Wp
    assert parts[0].vstack(*parts[1:]).rank() == 100


@pytest.mark.parametrize("seed", [0, 3, 17, 29])
def test_certificate_matches_rational_rref(seed):
    """Random connected graphs with rank-deficient K_T (seed 0: 17 of 35, with groups of equal columns), whose
    kernel is lifted from 1, 4 (seed 3) or 32 primes (seeds 17, 29): same rank, reconstructible set and
    indistinguishable groups as sympy's exact RREF."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(15, 40))
    graph = nx.gnp_random_graph(n, 3 / n, seed=seed)
    graph = nx.convert_node_labels_to_integers(
        graph.subgraph(max(nx.connected_components(graph), key=len)).copy()
    )
    attackers = np.sort(rng.choice(graph.number_of_nodes(), size=int(rng.integers(1, 3)), replace=False))
    steps = int(rng.integers(2, 15))
    W = mh(graph)
    certificate, exact = gossip_certifier(W, attackers, steps)(), exact_knowledge(W, attackers, steps)
    assert certificate.method == "modular"
    assert certificate.rank == exact.rank < graph.number_of_nodes()
    np.testing.assert_array_equal(certificate.reconstructible, exact.reconstructible)
    np.testing.assert_array_equal(certificate.groups, exact.groups)


def test_star_leaves_certified_indistinguishable():
    """Attacker on a leaf of a star: the other leaves are equal columns (kernel vectors e_i - e_j, verified
    exactly), the centre and the attacker are determined."""
    W = mh(nx.star_graph(6))
    c = gossip_certifier(W, np.array([1]), 4)()
    assert c.rank == 3
    np.testing.assert_array_equal(np.flatnonzero(c.reconstructible), [0, 1])
    assert len(set(c.groups[2:])) == 1 and len(set(c.groups)) == 3


def test_exact_kernel_check_and_rational_reconstruction():
    """Path 0-1-2 with attacker 0 seeing node 1 for one step: e_2 spans the kernel, e_1 - e_2 does not."""
    rows, d = rational_matrix(mh(nx.path_graph(3)))
    M = IntegerMatrix.from_rows(rows, d, 3)
    V = np.array([[0, 0], [0, 1], [1, -1]], dtype=object)
    np.testing.assert_array_equal(vanishing(M, np.array([0]), np.array([1]), 1, V), [True, False])
    np.testing.assert_array_equal(vanishing(M, np.array([0]), np.array([1]), 2, V), [False, False])
    m = primes(2)[0] * primes(2)[1]
    assert rational(-3 * pow(7, -1, m) % m, m) == Fraction(-3, 7)
