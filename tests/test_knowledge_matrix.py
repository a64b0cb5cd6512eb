"""Knowledge-matrix attack on gossip (El Mrini et al. 2024, Sec. 3): hand-solved cases, float vs exact, CLI."""

import ast
from fractions import Fraction
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import mh

from decpriv.api import compose_config
from decpriv.attacks.knowledge.matrix import (
    canonical,
    exact_knowledge,
    float_knowledge,
    knowledge_blocks,
    rational_matrix,
    row_space,
)
from decpriv.errors import ConfigError
from decpriv.experiment import build, simulate

PACKAGE = Path(__file__).resolve().parents[1] / "decpriv" / "attacks" / "knowledge"


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 8])
def test_path_end_recovers_one_more_node_per_step(steps):
    """On a path with the attacker at one end, x^t of node 1 involves nodes up to t+1 for the first time
    (with a non-zero weight), so after T steps nodes 0..T are determined and nothing beyond."""
    n = 10
    W = mh(nx.path_graph(n))
    expected = np.arange(n) <= steps
    for knowledge in (float_knowledge(W, np.array([0]), steps), exact_knowledge(W, np.array([0]), steps)):
        assert knowledge.rank == min(steps + 1, n)
        np.testing.assert_array_equal(knowledge.reconstructible, expected)


def test_three_node_path_value_by_hand():
    """Path 0-1-2, MH weights W[1,:] = (1/3, 1/3, 1/3): from x_0, x_1 and x_1^1 = (x_0+x_1+x_2)/3 the
    attacker gets x_2 = 3 x_1^1 - x_0 - x_1."""
    W = mh(nx.path_graph(3))
    A, d = rational_matrix(W)
    assert d == 3 and A[1] == {0: 1, 1: 1, 2: 1}
    x = np.array([[2.0, -1.0], [5.0, 0.5], [-7.0, 4.0]])
    x1 = x.mean(0)
    blocks = [(np.eye(3)[[0]], x[[0]]), (np.eye(3)[[1]], x[[1]]), (np.full((1, 3), 1 / 3), x1[None])]
    k = row_space(iter(blocks), 3, None, 1e-9)
    assert k.reconstructible.all() and k.rank == 3
    np.testing.assert_allclose(k.estimate[2], 3 * x1 - x[0] - x[1], atol=1e-12)


def test_star_leaves_are_indistinguishable():
    """Attacker on a leaf of a star: the centre is heard, every other leaf enters only through the centre's
    uniform weights, so their columns of K_T are identical and none of them is recovered."""
    n = 7
    W = mh(nx.star_graph(n - 1))
    for k in (float_knowledge(W, np.array([1]), 4), exact_knowledge(W, np.array([1]), 4)):
        others = np.setdiff1d(np.arange(n), [0, 1])
        assert k.reconstructible[[0, 1]].all() and not k.reconstructible[others].any()
        assert len(set(k.groups[others])) == 1 and len(set(k.groups)) == 3
        assert k.rank == 3


@pytest.mark.parametrize("seed", range(4))
def test_float_and_exact_modes_agree_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(15, 35))
    graph = nx.gnp_random_graph(n, 4 / n, seed=seed)
    graph = graph.subgraph(max(nx.connected_components(graph), key=len)).copy()
    graph = nx.convert_node_labels_to_integers(graph)
    attackers = np.sort(rng.choice(graph.number_of_nodes(), size=int(rng.integers(1, 4)), replace=False))
    steps = int(rng.integers(2, 10))
    W = mh(graph)
    f, e = float_knowledge(W, attackers, steps), exact_knowledge(W, attackers, steps)
    assert f.rank == e.rank
    np.testing.assert_array_equal(f.reconstructible, e.reconstructible)
    np.testing.assert_array_equal(f.groups, e.groups)


def test_blocks_are_rows_of_matrix_powers():
    graph = nx.karate_club_graph()
    W = mh(graph)
    blocks = dict(knowledge_blocks(W, np.array([0, 5]), 4))
    seen = np.setdiff1d(np.unique(sp.csr_array(W != 0)[[0, 5]].indices), [0, 5])
    dense = W.toarray()
    np.testing.assert_allclose(blocks[3], np.linalg.matrix_power(dense, 3)[seen], atol=1e-15)
    np.testing.assert_array_equal(blocks[-1], np.eye(34)[[0, 5]])


def test_rational_reading_refuses_irrational_weights():
    W = sp.csr_array(np.array([[1 - 1 / np.pi, 1 / np.pi], [1 / np.pi, 1 - 1 / np.pi]]))
    with pytest.raises(ConfigError, match="attack.exact"):
        rational_matrix(W)
    assert Fraction(1, 3) == Fraction(float(mh(nx.path_graph(3))[1, 1])).limit_denominator(10**6)


def test_canonical_labels():
    np.testing.assert_array_equal(canonical(np.array([5, 5, 2, 9, 2])), [0, 0, 1, 2, 1])


def test_end_to_end_gossip_recovers_exact_values_and_reports_numerics(cli, tmp_path):
    cli(
        "run",
        "protocol=gossip",
        "protocol.rounds=6",
        "topology=erdos_renyi",
        "topology.n=25",
        "topology.p=0.15",
        "partition=one_per_node",
        "attack=knowledge_matrix",
        "attack.exact=true",
        "adversary.nodes=[0,1]",
        "hydra.run.dir=out",
        check=True,
    )
    table = pd.read_csv(tmp_path / "out" / "attack.csv")
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").iloc[0]
    assert {"node", "name", "distance_to_attacker", "reconstructed", "error", "psnr", "ssim"} <= set(table)
    rec = table[table.reconstructed]
    assert len(rec) >= 2 + (table.distance_to_attacker == 1).sum()
    assert rec.error.max() < 1e-9 and (rec.psnr == 100).all()  # exact: capped at 100 dB
    assert (table[~table.reconstructed].error > 1e-3).all()
    assert summary.fraction_reconstructed == pytest.approx(table.reconstructed.mean())
    assert summary.float_exact_disagreements == 0
    assert summary.knowledge_rank == summary.knowledge_rank_exact
    assert summary.knowledge_distance_tolerance == 1e-6
    assert summary.knowledge_largest_distance_reconstructed < 1e-9
    assert (tmp_path / "out" / "plots" / "knowledge_graph.png").stat().st_size > 10_000


BAD = [
    (["adversary.nodes=[]", "adversary.count=0"], "adversary"),
    (["adversary.nodes=[99]"], "adversary.nodes"),
    (["attack.steps=0"], "attack.steps"),
    (["attack.steps=50"], "attack.steps"),
    (["protocol=fedavg"], "protocol"),
    (["data=least_squares", "model=linear_regression", "attack.image_metrics=true"], "attack.image_metrics"),
    (["protocol=gossip", "protocol.accelerated=true"], "protocol.accelerated"),
    (["protocol=dsgd"], "protocol.batch_size"),
    (["protocol=dsgd", "protocol.batch_size=null", "data=least_squares", "model=linear_regression"], "model"),
    (["attack.solver=cholesky"], "attack.solver"),
    (["protocol=dsgd", "protocol.batch_size=null", "attack.exact=true"], "attack.exact"),
]


@pytest.mark.parametrize(("overrides", "key"), BAD)
def test_bad_input_is_refused_before_the_run(overrides, key):
    base = ["protocol=gossip", "partition=one_per_node", "attack=knowledge_matrix", "adversary.nodes=[0]"]
    cfg, _ = compose_config(base + ["topology.n=12", "protocol.rounds=5"] + overrides)
    with pytest.raises(ConfigError, match=key):
        build(cfg)


def test_bad_input_exits_2(cli):
    proc = cli("run", "protocol=gossip", "attack=knowledge_matrix", "adversary.nodes=[40]", "hydra.run.dir=o")
    assert proc.returncode == 2 and "adversary.nodes" in proc.stderr


def test_attack_sees_only_the_view():
    """No module of the attack imports decpriv.seal.truth except attack.py, which names Truth only in evaluate's
    signature and the scoring helpers evaluate calls; run() gets a View and its findings hold no ground truth."""
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        imports = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        if path.name != "attack.py":
            assert "decpriv.seal.truth" not in imports, path
    tree = ast.parse((PACKAGE / "attack.py").read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name not in (
            "evaluate",
            "true_gradients",
            "value_errors",
            "image_scores",
        ):
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            assert not names & {"truth", "Truth"}, fn.name
    cfg, _ = compose_config(
        [
            "protocol=gossip",
            "protocol.rounds=3",
            "topology.n=10",
            "partition=one_per_node",
            "attack=knowledge_matrix",
        ]
        + ["adversary.nodes=[0]"]
    )
    setup = build(cfg)
    outcome, view = simulate(setup)
    findings = setup.attack.run(view)
    private = outcome.truth["private_values"].numpy()
    assert not any(value is outcome.truth["private_values"] for value in vars(findings).values())
    known = findings.knowledge.reconstructible
    # ring of 10, attacker 0, T=3: each step reaches one node further in both directions
    np.testing.assert_array_equal(np.flatnonzero(known), [0, 1, 2, 3, 7, 8, 9])
    np.testing.assert_allclose(findings.values[known], private[known], atol=1e-12)


def test_long_horizons_are_flagged_not_silently_decided():
    """Rows (W^t)[v, :] tend to 1/n, so with one attacker and T = 20 on ER(100) the singular values of K_T
    run into the float64 floor with no gap: the run must say the decision is ambiguous; with a short
    horizon (exact mode agrees, checked above) it must not."""
    graph = nx.gnp_random_graph(100, 2 * np.log(100) / 100, seed=100)
    assert nx.is_connected(graph)
    W = mh(graph)
    assert float_knowledge(W, np.array([0]), 20).numerics["float_ambiguous"]
    assert not float_knowledge(W, np.array([0]), 5).numerics["float_ambiguous"]
    assert not float_knowledge(mh(nx.path_graph(10)), np.array([0]), 5).numerics["float_ambiguous"]
