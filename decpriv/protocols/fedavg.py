"""Federated baselines on a star: FedAvg (McMahan et al. 2017) and FedSGD (one full-batch step a round).

The server is not a learner: every client trains, the server averages (weighted by local set size) the
models of a ``client_fraction`` of the clients and broadcasts the result. With all clients, one local
step and equal sets, a FedAvg round equals a D-PSGD round on the complete graph (tested).
"""

import pandas as pd
import torch

from decpriv.errors import bad
from decpriv.metrics.training import Evaluator
from decpriv.protocols.base import Outcome, Protocol, Simulation, eval_rounds


class FedAvg(Protocol):
    name = "fedavg"

    def __init__(
        self,
        rounds: int = 50,
        lr: float = 0.1,
        batch_size: int | None = 16,
        local_steps: int = 1,
        client_fraction: float = 1.0,
        eval_every: int | None = None,
    ):
        if rounds < 1 or local_steps < 1:
            raise bad("protocol.rounds", rounds, "rounds and local_steps must be >= 1", "set both >= 1")
        if lr <= 0:
            raise bad("protocol.lr", lr, "the learning rate must be positive", "use e.g. protocol.lr=0.1")
        if not 0 < client_fraction <= 1:
            raise bad(
                "protocol.client_fraction", client_fraction, "a fraction lies in (0, 1]", "use e.g. 1.0"
            )
        self.rounds, self.lr, self.batch_size, self.local_steps = rounds, lr, batch_size, local_steps
        self.client_fraction, self.eval_every = client_fraction, eval_every

    def run(self, sim: Simulation) -> Outcome:
        model, local = sim.model, sim.local
        n = local.n
        global_model = model.init(1, sim.seeds.seed("init"))[0].to(sim.device)
        initial = global_model.clone()
        batches = sim.seeds.torch("batches", sim.device)
        noise = sim.seeds.torch("defense.noise", sim.device)
        sampler = sim.seeds.torch("clients", sim.device)
        weights = local.counts.to(global_model.dtype)
        evaluate = Evaluator(model, sim.dataset, local, sim.device)
        evals = eval_rounds(self.rounds, self.eval_every)
        rows = []
        per_round = max(1, round(self.client_fraction * n))
        for t in sim.progress(self.rounds + 1, self.name):
            theta = global_model.expand(n, -1).clone()
            if t in evals:
                rows.append({"round": t, **evaluate(theta)})
            if t == self.rounds:
                break
            for _ in range(self.local_steps):
                x, y, w = local.batch(self.batch_size, batches)
                theta = theta - self.lr * sim.defense.gradients(model, theta, x, y, w, t, noise)
            updates = sim.defense.messages(theta, t, noise)
            sim.recorder.record(t, 0, updates)
            chosen = torch.randperm(n, generator=sampler, device=sampler.device)[:per_round].to(sim.device)
            wsel = weights[chosen]
            global_model = (wsel[:, None] * updates[chosen]).sum(0) / wsel.sum()
        history = pd.DataFrame(rows)
        summary = {k: float(v) for k, v in history.iloc[-1].items() if k != "round"}
        return Outcome(
            history, global_model.expand(n, -1).clone(), summary, public={"initial_model": initial}
        )


class FedSGD(FedAvg):
    """One full-batch gradient step per client and round (Yu 2023's FedSGD baseline)."""

    name = "fedsgd"

    def __init__(
        self, rounds: int = 50, lr: float = 0.1, client_fraction: float = 1.0, eval_every: int | None = None
    ):
        super().__init__(rounds, lr, None, 1, client_fraction, eval_every)
