"""D-SGD / D-PSGD (Lian et al. 2017; Bellet, PODL 2024, Sec. 1; Pasquini et al. 2023, Sec. 3):

    theta_v^{t+1/2} = theta_v^t - lr * (grad l(theta_v^t; batch_v^t) [+ momentum, weight decay])   (local_steps times)
    theta^{t+1}     = W^K theta^{t+1/2}                                                          (K = gossip_steps)

All nodes at once: one batched gradient call per local step, one (sparse) matmul per gossip step. The
adversary records the broadcast messages theta^{t+1/2} (and the intermediate gossip values when K > 1).
Minibatches are drawn every local step by the defense's sampler (:mod:`decpriv.data.sampling`: ``batch_size``
distinct local samples, or Poisson sampling at rate batch_size / m_v for DP-SGD).

A round allocates nothing of size (n, p) when the defense leaves gradients and the aggregation rule as they
are and no active attack forges messages: the gradients land in one reused buffer (for linear/MLP models
trained by plain SGD, no buffer at all: the hand-written backward pass subtracts each layer's gradient
in place, :meth:`FunctionalModel.sgd_step_`) and the gossip product
alternates between two state buffers (``addmm_`` in place): a fresh (n, p) tensor per operation costs its
page faults on first touch, more than the sparse product itself (docs/speed.md).
"""

from typing import Annotated

import pandas as pd
import torch

from decpriv.adversary.behaviour import apply_forgery
from decpriv.config.types import Range, checked
from decpriv.data.datasets import Dataset
from decpriv.defenses.base import Defense
from decpriv.errors import bad_value
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


def check_batch_size(batch_size: int | None, network: Network, dataset: Dataset) -> None:
    """Refuse a batch larger than the average local set (the smallest is never larger); the exact test
    against the partition is :meth:`LocalData.require_batch` at the start of the run."""
    average = len(dataset.x_train) // network.n
    if batch_size is not None and batch_size > average:
        raise bad_value(
            "protocol.batch_size",
            batch_size,
            f"local sets hold about {average} samples",
            f"use protocol.batch_size <= {average} or null for full batch",
        )


@checked("protocol")
class DSGD(Protocol):
    name = "dsgd"
    public = (
        "rounds",
        "lr",
        "batch_size",
        "local_steps",
        "momentum",
        "weight_decay",
        "gossip_steps",
        "same_init",
        "average_last",
    )

    noised = "gradients"

    def __init__(
        self,
        rounds: Count = 100,
        lr: LearningRate = 0.1,
        batch_size: BatchSize = 16,
        local_steps: Count = 1,
        momentum: Annotated[float, Range(ge=0, lt=1, what="momentum", eg=0.9)] = 0.0,
        weight_decay: float = 0.0,
        gossip_steps: Count = 1,
        same_init: bool = True,
        eval_every: EvalEvery = None,
        average_last: int | None = None,
        dtype: Precision = "float32",
    ):
        check_average_last(average_last, rounds)  # a window within the rounds: two keys
        self.rounds, self.lr, self.batch_size = rounds, lr, batch_size
        self.local_steps, self.momentum, self.weight_decay = local_steps, momentum, weight_decay
        self.gossip_steps, self.same_init, self.eval_every = gossip_steps, same_init, eval_every
        self.average_last, self.dtype = average_last, dtype

    def gossip_schedule(self) -> tuple[int, int, bool]:
        return self.gossip_steps, self.rounds, False

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        check_batch_size(self.batch_size, network, dataset)

    def mix(self, W: torch.Tensor, messages: torch.Tensor, round_: int, sim: Simulation) -> torch.Tensor:
        """K gossip steps through the defense's aggregation rule; the adversary records each step's
        messages and an active adversary may replace its own, per receiver, at the first step."""
        x = messages
        for k in range(self.gossip_steps):
            forgery = None
            if sim.behaviour is not None and k == 0:
                seen = torch.as_tensor(sim.recorder.senders, device=x.device)
                own = torch.as_tensor(sim.adversary.nodes, device=x.device)
                # what crosses into the attack's process is on the CPU (docs/simulation.md)
                forgery = sim.behaviour.forge(round_, sim.recorder.senders, x[seen].cpu(), x[own].cpu())
            if forgery is not None and sim.defense.robust:  # the rule sees each forged message on its edge
                sim.recorder.record(round_, k, x)
                x = sim.defense.receive(W, x, forgery)
                continue
            mixed = sim.defense.exchange(W, x, sim.recorder, round_, k)
            x = mixed if forgery is None else apply_forgery(sim.network.W, mixed, x, forgery)
        return x

    def mix_into(
        self, W: torch.Tensor, messages: torch.Tensor, spare: torch.Tensor, round_: int, sim: Simulation
    ):
        """:meth:`mix` for the plain aggregation rule without forgery, each step's product written into the
        state buffer the step does not read; returns (mixed, the buffer left free)."""
        x = messages
        for k in range(self.gossip_steps):
            sim.recorder.record(round_, k, x)
            # in place with beta=0 (the buffer's old values are ignored): torch.mm(..., out=) on a sparse
            # W zero-fills a fresh (n, p) tensor and copies it over, three times the product's cost
            mixed = spare.addmm_(W, x, beta=0)
            spare, x = x, mixed
        return x, spare

    @staticmethod
    def plain_gradients(sim: Simulation) -> bool:
        """The defense leaves gradients as they are: they can land in one reused buffer."""
        return type(sim.defense).gradients is Defense.gradients

    @staticmethod
    def plain_exchange(sim: Simulation) -> bool:
        """Messages are aggregated by W @ x with no forgery: the gossip product can alternate two buffers."""
        kind = type(sim.defense)
        untouched = kind.exchange is Defense.exchange and kind.aggregate is Defense.aggregate
        return untouched and sim.behaviour is None

    def run(self, sim: Simulation) -> Outcome:
        sim.local.require_batch(self.batch_size)
        dtype = getattr(torch, self.dtype)
        model, local = sim.model, sim.local.astype(dtype)
        theta = model.init(local.n, sim.seeds.seed("init"), self.same_init).to(sim.device, dtype)
        initial = theta.clone()
        plain_gradients, plain_exchange = self.plain_gradients(sim), self.plain_exchange(sim)
        # plain SGD on a linear/MLP model: each layer's gradient is subtracted as the backward pass forms it
        fused = plain_gradients and model.chain is not None and not self.momentum and not self.weight_decay
        grad_buffer = torch.empty_like(theta) if plain_gradients and not fused else None
        spare = torch.empty_like(theta) if plain_exchange else None
        W = sim.network.gossip_operator(sim.device, dtype)
        batches, sampler = sim.seeds.torch("batches"), sim.defense.sampler(self.batch_size)
        noise = sim.seeds.torch("defense.noise")
        velocity = torch.zeros_like(theta) if self.momentum else None
        evaluate = Evaluator(model, sim.dataset, local, sim.device)
        evals = eval_rounds(self.rounds, self.eval_every)
        evals |= set(range(self.rounds - (self.average_last or 1) + 1, self.rounds + 1))
        rows = []
        for t in sim.progress(self.rounds + 1, self.name):
            if t in evals:
                rows.append({"round": t, **evaluate(theta)})
                sim.guard(t, theta)
            if t == self.rounds:
                break
            for _ in range(self.local_steps):
                x, y, w = sampler.draw(local, self.batch_size, batches)
                if fused:
                    with torch.no_grad():
                        model.sgd_step_(theta, x, y, w.to(dtype), self.lr)
                    continue
                if plain_gradients:
                    with torch.no_grad():
                        g = model.node_gradients(theta, x, y, w.to(dtype), out=grad_buffer)
                else:
                    g = sim.defense.gradients(model, theta, x, y, w.to(dtype), t, noise)
                if self.weight_decay:
                    g = g + self.weight_decay * theta
                # In place: theta is this run's own tensor (the init or the last mix's output), and at
                # n = 1024 a fresh (n, p) buffer per update costs as much as the update itself.
                if self.momentum:
                    velocity.mul_(self.momentum).add_(g)
                    g = velocity
                theta.add_(g, alpha=-self.lr)
            messages = sim.defense.messages(theta, t, noise)
            if plain_exchange:
                # the old state is free once its messages are out (a defense's messages are a new tensor)
                theta, spare = self.mix_into(W, messages, spare if messages is theta else theta, t, sim)
            else:
                theta = self.mix(W, messages, t, sim)
        history = pd.DataFrame(rows)
        summary = summarise(history, self.rounds, self.average_last)
        summary["sampler"] = sampler.name  # how each local step drew its batch
        public = {"initial_model": initial[0]} if self.same_init else {}
        truth = {"initial_states": initial, **sim.recorder.truth()}
        return Outcome(history, theta, summary, truth=truth, public=public)
