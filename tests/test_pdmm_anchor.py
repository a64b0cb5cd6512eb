"""The honest diffgrad adversary's anchor on E3's MLP (docs/pdmm.md, "Can the anchor be fitted?"): the
joint (anchor, inputs) problem reproduces the leak, the inputs are locally identifiable with the anchor
free, and a joint fit recovers them from anchors close enough to the truth (slow: one PDMM run)."""

import itertools

import pytest
import torch

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.attacks.inversion.analytic import input_span
from decpriv.attacks.pdmm.anchor import JointProblem, identifiability, joint_fit
from decpriv.attacks.pdmm.leak import extract
from decpriv.protocols.pdmm_objective import Layout, reduce_first_layer

ROUNDS, BATCH, FITTED = 10, 2, 4


def victims_problems():
    """E3's decentralized setting at n_i = 2 (RGG 100, sigmoid MLP 100, z_std = 1), 10 rounds, 2 victims:
    per victim its joint problem and, for scoring, the truth (anchor, input coordinates, labels) and the
    anchor the adversary starts from (the corrupt node's model at t_max)."""
    overrides = [
        "experiment=yu_e3",
        f"partition.per_node={BATCH}",
        f"protocol.rounds={ROUNDS}",
        "attack.victims=2",
    ]
    cfg, _ = compose_config(overrides)
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    victims = setup.plan.victims
    leak = extract(view, ROUNDS, setup.protocol.rho, 1.0, "exact", "messages", nodes=victims)
    models = outcome.truth["models"].to(torch.float64)
    local, layout = setup.local.astype(torch.float64), Layout.of(setup.model)
    cases = []
    for j, v in enumerate(victims):
        basis = input_span(setup.model, leak.difference[1, j], BATCH)
        reduce = lambda vectors, basis=basis: reduce_first_layer(layout, basis, vectors)  # noqa: E731
        relative = leak.trajectory[:, j] - leak.trajectory[-1, j]
        problem = JointProblem(
            layout.narrowed(basis.shape[1]), reduce(relative), reduce(leak.difference[:FITTED, j])
        )
        truth = (reduce(models[ROUNDS, v]), local.x[v].reshape(BATCH, -1) @ basis, local.y[v])
        cases.append((problem, truth, reduce(leak.trajectory[-1, j])))
    return cases


def input_error(coordinates, true):
    """Relative error of the input coordinates under the best matching of the batch."""
    return min(
        float((coordinates[list(order)] - true).norm() / true.norm())
        for order in itertools.permutations(range(len(true)))
    )


@pytest.mark.slow
def test_the_anchor_is_locally_identifiable_but_the_corrupt_nodes_model_is_far_outside_its_basin():
    for problem, (anchor, coordinates, labels), corrupt in victims_problems():
        at_truth = problem.residual(anchor, coordinates, labels).norm() / problem.difference.norm()
        assert at_truth < 1e-6  # the joint model is the leak: the messages' D at the true anchor and inputs
        measured = identifiability(problem, anchor, coordinates, labels)
        # 0.18 and 0.22 measured: a fifth of the inputs' smallest effect on D no anchor change can mimic
        assert measured["free_anchor"] > 0.05
        assert (
            measured["anchor_rank"] < measured["anchor_unknowns"]
        )  # 1105 of 1310: saturated units hide some
        start = torch.randn(
            coordinates.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        )
        offset = corrupt - anchor  # the honest start's anchor error: 35-40
        assert offset.norm() > 20
        near = joint_fit(problem, anchor + 0.1 * offset, start, labels, 500)
        assert input_error(near[1], coordinates) < 1e-2  # 7e-4 and 8e-4 measured


@pytest.mark.parametrize(
    "override",
    ["attack.anchor=fitted", "attack.oracle=true", "attack.span=false", "attack.joint_rounds=0"],
)
def test_a_joint_anchor_it_cannot_fit_is_refused(override):
    from decpriv.errors import ConfigError

    extra = [] if override.startswith("attack.anchor") else ["attack.anchor=joint"]
    cfg, _ = compose_config(["experiment=yu_e3", "setting=yu_decentralized_joint", *extra, override])
    with pytest.raises(ConfigError, match="attack.anchor"):
        experiment.build(cfg)
