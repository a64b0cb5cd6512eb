"""PDMM's exact local solve converges and says so; the leaked differences are then the true ones."""

import warnings

import pytest
import torch
from torch.func import grad, vmap

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.attacks.pdmm.leak import extract
from decpriv.errors import ConfigError
from decpriv.protocols.local_solve import lbfgs, newton
from decpriv.protocols.pdmm import NotConverged


def simulate(overrides):
    # softmax on the full digits, as the cases below were sized (the default is now an MLP on digits_small)
    cfg, _ = compose_config(
        [
            "protocol=pdmm",
            "attack=diffgrad",
            "attack.victims=null",
            "model=softmax",
            "data=digits",
            *overrides,
        ]
    )
    setup = experiment.build(cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome, view = experiment.simulate(setup)
    return setup, outcome, view, [str(w.message) for w in caught]


def true_differences(setup, models, K):
    """(K, n, p) grad f_i(w_i^t) - grad f_i(w_i^{t+2}), t = 1..K, on the private data (scoring only)."""
    local = setup.local.astype(torch.float64)
    per_node = vmap(grad(setup.model.loss))
    over = vmap(per_node, in_dims=(0, None, None, None))
    mask = local.mask.to(torch.float64)
    return over(models[1 : K + 1], local.x, local.y, mask) - over(models[3 : K + 3], local.x, local.y, mask)


def quadratic_batch(n, p, seed):
    """n strongly convex quadratics 1/2 w^T A_i w - b_i^T w with their exact minimisers."""
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, p, p, generator=g, dtype=torch.float64)
    a = m @ m.transpose(1, 2) + 0.1 * torch.eye(p, dtype=torch.float64)
    b = torch.randn(n, p, generator=g, dtype=torch.float64)

    def objective(w):
        aw = (a @ w[:, :, None]).squeeze(-1)
        return 0.5 * (w * aw).sum(1) - (b * w).sum(1), aw - b

    return objective, a, torch.linalg.solve(a, b)


@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
def test_batched_solvers_reach_the_closed_form_minimiser(solver):
    objective, a, optimum = quadratic_batch(6, 12, seed=3)
    start = torch.zeros_like(optimum)
    if solver == "newton":
        solve = newton(objective, lambda w: a, start, tol=1e-10, max_iter=20)
    else:
        solve, _ = lbfgs(objective, start, tol=1e-10, max_iter=500)
    assert (solve.residual <= 1e-10).all()
    assert torch.allclose(solve.w, optimum, rtol=0, atol=1e-7 * optimum.abs().max())
    assert solve.iterations.max() <= (3 if solver == "newton" else 500)


def test_lbfgs_on_a_nonconvex_problem_stops_at_a_stationary_point():
    """Rosenbrock's valley per node (indefinite Hessian away from the optimum): the line search and the
    skipped curvature pairs keep every step a descent step."""

    def objective(w):
        x, y = w[:, 0], w[:, 1]
        value = (1 - x) ** 2 + 100 * (y - x**2) ** 2
        gradient = torch.stack([-2 * (1 - x) - 400 * x * (y - x**2), 200 * (y - x**2)], 1)
        return value, gradient

    start = torch.tensor([[-1.2, 1.0], [0.0, 0.0], [2.0, -1.0]], dtype=torch.float64)
    solve, _ = lbfgs(objective, start, tol=1e-9, max_iter=500)
    assert (solve.residual <= 1e-9).all()
    assert torch.allclose(solve.w, torch.ones(3, 2, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize(
    "model",
    [
        [],  # the user's command: softmax on digits, one sample per node, ring of 16
        [
            "model=mlp",
            "model.hidden=[16]",
            "model.activation=sigmoid",
            "partition=iid",
            "partition.per_node=3",
        ],
        ["partition=iid", "partition.per_node=20"],  # summed softmax losses of 20 samples
    ],
    ids=["headline", "mlp", "softmax20"],
)
def test_exact_update_converges_and_the_messages_form_leaks_the_true_difference(model):
    setup, outcome, view, caught = simulate([*model, "protocol.rounds=10"])
    tol = setup.protocol.tol
    assert outcome.summary["pdmm_max_residual"] <= tol
    assert not [m for m in caught if "did not converge" in m]
    leak = extract(view, 10, setup.protocol.rho, 1.0, "exact", "messages")
    K = len(leak.rounds)
    true = true_differences(setup, outcome.truth["models"].to(torch.float64), K)
    relative = (leak.difference - true).flatten(1).norm(dim=1) / true.flatten(1).norm(dim=1)
    assert relative.max() < 1e-6


def test_a_solve_that_stops_early_warns_and_strict_fails():
    overrides = ["partition=iid", "partition.per_node=20", "protocol.rounds=6", "protocol.max_inner=3"]
    _, outcome, _, caught = simulate(overrides)
    assert outcome.summary["pdmm_max_residual"] > 1e-8
    assert any("did not converge" in m and "protocol.max_inner=3" in m for m in caught)
    with pytest.raises(NotConverged, match="residual"):
        simulate([*overrides, "protocol.strict=true"])


@pytest.mark.parametrize(
    "update",
    [
        ["protocol.update=exact"],
        ["protocol.update=inexact", "protocol.k_max=1", "protocol.alpha=0.05"],
        ["protocol.update=qa", "protocol.mu=4"],
    ],
    ids=["exact", "k1", "qa"],
)
def test_theorem_forms_equal_the_truth_up_to_the_anchor_term(update):
    """Theorem 1's closed forms (Eq. 2.13, 4.3, 4.22) evaluated on the anchored trajectory differ from
    the true difference by exactly 2 rho (d_i e_i - sum_j e_j), e the constant anchor error."""
    setup, outcome, view, _ = simulate(
        [
            "model=logistic",
            "data=gaussian_classes",
            "data.size=64",
            "topology.n=8",
            *update,
            "protocol.rounds=14",
        ]
    )
    rho = setup.protocol.rho
    assumed = {"exact": "exact", "inexact": "k1", "qa": "qa"}[setup.protocol.update]
    leak = extract(view, 14, rho, 1.0, assumed, "theorem", setup.protocol.alpha, setup.protocol.mu)
    models = outcome.truth["models"].to(torch.float64)
    K = len(leak.rounds)
    true = true_differences(setup, models, K)
    anchor_error = leak.trajectory[-1] - models[14]
    net = setup.network
    adjacency = torch.as_tensor(net.adjacency.toarray(), dtype=torch.float64)
    degree = torch.as_tensor(net.degrees, dtype=torch.float64)[:, None]
    offset = 2 * rho * (degree * anchor_error - adjacency @ anchor_error)
    assert anchor_error.abs().max() > 1e-3  # the test is not vacuous: the anchor is off
    assert torch.allclose(leak.difference, true + offset, rtol=0, atol=1e-7)


def test_theorem_form_is_refused_for_admm():
    cfg, _ = compose_config(["protocol=admm", "attack=pdmm_leak", "attack.form=theorem"])
    with pytest.raises(ConfigError, match="attack.form='theorem'.*theta = 1.*form=messages"):
        experiment.build(cfg)
