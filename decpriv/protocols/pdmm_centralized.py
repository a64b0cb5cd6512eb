"""Centralized PDMM on a star: clients around a server (Yu 2023, MSc thesis Sec. 5.1.1, Eq. 5.1-5.2).

The centre of ``topology=star`` is the server s and holds no loss; every leaf i is a client:

    clients  w_i^{t+1}   = argmin_w f_i(w) + (rho / 2) ||w - z_{s|i}^t||^2          (5.1)
             z_{i|s}^{t+1} = 2 w_i^{t+1} - z_{s|i}^t
    server   w_s^{t+1}   = (1 / N) sum_i z_{i|s}^{t+1}                             (5.2)
             z_{s|i}^{t+1} = 2 w_s^{t+1} - z_{i|s}^{t+1}

FedSplit and SCAFFOLD are special cases of this form. The z travel in the clear: round t+1 records, on
edge s -> i, the z_{s|i}^t the client starts from and, on edge i -> s, the z_{i|s}^{t+1} it answers with.
An eavesdropper so reads w_i^{t+1} = (z_{i|s}^{t+1} + z_{s|i}^t) / 2 and, from the client's optimality
condition, its gradient grad f_i(w_i^{t+1}) = -rho (w_i^{t+1} - z_{s|i}^t) in a single round: a star has
N - 1 < N edges, so subspace perturbation has no non-convergent subspace to hide it in.
The client problems are solved as PDMM's exact update (:meth:`decpriv.protocols.pdmm.PDMM.local_solve`:
Newton with a line search to ``tol``; the residual is reported and warned about likewise).
"""

import numpy as np
import pandas as pd
import torch

from decpriv.data.datasets import Dataset
from decpriv.errors import bad_value
from decpriv.graphs.network import Network
from decpriv.metrics.training import Evaluator, summarise
from decpriv.models.functional import FunctionalModel
from decpriv.protocols.base import EvalEvery, Outcome, Precision, Simulation, eval_rounds
from decpriv.protocols.fedavg import client_nodes
from decpriv.protocols.pdmm import (
    PDMM,
    MaxInner,
    Penalty,
    Rounds,
    Solver,
    Tolerance,
    directed_edges,
    last_change,
    positions,
)


def star_server(network: Network) -> int:
    """The centre of a star, which serves the other nodes."""
    clients = client_nodes(network)
    return int(np.setdiff1d(np.arange(network.n), clients)[0])


class PDMMCentralized(PDMM):
    name = "pdmm_centralized"
    public = ("rounds", "rho")  # no theta, update rule or z^0: the star form has none of them

    def __init__(
        self,
        rounds: Rounds = 100,
        rho: Penalty = 0.4,
        tol: Tolerance = 1e-8,
        max_inner: MaxInner = 500,
        newton_max: int = 64,
        solver: Solver = "newton_cg",
        strict: bool = False,
        eval_every: EvalEvery = None,
        dtype: Precision = "float64",
    ):
        super().__init__(
            rounds=rounds,
            rho=rho,
            tol=tol,
            max_inner=max_inner,
            newton_max=newton_max,
            solver=solver,
            strict=strict,
            eval_every=eval_every,
            dtype=dtype,
        )

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        if len(client_nodes(network)) == network.n:
            raise bad_value(
                "topology",
                f"{network.n} nodes, {len(network.edges)} edges",
                "centralized PDMM needs a server at the centre of a star (Yu 2023, Eq. 5.1-5.2)",
                "use topology=star",
            )
        super().check(network, dataset, model)

    def run(self, sim: Simulation) -> Outcome:
        dtype = getattr(torch, self.dtype)
        model, local, net, device = sim.model, sim.local.astype(dtype), sim.network, sim.device
        server = star_server(net)
        leaves = client_nodes(net)
        hub = np.full(len(leaves), server)
        directed = directed_edges(net)
        # rows of the (2E, p) edge messages: i -> s carries z_{i|s}, s -> i carries z_{s|i}
        uplink = torch.as_tensor(positions(directed, leaves, hub, net.n), device=device)
        downlink = torch.as_tensor(positions(directed, hub, leaves, net.n), device=device)
        observed = torch.as_tensor(
            positions(directed, sim.recorder.senders, sim.recorder.receivers, net.n), device=device
        )
        clients = torch.as_tensor(leaves, device=device)
        x, y, mask = local.x[clients], local.y[clients], local.mask[clients].to(dtype)
        initial = model.init(1, sim.seeds.seed("init")).to(device, dtype)[0]
        k = len(clients)
        rho = torch.full((k,), self.rho, dtype=dtype, device=device)
        z_down = initial.expand(k, -1).clone()  # z_{s|i}^0: the server broadcasts its initial model
        w_clients, w_server = z_down.clone(), initial.clone()
        noise = sim.seeds.torch("defense.noise")
        evaluate = Evaluator(model, sim.dataset, local, device)
        evals = eval_rounds(self.rounds, self.eval_every)
        models, rows, residuals, inner, memory = [], [], [], [], None
        for t in sim.progress(self.rounds + 1, self.name):
            w = torch.empty(net.n, model.p, dtype=dtype, device=device)
            w[clients], w[server] = w_clients, w_server
            models.append(w)
            if t in evals:
                row = {"round": t, **evaluate(w)}
                if t > 0:
                    row["local_residual"] = float(residuals[-1])
                rows.append(row)
                sim.guard(t, w)
            if t == self.rounds:
                break
            solve, memory = self.local_solve(model, w_clients, -self.rho * z_down, rho, x, y, mask, memory)
            w_clients = solve.w
            residuals.append(solve.residual.max())
            inner.append(solve.iterations.double().mean())
            z_up = sim.defense.messages(2 * w_clients - z_down, t, noise)
            sent = torch.empty(len(directed), model.p, dtype=dtype, device=device)
            sent[uplink], sent[downlink] = z_up, z_down
            sim.recorder.record(t + 1, 0, sent[observed])
            w_server = z_up.mean(0)
            z_down = 2 * w_server - z_up
        history = pd.DataFrame(rows)
        summary = summarise(history, self.rounds)
        summary.update(self.convergence(torch.stack(residuals).cpu(), torch.stack(inner).cpu()))
        trajectory = torch.stack(models).cpu()
        summary["pdmm_last_change"] = last_change(trajectory)
        return Outcome(history, w, summary, truth={"models": trajectory})
