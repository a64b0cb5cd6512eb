"""Gossip averaging of private vectors (Boyd et al. 2006): x^{k+1} = W x^k, optionally Chebyshev-accelerated.

Each node's private vector is the mean of its local samples (with ``partition=one_per_node``: its one
sample, e.g. an image). Messages x^0 .. x^{T-1} are sent (T = ``protocol.rounds`` gossip steps); this is
the setting of El Mrini et al.'s knowledge-matrix attack. With a symmetric W the nodes converge to the
mean at rate (1 - gap)^k; with the row-stochastic ``uniform`` W they agree on a degree-weighted average.
"""

import pandas as pd
import torch

from decpriv.config.types import checked
from decpriv.metrics.training import consensus_distance
from decpriv.protocols.base import Count, EvalEvery, Outcome, Precision, Protocol, Simulation, eval_rounds


@checked("protocol")
class GossipAveraging(Protocol):
    name = "gossip"
    public = ("rounds", "accelerated")
    noised = "values"

    def __init__(
        self,
        rounds: Count = 10,
        accelerated: bool = False,
        dtype: Precision = "float64",
        eval_every: EvalEvery = 1,
    ):
        self.rounds = rounds
        self.accelerated = accelerated
        self.dtype = dtype
        self.eval_every = eval_every

    def gossip_schedule(self) -> tuple[int, int, bool]:
        return self.rounds, 1, self.accelerated

    def run(self, sim: Simulation) -> Outcome:
        dtype = getattr(torch, self.dtype)
        W = sim.network.gossip_operator(sim.device, dtype)
        mask = sim.local.mask.to(dtype)
        flat = sim.local.x.reshape(sim.local.n, sim.local.x.shape[1], -1).to(dtype)
        x0 = (flat * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        noise_gen = sim.seeds.torch("defense.noise")
        x = sim.defense.messages(x0, 0, noise_gen)
        mean = x0.mean(0)
        # Chebyshev acceleration (Montijano et al.): x^{k+1} = w_k (W x^k) + (1 - w_k) x^{k-1}
        gap = sim.network.spectral_gap.value if self.accelerated else 0.0
        lam = 1.0 - gap
        prev, omega = x, 1.0
        rows = []
        evals = eval_rounds(self.rounds, self.eval_every)
        for t in sim.progress(self.rounds + 1, "gossip"):
            if t in evals:
                rows.append(
                    {
                        "round": t,
                        "consensus_distance": consensus_distance(x),
                        "mse_to_mean": float(((x - mean) ** 2).sum(1).mean()),
                    }
                )
            if t == self.rounds:
                break
            sim.recorder.record(t, 0, x)
            nxt = W @ x
            if self.accelerated and t > 0:
                omega = 1.0 / (1.0 - (lam**2) * omega / 4.0) if t > 1 else 2.0 / (2.0 - lam**2)
                nxt = omega * nxt + (1.0 - omega) * prev
            prev, x = x, nxt
        history = pd.DataFrame(rows)
        last = history.iloc[-1]
        summary = {
            "consensus_distance": float(last.consensus_distance),
            "mse_to_mean": float(last.mse_to_mean),
        }
        return Outcome(
            history, x, summary, truth={"private_values": x0}, public={"value_dim": int(x0.shape[1])}
        )
