"""Centralized PDMM (Yu 2023, Eq. 5.1-5.2) solves the global problem, and one round of z leaks each client's
gradient to an eavesdropper (the server's view that the gradient inversion baseline reads)."""

import pytest
import torch
from torch.func import grad, vmap

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.attacks.centralized import pdmm_centralized_leak
from decpriv.errors import ConfigError
from decpriv.protocols.fedavg import client_nodes

STAR = ["protocol=pdmm_centralized", "topology=star", "topology.n=7"]


def simulate(overrides):
    cfg, _ = compose_config([*STAR, *overrides])
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    return setup, outcome, view


def test_the_server_model_reaches_the_least_squares_optimum_of_all_clients():
    setup, outcome, _ = simulate(
        ["data=least_squares", "data.dim=5", "model=linear_regression", "protocol.rounds=200"]
    )
    clients = client_nodes(setup.network)
    local = setup.local.astype(torch.float64)
    x = local.x[clients][local.mask[clients]]
    y = local.y[clients][local.mask[clients]].to(torch.float64)
    optimum = torch.linalg.lstsq(x, y[:, None]).solution.squeeze(1)  # argmin sum_i f_i, normal equations
    final = outcome.truth["models"][-1]
    assert torch.allclose(final[0], optimum, atol=1e-8)
    assert torch.allclose(final[torch.as_tensor(clients)], optimum.expand(len(clients), -1), atol=1e-8)
    assert outcome.summary["pdmm_max_residual"] <= 1e-8
    assert outcome.summary["pdmm_last_change"] < 1e-6


def test_one_round_of_z_reveals_each_clients_model_and_gradient():
    setup, outcome, view = simulate(
        [
            "model=mlp",
            "model.hidden=[8]",
            "model.activation=sigmoid",
            "partition=iid",  # attack=gradient_inversion picks one_per_node
            "partition.per_node=3",
            "protocol.rounds=4",
            "attack=gradient_inversion",
            "adversary=server",
        ]
    )
    models = outcome.truth["models"]  # (T + 1, n, p)
    local = setup.local.astype(torch.float64)
    gradient = vmap(grad(setup.model.loss))
    clients = torch.as_tensor(client_nodes(setup.network))
    truth = gradient(models[1, clients], local.x[clients], local.y[clients], local.mask[clients].double())
    for k, client in enumerate(clients.tolist()):
        point, leaked = pdmm_centralized_leak(view, client)
        assert torch.allclose(point, models[1, client], atol=1e-10)
        assert torch.allclose(leaked, truth[k], atol=1e-7 * truth[k].abs().max())


def test_centralized_pdmm_refuses_a_graph_without_a_server():
    cfg, _ = compose_config(["protocol=pdmm_centralized", "topology=ring"])
    with pytest.raises(ConfigError, match="topology=star"):
        experiment.build(cfg)


@pytest.mark.parametrize("attack", ["diffgrad", "pdmm_leak"])
def test_the_delta_z_attacks_refuse_centralized_pdmm_in_one_sentence(attack):
    cfg, _ = compose_config([*STAR, f"attack={attack}", "adversary=eavesdropper"])
    with pytest.raises(ConfigError, match="attack=gradient_inversion"):
        experiment.build(cfg)
