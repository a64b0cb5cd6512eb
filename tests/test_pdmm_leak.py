"""PDMM/ADMM and Theorem 1 leakage: loop == vectorised, the exact optimum, leaked differences == truth."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import PDMM_QUADRATIC
from torch.func import grad, vmap

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.attacks.pdmm.leak import extract, links
from decpriv.errors import ConfigError
from decpriv.metrics.training import least_squares_optimum

QUADRATIC = [*PDMM_QUADRATIC, "protocol.tol=1e-12"]  # exactness to 1e-10 needs solves well below it
LOGISTIC = [
    "topology=random_geometric",
    "topology.n=10",
    "topology.radius=0.5",
    "data=gaussian_classes",
    "data.size=40",
    "partition=one_per_node",
    "model=logistic",
    "model.reduction=sum",
    "adversary.nodes=[0]",
    "adversary.eavesdropper=true",
    "attack=pdmm_leak",
    "protocol.z_std=0",  # plain PDMM unless a test perturbs the subspace
    "protocol.tol=1e-12",  # exactness to 1e-10 needs solves well below it
]


def simulate(overrides):
    cfg, _ = compose_config(["protocol=pdmm", *overrides])
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    return setup, outcome, view


def gradients(setup, points):
    """(K, n, p) grad f_i at points[k, i] on node i's private data."""
    local = setup.local.astype(torch.float64)
    per_node = vmap(grad(setup.model.loss))
    return vmap(per_node, in_dims=(0, None, None, None))(
        points, local.x, local.y, local.mask.to(torch.float64)
    )


def loop_pdmm(setup, rounds, rho, theta):
    """Reference PDMM, one node and one edge at a time, closed-form local solve of a quadratic f_i."""
    net, local = setup.network, setup.local.astype(torch.float64)
    n, p = net.n, setup.model.p
    z = {(i, j): torch.zeros(p, dtype=torch.float64) for i in range(n) for j in net.neighbours(i)}
    w = torch.zeros(n, p, dtype=torch.float64)
    out = []
    for _ in range(rounds):
        for i in range(n):
            a = local.x[i][local.mask[i]].reshape(int(local.counts[i]), -1)
            b = local.y[i][local.mask[i]]
            rhs = a.T @ b
            for j in net.neighbours(i):
                rhs = rhs - (1.0 if i < j else -1.0) * z[(i, int(j))]
            w[i] = torch.linalg.solve(
                a.T @ a + rho * len(net.neighbours(i)) * torch.eye(p, dtype=a.dtype), rhs
            )
        new = {}
        for i in range(n):
            for j in net.neighbours(i):
                sign = 1.0 if i < j else -1.0
                new[(int(j), i)] = (1 - theta) * z[(int(j), i)] + theta * (
                    z[(i, int(j))] + 2 * rho * sign * w[i]
                )
        z = new
        out.append(w.clone())
    return torch.stack(out)


@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_vectorised_pdmm_equals_node_by_node_loop_and_reaches_least_squares_optimum(theta):
    setup, outcome, _ = simulate(
        [*QUADRATIC, "protocol.rounds=150", f"protocol.theta={theta}", "protocol.rho=1.0"]
    )
    reference = loop_pdmm(setup, 150, 1.0, theta)
    models = outcome.truth["models"][1:]
    assert torch.allclose(models, reference, atol=1e-9, rtol=0)
    optimum = least_squares_optimum(setup.model, setup.local)
    assert (outcome.final - optimum).abs().max() < 1e-4


def test_exact_leak_equals_true_gradient_difference_and_theorem_form_needs_the_anchor():
    setup, outcome, view = simulate(
        [*QUADRATIC, "protocol.rounds=300", "protocol.rho=1.0", "protocol.z_std=5"]
    )
    models = outcome.truth["models"].to(torch.float64)
    honest = np.arange(1, setup.network.n)
    for t_max in (300, 20):
        leak = extract(view, t_max, 1.0, 1.0, "exact", "messages")
        K = len(leak.rounds)
        true = gradients(setup, models[1 : K + 1]) - gradients(setup, models[3 : K + 3])
        err = (leak.difference - true)[:, honest].abs().max() / true.abs().max()
        assert err < 1e-9  # the value needs no anchor: exact at any t_max
        assert torch.allclose(leak.steps, models[2 : t_max + 1] - models[1:t_max], atol=1e-9)
    converged = extract(view, 300, 1.0, 1.0, "exact", "theorem")
    early = extract(view, 20, 1.0, 1.0, "exact", "theorem")
    K = 10
    true = gradients(setup, models[1 : K + 1]) - gradients(setup, models[3 : K + 3])
    late_err = (converged.difference[:K] - true)[:, honest].abs().max() / true.abs().max()
    early_err = (early.difference[:K] - true)[:, honest].abs().max() / true.abs().max()
    assert late_err < 1e-8  # anchored at convergence, Theorem 1.3 is exact
    assert early_err > 1e3 * late_err  # early stopping leaves the anchor error in the value


@pytest.mark.parametrize("form", ["messages", "theorem"])
def test_leak_of_some_nodes_from_their_links_alone_equals_the_whole_view(form):
    setup, _, view = simulate([*LOGISTIC, "protocol.rounds=30", "protocol.z_std=1"])
    nodes = np.array([3, 7])
    whole = extract(view, 30, 0.4, 1.0, "exact", form)
    needed = links(setup.network, nodes, form)
    assert len(needed) < len(view.transcript.senders)  # the test must drop some columns
    keep = view.transcript.columns(needed[:, 0], needed[:, 1])
    tr = view.transcript
    cut = replace(tr, senders=tr.senders[keep], receivers=tr.receivers[keep], values=tr.values[:, keep])
    part = extract(replace(view, transcript=cut), 30, 0.4, 1.0, "exact", form, nodes=nodes)
    for name in ("steps", "trajectory", "difference", "plain_models", "plain_gradient"):
        assert torch.allclose(getattr(part, name), getattr(whole, name)[:, nodes], rtol=0, atol=1e-12), name
    fewer = replace(
        view,
        transcript=replace(
            cut, senders=cut.senders[1:], receivers=cut.receivers[1:], values=cut.values[:, 1:]
        ),
    )
    with pytest.raises(ConfigError, match="unrecorded link"):
        extract(fewer, 30, 0.4, 1.0, "exact", form, nodes=nodes)


def test_plain_pdmm_leaks_the_full_gradient_and_subspace_perturbation_hides_it():
    errors = {}
    for z_std in (0.0, 3.0):
        setup, outcome, view = simulate([*LOGISTIC, "protocol.rounds=30", f"protocol.z_std={z_std}"])
        leak = extract(view, 30, 0.4, 1.0, "exact", "messages")
        models = outcome.truth["models"].to(torch.float64)
        true = gradients(setup, models[1:31])[:, 1:]
        errors[z_std] = float((leak.plain_gradient[:, 1:] - true).norm() / true.norm())
        assert torch.allclose(leak.plain_models[:, 1:], models[1:31, 1:], atol=1e-9) == (z_std == 0)
    assert errors[0.0] < 1e-10
    assert errors[3.0] > 0.5


@pytest.mark.parametrize(
    ("update", "assumed", "options"),
    [
        ("inexact", "k1", ["protocol.k_max=1", "protocol.alpha=0.1"]),
        ("qa", "qa", ["protocol.mu=2.0"]),
    ],
)
def test_inexact_and_qa_leaks_need_the_right_hyperparameters(update, assumed, options):
    setup, outcome, view = simulate(
        [*LOGISTIC, "protocol.rounds=25", f"protocol.update={update}", "protocol.z_std=2", *options]
    )
    models = outcome.truth["models"].to(torch.float64)
    right = extract(view, 25, 0.4, 1.0, assumed, "messages", alpha=0.1, mu=2.0)
    wrong = extract(view, 25, 0.4, 1.0, assumed, "messages", alpha=0.05, mu=4.0)
    K = len(right.rounds)
    true = gradients(setup, models[1 : K + 1]) - gradients(setup, models[3 : K + 3])
    assert float((right.difference - true)[:, 1:].norm() / true[:, 1:].norm()) < 1e-9
    assert float((wrong.difference - true)[:, 1:].norm() / true[:, 1:].norm()) > 0.1


def test_k_max_above_one_hides_the_difference_from_a_k1_adversary():
    setup, outcome, view = simulate(
        [*LOGISTIC, "protocol.rounds=25", "protocol.update=inexact", "protocol.k_max=5", "protocol.z_std=2"]
    )
    models = outcome.truth["models"].to(torch.float64)
    leak = extract(view, 25, 0.4, 1.0, "k1", "messages", alpha=0.1)
    K = len(leak.rounds)
    true = gradients(setup, models[1 : K + 1]) - gradients(setup, models[3 : K + 3])
    assert float((leak.difference - true)[:, 1:].norm() / true[:, 1:].norm()) > 0.1


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["protocol.theta=0"], "protocol.theta"),
        (["protocol.rho=-1"], "protocol.rho"),
        (["protocol.update=inexact", "protocol.k_max=0"], "protocol.k_max"),
        (["model.reduction=mean"], "model.reduction"),
        (["adversary.eavesdropper=false"], "adversary"),
        (["attack.update=newton"], "attack.update"),
    ],
)
def test_bad_input_is_refused_before_running(args, key):
    cfg, _ = compose_config(["protocol=pdmm", *LOGISTIC, *args])
    with pytest.raises(ConfigError, match=key):
        experiment.build(cfg)


def test_cli_refuses_a_protocol_without_delta_z_with_status_2(cli):
    proc = cli(
        "run", "protocol=dsgd", "attack=pdmm_leak", "adversary.nodes=[0]", "adversary.eavesdropper=true"
    )
    assert proc.returncode == 2
    assert "protocol=pdmm" in proc.stderr


def test_cli_pdmm_leak_writes_tables_and_plots(cli, tmp_path):
    cli(
        "run",
        "protocol=pdmm",
        *LOGISTIC,
        "protocol.rounds=20",
        "protocol.z_std=1",
        "attack.t_max=[8,20]",
        "hydra.run.dir=out",
        check=True,
    )
    import pandas as pd

    by_stop = pd.read_csv(tmp_path / "out" / "pdmm_leak_by_t_max.csv")
    assert list(by_stop.t_max) == [8, 20]
    assert (by_stop.difference_error_median < 1e-8).all()
    assert (tmp_path / "out" / "plots" / "leak_difference_error.png").exists()
