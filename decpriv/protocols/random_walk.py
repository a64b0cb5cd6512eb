"""Private random-walk SGD (Cyffers, Bellet, Basu, ICML 2024): one model (the token) walks along W.

    theta^{t+1} = theta^t - lr * g_{v_t}(theta^t),   v_{t+1} ~ W[v_t, :]

g is the defense's gradient at the current holder v_t on a fresh local batch (``defense=ldp``: clipped,
plus N(0, sigma^2 C^2 I), the private walk). One node works per step, so the loop is over walk steps,
never over nodes. The walk starts at a node drawn uniformly from the ``protocol.walk`` stream. The token
passes between neighbours only; no transcript is recorded (attacks read gossip/D-SGD transcripts).
History rows score the token model, held by every node for the metrics.
"""

import numpy as np
import pandas as pd
import torch

from decpriv.config.types import checked
from decpriv.data.datasets import Dataset
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
    check_average_last,
    eval_rounds,
)
from decpriv.protocols.dsgd import check_batch_size


@checked("protocol")
class RandomWalkSGD(Protocol):
    name = "random_walk"
    public = ("rounds", "lr", "batch_size", "local_steps", "average_last")
    walks = True

    def __init__(
        self,
        rounds: Count = 1000,
        lr: LearningRate = 0.1,
        batch_size: BatchSize = 16,
        eval_every: EvalEvery = None,
        average_last: int | None = None,
        dtype: Precision = "float32",
    ):
        check_average_last(average_last, rounds)  # a window within the rounds: two keys
        self.rounds, self.lr, self.batch_size = rounds, lr, batch_size
        self.eval_every, self.average_last, self.dtype = eval_every, average_last, dtype
        self.local_steps = 1

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        check_batch_size(self.batch_size, network, dataset)

    def walk(self, network: Network, generator: np.random.Generator) -> np.ndarray:
        """Holders v_0..v_{T-1}: v_0 uniform, then v_{t+1} ~ W[v_t, :] (inverse-CDF on the CSR row)."""
        W = network.W
        path = np.empty(self.rounds, dtype=np.int64)
        path[0] = generator.integers(network.n)
        draws = generator.random(self.rounds)
        for t in range(1, self.rounds):
            row = slice(W.indptr[path[t - 1]], W.indptr[path[t - 1] + 1])
            cdf = np.cumsum(W.data[row])
            path[t] = W.indices[row][
                min(np.searchsorted(cdf, draws[t] * cdf[-1], side="right"), len(cdf) - 1)
            ]
        return path

    def run(self, sim: Simulation) -> Outcome:
        sim.local.require_batch(self.batch_size)
        dtype = getattr(torch, self.dtype)
        model, local = sim.model, sim.local.astype(dtype)
        theta = model.init(1, sim.seeds.seed("init"), True).to(sim.device, dtype)
        path = self.walk(sim.network, sim.seeds.numpy("protocol.walk"))
        batches, sampler = sim.seeds.torch("batches"), sim.defense.sampler(self.batch_size)
        noise = sim.seeds.torch("defense.noise")
        evaluate = Evaluator(model, sim.dataset, local, sim.device)
        evals = eval_rounds(self.rounds, self.eval_every)
        evals |= set(range(self.rounds - (self.average_last or 1) + 1, self.rounds + 1))
        rows = []
        for t in sim.progress(self.rounds + 1, self.name):
            if t in evals:
                rows.append({"round": t, **evaluate(theta.expand(local.n, -1))})
                sim.guard(t, theta)
            if t == self.rounds:
                break
            v = int(path[t])
            x, y, weight = sampler.draw(local.node(v), self.batch_size, batches)
            g = sim.defense.gradients(model, theta, x, y, weight.to(dtype), t, noise)
            theta = theta - self.lr * g
        history = pd.DataFrame(rows)
        summary = summarise(history, self.rounds, self.average_last)
        summary["sampler"] = sampler.name  # how each local step drew its batch
        visits = np.bincount(path, minlength=sim.network.n)
        summary["walk_nodes_visited"] = int((visits > 0).sum())
        final = theta.expand(local.n, -1).clone()
        return Outcome(history, final, summary, truth={"walk": path})
