"""The other accountants' linear algebra: a sound side where a matrix is nearly singular, and honest labels.

SecLDP inverts Sigma = sigma_cdp^2 I + sigma_cor^2 L, whose condition number is (sigma_cdp^2 + sigma_cor^2
lambda_max(L)) / sigma_cdp^2: tiny private noise and huge correlated noise make it ill-conditioned. The
slope must never fall below the rational-arithmetic value. The random-walk bound is asymptotic (its O()
read with constant 1) and says so in every row.
"""

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from rational_reference import inverse_diagonal

from decpriv.privacy.secldp_bounds import laplacian, precision_diagonal


@pytest.mark.parametrize(("sigma_cdp", "sigma_cor"), [(1e-4, 1e4), (1e-6, 1e3), (3.0, 300.0)])
def test_secldp_precision_diagonal_is_an_upper_bound_within_its_certificate(sigma_cdp, sigma_cor):
    graph = nx.path_graph(9)
    adjacency = nx.to_scipy_sparse_array(graph)
    L = laplacian(adjacency).toarray()
    cdp, cor = Fraction(sigma_cdp**2), Fraction(sigma_cor**2)  # the floats' exact values
    Sigma = [[cdp * int(i == j) + cor * Fraction(L[i, j]) for j in range(9)] for i in range(9)]
    exact = np.array([float(x) for x in inverse_diagonal(Sigma)])
    bound = precision_diagonal(adjacency, sigma_cdp, sigma_cor)
    assert np.all(bound >= exact)
    condition = (sigma_cdp**2 + sigma_cor**2 * 4) / sigma_cdp**2
    np.testing.assert_allclose(bound, exact, rtol=max(1e-12, 1e3 * condition * np.finfo(float).eps))


def test_random_walk_pairs_are_labelled_asymptotic(tmp_path):
    from conftest import build

    setup = build("experiment=random_walk_privacy", "~attack")
    findings = setup.accountant.account(setup)
    assert (findings.tables["privacy"].method == "asymptotic").all()
    assert findings.summary["accounting"] == "asymptotic"
