"""Federated baselines: FedAvg (McMahan et al. 2017, Algorithm 1) and FedSGD (one full-batch step a round).

On ``topology=star`` the centre (node 0) is the server and the other nodes are the clients; on any other
topology every node is a client and the server is implicit. Each round a ``client_fraction`` of the
clients runs ``local_steps`` minibatch SGD steps (or ``local_epochs`` passes over its set) from the global
model and sends the result; the server averages them, weighted by local set size, and broadcasts. The
recorder sees each participant's model and, for the server and the clients sitting the round out, the
global model they hold; ``public["participants"]`` says who sent what. With all clients, one local step
and equal sets, a FedAvg round equals a D-PSGD round on the complete graph (Pasquini et al. 2023, Sec. 3).
"""

import math
from typing import Annotated

import numpy as np
import pandas as pd
import torch

from decpriv.config.types import Range, checked
from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.graphs.network import Network
from decpriv.metrics.training import Evaluator, summarise
from decpriv.models.functional import FunctionalModel
from decpriv.protocols.base import (
    BatchSize,
    Count,
    EvalEvery,
    LearningRate,
    Outcome,
    Precision,
    Protocol,
    Simulation,
    eval_rounds,
)
from decpriv.protocols.dsgd import check_batch_size
from decpriv.random import streams as rng


def client_nodes(network: Network) -> np.ndarray:
    """Every node but the centre of a star (the server); every node on any other graph."""
    n, degrees = network.n, network.degrees
    centre = np.flatnonzero(degrees == n - 1)
    if n > 2 and len(centre) == 1 and (np.delete(degrees, centre) == 1).all():
        return np.delete(np.arange(n), centre)
    return np.arange(n)


def topology_read(network: Network) -> str:
    """What a federated run took from its graph (summary.csv ``topology_read``): a star's centre as the
    server, else only the node count; the graph's other edges are never read."""
    clients = client_nodes(network)
    if len(clients) < network.n:
        server = int(np.setdiff1d(np.arange(network.n), clients)[0])
        return f"star: node {server} the server, {len(clients)} clients"
    return f"n only: {network.n} clients of an implicit server, no edge read"


Fraction = Annotated[float, Range(gt=0, le=1, what="the share of clients sampled each round", eg=1.0)]


@checked("protocol")
class FedAvg(Protocol):
    name = "fedavg"
    public = ("rounds", "lr", "batch_size", "local_steps", "client_fraction", "local_epochs")

    def __init__(
        self,
        rounds: Count = 50,
        lr: LearningRate = 0.1,
        batch_size: BatchSize = 16,
        local_steps: Count = 1,
        client_fraction: Fraction = 1.0,
        eval_every: EvalEvery = None,
        local_epochs: Annotated[float, Range(gt=0, what="passes over the local set", eg=1)] | None = None,
        dtype: Precision = "float32",
    ):
        self.rounds, self.lr, self.batch_size, self.local_steps = rounds, lr, batch_size, local_steps
        self.client_fraction, self.eval_every, self.local_epochs = client_fraction, eval_every, local_epochs
        self.dtype = dtype

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        check_batch_size(self.batch_size, network, dataset)

    def clients_per_round(self, network: Network) -> int:
        """How many clients send an update each round (``client_fraction`` of them, at least one)."""
        return max(1, round(self.client_fraction * len(client_nodes(network))))

    def steps_per_round(self, local: LocalData) -> int:
        """``local_steps``, or enough minibatches for ``local_epochs`` passes over the largest local set."""
        if self.local_epochs is None:
            return self.local_steps
        per_epoch = 1 if self.batch_size is None else math.ceil(int(local.counts.max()) / self.batch_size)
        return max(1, math.ceil(self.local_epochs * per_epoch))

    def run(self, sim: Simulation) -> Outcome:
        sim.local.require_batch(self.batch_size)
        dtype = getattr(torch, self.dtype)
        model, local = sim.model, sim.local.astype(dtype)
        n = local.n
        steps = self.steps_per_round(local)
        global_model = model.init(1, sim.seeds.seed("init"))[0].to(sim.device, dtype)
        initial = global_model.clone()
        batches = sim.seeds.torch("batches")
        noise = sim.seeds.torch("defense.noise")
        clients_rng = sim.seeds.torch("clients")
        sampler = sim.defense.sampler(self.batch_size)
        weights = local.counts.to(global_model.dtype)
        evaluate = Evaluator(model, sim.dataset, local, sim.device)
        evals = eval_rounds(self.rounds, self.eval_every)
        clients = torch.as_tensor(client_nodes(sim.network), device=sim.device)
        per_round = self.clients_per_round(sim.network)
        rows, participants = [], []
        for t in sim.progress(self.rounds + 1, self.name):
            theta = global_model.expand(n, -1).clone()
            if t in evals:
                rows.append({"round": t, **evaluate(theta)})
                sim.guard(t, theta)
            if t == self.rounds:
                break
            chosen = clients[rng.permutation(len(clients), clients_rng, sim.device)[:per_round]]
            sending = torch.zeros(n, dtype=torch.bool, device=sim.device)
            sending[chosen] = True
            for _ in range(steps):
                x, y, w = sampler.draw(local, self.batch_size, batches)
                theta = theta - self.lr * sim.defense.gradients(model, theta, x, y, w, t, noise)
            updates = sim.defense.messages(theta, t, noise)
            participants.append(sending.cpu())
            global_model = sim.defense.federate(updates, weights, chosen, global_model, sim.recorder, t)
        history = pd.DataFrame(rows)
        summary = summarise(history, self.rounds)
        summary["sampler"] = sampler.name  # how each local step drew its batch
        summary["topology_read"] = topology_read(sim.network)  # topology=ring records a ring it never read
        public = {"initial_model": initial, "participants": torch.stack(participants)}
        final = global_model.expand(n, -1).clone()
        return Outcome(history, final, summary, truth=sim.recorder.truth(), public=public)


class FedSGD(FedAvg):
    """One full-batch gradient step per client and round (Yu 2023's FedSGD baseline)."""

    name = "fedsgd"

    def __init__(
        self,
        rounds: Count = 50,
        lr: LearningRate = 0.1,
        client_fraction: Fraction = 1.0,
        eval_every: EvalEvery = None,
        dtype: Precision = "float32",
    ):
        super().__init__(
            rounds=rounds,
            lr=lr,
            batch_size=None,
            client_fraction=client_fraction,
            eval_every=eval_every,
            dtype=dtype,
        )
