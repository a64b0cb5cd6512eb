"""Gossip averaging, D-SGD and FedAvg: convergence rates, training accuracy, loop == vectorised, FedAvg ==
D-PSGD on the complete graph, the least-squares optimality gap, and bad input through the CLI."""

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import build, protocol_run

from decpriv import experiment
from decpriv.adversary.recorder import Recorder
from decpriv.api import compose_config
from decpriv.errors import ConfigError
from decpriv.graphs.gossip_matrix import spectral_gap


def simulate(setup):
    return experiment.simulate(setup)[0]


def gossip_errors(*overrides: str) -> tuple[np.ndarray, float]:
    setup = build("protocol=gossip", "partition=one_per_node", "data=gaussian_classes", *overrides)
    history = simulate(setup).history
    return history.mse_to_mean.to_numpy(), spectral_gap(setup.network.W)


def test_gossip_converges_to_the_mean_and_records_every_message():
    setup = build("protocol=gossip", "protocol.rounds=30", "partition=one_per_node", "topology=torus")
    recorder = Recorder.broadcast(np.arange(setup.network.n))
    outcome = protocol_run(setup, recorder)
    x0 = outcome.truth["private_values"]
    W = torch.as_tensor(setup.network.W.toarray())
    values = recorder.transcript().values
    assert values.shape == (30, 16, 64)
    for t in (0, 1, 7, 29):
        assert torch.allclose(values[t], torch.linalg.matrix_power(W, t) @ x0, atol=1e-12)
    assert torch.allclose(outcome.final.mean(0), x0.mean(0), atol=1e-12)  # W doubly stochastic
    assert outcome.summary["mse_to_mean"] < 1e-3 * float(((x0 - x0.mean(0)) ** 2).sum(1).mean())


@pytest.mark.parametrize(
    ("topology", "n", "window"),
    [("ring", 16, (40, 100)), ("expander", 64, (60, 100)), ("random_regular", 64, (40, 80))],
)
def test_gossip_rate_is_exp_minus_k_gap(topology, n, window):
    errors, gap = gossip_errors(f"topology={topology}", f"topology.n={n}", "protocol.rounds=100")
    k = np.arange(len(errors))
    # ||W^k x - mean||^2 <= (1 - gap)^(2k) ||x - mean||^2 for symmetric W, at every step
    assert (errors <= (1 - gap) ** (2 * k) * errors[0] * (1 + 1e-9)).all()
    # and the bound is the asymptotic rate once the second eigenvector dominates
    a, b = window
    measured = math.log(errors[b] / errors[a]) / (2 * (b - a))
    assert measured == pytest.approx(math.log(1 - gap), rel=0.05)


def test_expander_mixes_faster_than_ring_and_chebyshev_faster_than_plain():
    ring, ring_gap = gossip_errors("topology=ring", "topology.n=64", "protocol.rounds=100")
    expander, exp_gap = gossip_errors("topology=expander", "topology.n=64", "protocol.rounds=100")
    assert exp_gap > 10 * ring_gap
    assert expander[100] / expander[0] < 1e-3 * ring[100] / ring[0]
    plain, gap = gossip_errors("topology=ring", "topology.n=32", "protocol.rounds=100")
    fast, _ = gossip_errors(
        "topology=ring", "topology.n=32", "protocol.rounds=100", "protocol.accelerated=true"
    )
    assert fast[100] < 1e-8 * plain[100]
    # Chebyshev (Montijano et al.): error ratio per step lam / (1 + sqrt(1 - lam^2)) ~ exp(-sqrt(2 gap))
    lam = 1 - gap
    predicted = math.log(lam / (1 + math.sqrt(1 - lam**2)))
    measured = math.log(fast[100] / fast[20]) / (2 * 80)
    assert measured == pytest.approx(predicted, rel=0.1)
    assert measured < 10 * math.log(1 - gap)


def test_dsgd_on_digits_reaches_90_percent(cli, tmp_path):
    cli("run", "topology=torus", "hydra.run.dir=out", check=True)
    history = pd.read_csv(tmp_path / "out" / "history.csv")
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").iloc[0]
    assert history.test_accuracy.iloc[0] < 0.2
    assert summary.test_accuracy > 0.9  # measured 0.938 (16-node torus, softmax, 100 rounds, lr 0.5, ~6 s)
    assert (
        summary.local_test_accuracy_min <= summary.local_test_accuracy_mean <= summary.local_test_accuracy_max
    )
    assert summary.local_train_accuracy_min <= summary.local_train_accuracy_max
    assert history.consensus_distance.iloc[0] < 1e-10 < history.consensus_distance.iloc[-1]
    assert summary.generalization_error == pytest.approx(summary.train_accuracy - summary.test_accuracy)


def test_consensus_distance_falls_with_the_spectral_gap():
    """Pasquini et al. 2023, Sec. 3: denser graphs keep the local models closer together."""
    common = ["topology.n=36", "protocol.rounds=30", "model=softmax", "data=digits"]
    ring = simulate(build("topology=ring", *common)).history
    dense = simulate(build("topology=random_regular", "topology.d=6", *common)).history
    assert (ring.consensus_distance.iloc[1:] > 2 * dense.consensus_distance.iloc[1:]).all()
    assert ring.consensus_distance.iloc[-1] > 10 * dense.consensus_distance.iloc[-1]


def per_node_loop_dsgd(setup, rounds: int) -> torch.Tensor:
    """The reference D-SGD: one node at a time with autograd, then W @ theta row by row. Minibatches come
    from the same named stream, so both paths see the same samples."""
    model, local, p = setup.model, setup.local, setup.protocol
    theta = list(model.init(local.n, setup.seeds.seed("init"), p.same_init).double())
    velocity = [torch.zeros_like(t) for t in theta]
    batches = setup.seeds.torch("batches")
    W = setup.network.W.toarray()
    for _ in range(rounds):
        for _ in range(p.local_steps):
            x, y, w = local.batch(p.batch_size, batches)
            for v in range(local.n):
                th = theta[v].clone().requires_grad_(True)
                out = torch.func.functional_call(model.module, model.unflatten(th), (x[v].double(),))
                losses = torch.nn.functional.cross_entropy(out, y[v], reduction="none")
                (g,) = torch.autograd.grad((losses * w[v]).sum() / w[v].sum(), th)
                g = g + p.weight_decay * theta[v]
                velocity[v] = p.momentum * velocity[v] + g
                theta[v] = theta[v] - p.lr * velocity[v]
        theta = [sum(W[v, u] * theta[u] for u in np.flatnonzero(W[v])) for v in range(local.n)]
    return torch.stack(theta)


@pytest.mark.parametrize("batch", ["null", "4"])
def test_vectorised_dsgd_round_equals_per_node_loop(batch):
    setup = build(
        "topology=davis",
        "data=digits",
        "model=mlp",
        "model.hidden=[8]",
        "partition.per_node=12",
        f"protocol.batch_size={batch}",
        "protocol.rounds=3",
        "protocol.local_steps=2",
        "protocol.momentum=0.5",
        "protocol.weight_decay=0.01",
        "protocol.same_init=false",
        "protocol.dtype=float64",
    )
    outcome = simulate(setup)
    assert torch.allclose(outcome.final, per_node_loop_dsgd(setup, 3), atol=1e-10)


def test_fedavg_on_complete_graph_equals_dpsgd_with_uniform_weights():
    common = ["topology=complete", "topology.n=8", "partition.per_node=20", "protocol.rounds=1"]
    dpsgd = simulate(build(*common, "gossip_matrix=uniform", "protocol.batch_size=5"))
    fedavg = simulate(build(*common, "protocol=fedavg", "protocol.batch_size=5"))
    assert torch.allclose(dpsgd.final, fedavg.final, atol=1e-6)
    assert dpsgd.summary["consensus_distance"] < 1e-10
    assert not torch.allclose(dpsgd.final, dpsgd.truth["initial_states"])


def test_fedavg_on_a_star_the_centre_is_the_server():
    setup = build(
        "topology=star", "topology.n=9", "protocol=fedsgd", "protocol.rounds=1", "partition.per_node=10"
    )
    outcome = simulate(setup)
    start = outcome.public["initial_model"]
    local = setup.local
    grads = setup.model.node_gradients(start.expand(9, -1), local.x, local.y, local.mask.float())
    # one full-batch step of each client 1..8, averaged: node 0's data never enters
    expected = (start - setup.protocol.lr * grads[1:]).mean(0)
    assert torch.allclose(outcome.final[0], expected, atol=1e-6)
    assert outcome.public["participants"].tolist() == [[False] + [True] * 8]


def test_fedavg_partial_participation_records_only_what_was_sent():
    setup = build("protocol=fedavg", "topology.n=8", "protocol.client_fraction=0.5", "protocol.rounds=3")
    recorder = Recorder.broadcast(np.arange(8))
    outcome = protocol_run(setup, recorder)
    sent = outcome.public["participants"]
    assert sent.shape == (3, 8) and (sent.sum(1) == 4).all() and not (sent[0] == sent[1]).all()
    values = recorder.transcript().values
    silent = values[0][~sent[0]]
    assert torch.equal(silent, outcome.public["initial_model"].expand_as(silent))
    assert not torch.allclose(values[0][sent[0]], outcome.public["initial_model"].expand(4, -1))


def test_fedavg_local_epochs_and_fedsgd():
    setup = build(
        "protocol=fedavg",
        "data=digits",
        "model=softmax",
        "partition.per_node=20",
        "protocol.batch_size=5",
        "protocol.local_epochs=2",
    )
    assert setup.protocol.steps_per_round(setup.local) == 8
    fedsgd = simulate(build("protocol=fedsgd", "data=digits", "model=softmax", "protocol.rounds=40"))
    assert fedsgd.summary["test_accuracy"] > 0.85


def decor_quadratics(*overrides: str):
    return build(
        "data=least_squares",
        "~attack",
        "model=linear_regression",
        "partition=contiguous",
        "protocol.batch_size=null",
        "protocol.lr=0.1",
        "protocol.dtype=float64",
        *overrides,
    )


def test_least_squares_optimum_by_hand_and_optimality_gap():
    setup = decor_quadratics("topology=complete", "gossip_matrix=uniform", "protocol.rounds=300")
    n, d = setup.network.n, 10
    # f_i = 1/2 ||c_i x - b_i||^2 with c_i = i / sqrt(n): x* = sum_i c_i b_i / sum_i c_i^2
    c = torch.arange(1, n + 1, dtype=torch.float64) / math.sqrt(n)
    b = setup.dataset.y_train.double().reshape(n, d)
    optimum = (c[:, None] * b).sum(0) / (c**2).sum()
    outcome = simulate(setup)
    # W = 11^T/n makes D-GD centralised gradient descent on sum_i f_i: it reaches x* exactly
    assert torch.allclose(outcome.final, optimum.expand(n, d), atol=1e-8)
    assert outcome.summary["optimality_gap"] < 1e-14
    ring = simulate(decor_quadratics("topology=ring", "protocol.rounds=300"))
    gap = ring.summary["optimality_gap"]
    assert gap == pytest.approx(float(((ring.final.double() - optimum) ** 2).sum(1).mean()))
    assert gap > 1e-3  # constant-step D-GD on a ring stops short of x* (heterogeneous f_i)


def test_average_last_window_is_evaluated_every_round():
    outcome = simulate(decor_quadratics("protocol.rounds=50", "protocol.average_last=10"))
    history = outcome.history
    assert set(range(41, 51)) <= set(history["round"])
    window = history[history["round"] > 40]
    assert outcome.summary["optimality_gap"] == pytest.approx(window.optimality_gap.mean())
    assert outcome.summary["optimality_gap"] != pytest.approx(history.optimality_gap.iloc[-1], rel=1e-12)


def test_same_seed_same_history_other_seed_differs():
    a = simulate(build("protocol.rounds=5", "protocol.eval_every=1")).history
    b = simulate(build("protocol.rounds=5", "protocol.eval_every=1")).history
    c = simulate(build("protocol.rounds=5", "protocol.eval_every=1", "seed=1")).history
    pd.testing.assert_frame_equal(a, b)
    assert not a.train_loss.equals(c.train_loss)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("protocol.lr=-0.1",), "protocol.lr=-0.1"),
        (("protocol.average_last=500",), "protocol.average_last=500"),
        (("protocol=fedavg", "protocol.client_fraction=0"), "protocol.client_fraction=0"),
        (("protocol=fedavg", "partition.per_node=4", "protocol.batch_size=16"), "protocol.batch_size=16"),
        (("protocol=gossip", "protocol.rounds=0"), "protocol.rounds=0"),
        (("protocol.dtype=float16",), "protocol.dtype='float16'"),
    ],
)
def test_bad_protocol_input_is_refused_before_training(args, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        simulate(build(*args))


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("protocol.batch_size=500",), "protocol.batch_size=500"),
        (
            ("partition.per_node=4", "protocol.batch_size=16"),  # exact: auto would take 4
            "protocol.batch_size=16: the smallest local set holds 4 samples",
        ),
    ],
)
def test_bad_protocol_input_through_cli(cli, args, key):
    proc = cli("run", *args, "hydra.run.dir=out")
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and lines[0].startswith("error:") and key in lines[0]
    assert proc.stderr.count("error") == 1 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cnn_on_a_64_node_torus_reaches_95_percent():
    """Pasquini et al.'s torus-64 setting on digits: measured 0.962 test accuracy (local mean 0.953), ~85 s."""
    outcome = simulate(
        build(
            "topology=torus",
            "topology.n=64",
            "model=cnn",
            "model.activation=relu",
            "protocol.batch_size=8",
            "protocol.rounds=300",
            "protocol.lr=0.1",
            "protocol.momentum=0.9",
        )
    )
    assert outcome.summary["test_accuracy"] > 0.95
    assert outcome.summary["local_test_accuracy_mean"] > 0.93


def _protocol(overrides):
    """The protocol's constructor called on its composed keys (the range checks run there)."""
    from hydra.utils import get_class

    cfg, _ = compose_config(overrides)
    keys = {k: v for k, v in cfg.protocol.items() if k != "_target_"}
    return get_class(cfg.protocol._target_)(**keys)


@pytest.mark.parametrize(
    "option", ["dsgd", "fedavg", "fedsgd", "gossip", "pdmm", "pdmm_centralized", "random_walk"]
)
def test_hyper_is_only_what_the_protocol_declares_public(option):
    """Attacks see ``hyper()``: the declared keys with the configured values, no simulator setting."""
    protocol = _protocol([f"protocol={option}", "protocol.rounds=7"])
    hyper = protocol.hyper()
    assert list(hyper) == list(type(protocol).public)
    assert hyper["rounds"] == 7
    assert not {"dtype", "eval_every", "tol", "max_inner", "newton_max", "strict"} & set(hyper)
    assert {"dtype", "eval_every"} & set(vars(protocol))  # they exist, they are just not public


@pytest.mark.parametrize(
    ("option", "override", "message"),
    [
        (
            "dsgd",
            "protocol.gossip_steps=0",
            "protocol.gossip_steps=0: a count of rounds or steps lies in [1, 1e+07]; "
            "use protocol.gossip_steps in [1, 1e+07]",
        ),
        (
            "fedavg",
            "protocol.local_steps=0",
            "protocol.local_steps=0: a count of rounds or steps lies in [1, ",
        ),
        ("random_walk", "protocol.lr=0.0", "protocol.lr=0.0: the learning rate must be positive"),
        (
            "random_walk",
            "protocol.average_last=9",
            "protocol.average_last=9: the window must lie within the 7 rounds",
        ),
        (
            "gossip",
            "protocol.dtype=float16",
            "protocol.dtype='float16': not one of its choices; use one of float32, float64",
        ),
    ],
)
def test_shared_range_checks_name_key_value_and_fix(option, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        _protocol([f"protocol={option}", "protocol.rounds=7", override])
