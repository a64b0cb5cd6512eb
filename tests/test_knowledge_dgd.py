"""Knowledge-matrix attack on D-GD (El Mrini et al. 2024, Sec. 4): gradients by LS/GLS, then inputs."""

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from decpriv.attacks.knowledge.dgd import first_layer, gradient_system, invert_linear, solve_gradients
from decpriv.graphs.gossip_matrix import max_degree
from decpriv.models.architectures import mlp, softmax


def simulate_dgd(W, g, initial, steps, sigma, rng):
    """theta^{t+1/2} = theta^t + g + N^t, theta^{t+1} = W theta^{t+1/2}, from a common theta^0 (per-node loop
    in numpy: the independent path the vectorised system is checked against)."""
    theta = np.tile(initial, (W.shape[0], 1))
    messages = []
    for _ in range(steps):
        half = theta + g + sigma * rng.normal(size=g.shape)
        messages.append(half)
        theta = np.stack([sum(W[v, u] * half[u] for u in range(W.shape[0])) for v in range(W.shape[0])])
    return np.stack(messages)


def attack(graph, attackers, steps, sigma, solver, rng, d=4):
    W = sp.csr_array(max_degree(graph))
    n = W.shape[0]
    g, initial = rng.normal(size=(n, d)), rng.normal(size=d)
    messages = simulate_dgd(W.toarray(), g, initial, steps, sigma, rng)
    senders = np.union1d(attackers, sp.csr_array(W != 0)[attackers].indices)
    system = gradient_system(W, attackers, senders, messages[:, senders], initial)
    return solve_gradients(system, solver, None, 1e-6), g[system.targets]


@pytest.mark.parametrize("solver", ["ls", "gls"])
def test_noise_free_constant_gradients_are_recovered_exactly(solver):
    rng = np.random.default_rng(0)
    graph = nx.path_graph(9)
    k, g = attack(graph, np.array([0]), 12, 0.0, solver, rng)
    assert k.reconstructible.all() and k.rank == 8
    np.testing.assert_allclose(k.estimate, g, atol=1e-9)


def test_two_attackers_with_nonzero_initial_model_on_a_random_graph():
    rng = np.random.default_rng(1)
    graph = nx.connected_watts_strogatz_graph(14, 4, 0.3, seed=3)
    k, g = attack(graph, np.array([0, 7]), 10, 0.0, "ls", rng)
    assert k.reconstructible.all()
    np.testing.assert_allclose(k.estimate, g, atol=1e-8)


def test_too_few_steps_leaves_far_targets_undetermined():
    """One attacker at a path end, T steps: node t+1 first enters row (t, 1), so targets 1..T are determined."""
    k, _ = attack(nx.path_graph(9), np.array([0]), 4, 0.0, "ls", np.random.default_rng(2))
    np.testing.assert_array_equal(k.reconstructible, np.arange(1, 9) <= 4)


def mean_error(solver, sigma, reps=20):
    rng = np.random.default_rng(5)
    errors = []
    for _ in range(reps):
        k, g = attack(nx.cycle_graph(8), np.array([0]), 10, sigma, solver, rng)
        errors.append(np.linalg.norm(k.estimate - g) / np.linalg.norm(g))
    return float(np.mean(errors))


def test_noise_degrades_linearly():
    ls = [mean_error("ls", s) for s in (1e-4, 1e-3, 1e-2)]
    # linear in the noise: each tenfold increase multiplies the error by about ten
    assert 5 < ls[1] / ls[0] < 20 and 5 < ls[2] / ls[1] < 20
    assert ls[0] < 1e-2


def test_gls_beats_ls_when_the_noise_is_correlated():
    """The noise the attackers see accumulates through gossip (sum_i W_TT^i N^{t-i}), so observations are
    correlated across rounds and neighbours; over a long horizon on a ring the Gauss-Markov bound for this
    covariance is 26% below least squares' variance. Same noise draws for both solvers; with an identity
    covariance GLS would equal LS and this fails."""
    rng = np.random.default_rng(11)
    squared = {"ls": 0.0, "gls": 0.0}
    for _ in range(30):
        state = rng.bit_generator.state
        for solver in squared:
            rng.bit_generator.state = state
            k, g = attack(nx.cycle_graph(8), np.array([0]), 40, 1e-2, solver, rng)
            squared[solver] += float(((k.estimate - g) ** 2).sum())
    assert squared["gls"] < 0.85 * squared["ls"]


@pytest.mark.parametrize("make", [softmax, lambda s, c: mlp(s, c, hidden=(16,))])
def test_linear_first_layer_inversion_is_exact(make):
    torch.manual_seed(0)
    model = make((1, 8, 8), 10)
    assert first_layer(model) is not None
    theta = model.init(1, 0)[0].double()
    model.module.double()
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    y = torch.tensor([1, 4, 7])
    grads = torch.stack([torch.func.grad(model.loss)(theta, x[i : i + 1], y[i : i + 1]) for i in range(3)])
    np.testing.assert_allclose(invert_linear(model, grads).numpy(), x.reshape(3, -1).numpy(), atol=1e-10)


def test_end_to_end_dgd_on_a_line(cli, tmp_path):
    cli(
        "run",
        "experiment=elmrini_fig4",
        "topology.n=9",
        "protocol.rounds=12",
        "adversary.nodes=[0]",
        "hydra.run.dir=out",
        check=True,
    )
    table = pd.read_csv(tmp_path / "out" / "attack.csv")
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").iloc[0]
    targets = table[~table.attacker]
    assert targets.reconstructed.all() and summary.fraction_reconstructed == 1
    assert (targets.gradient_error < 0.05).all() and (targets.psnr > 30).all()
    assert summary.fraction_psnr_success == 1
    assert (tmp_path / "out" / "reconstructions" / "knowledge_inputs.png").exists()
