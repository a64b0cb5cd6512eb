"""The audited mechanism run on trial datasets, with the real defense's noise and the real protocol's mixing.

Every coordinate of the private vectors is one trial: the defenses audited here clip and add iid Gaussian
noise, and the protocols mix linearly, coordinate by coordinate. So the defense is applied to each
coordinate as a one-dimensional private value (clipped to [-C, C], the worst-case replacement moving it by
Delta = 2C), and one run on D coordinates is D independent runs of the one-dimensional mechanism.

A run returns (B, rows, D): B blocks of released values, each block drawn with fresh noise (one block for
gossip, whose messages of all steps share one noise draw; one block per noisy gradient step otherwise), and
``senders`` the node each row comes from (-1: the aggregate a central server releases).
"""

import copy

import numpy as np
import torch

from decpriv.adversary.recorder import Recorder
from decpriv.data.partition import LocalData
from decpriv.defenses.base import Defense
from decpriv.defenses.dp import clip_rows
from decpriv.protocols.base import Simulation
from decpriv.random import streams as rng
from decpriv.random.streams import Seeds

NOISE_KEYS = ("sigma", "sigma_cdp", "sigma_cor")
PAIR_STREAM = "defense.decor_pairs"  # the stream DECOR binds for the pairs' shared seeds


def silenced(defense: Defense) -> Defense:
    """A copy of ``defense`` with its noise levels set to zero: the noiseless run gives the view's mean."""
    quiet = copy.copy(defense)
    for key in NOISE_KEYS:
        if getattr(quiet, key, None) is not None:
            setattr(quiet, key, 0.0)
    return quiet


class CoordinateWise(Defense):
    """The audited defense with each coordinate of a node's value as its own one-dimensional value."""

    def __init__(self, inner: Defense):
        self.inner = inner

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        return self.inner.messages(values[..., None], round_, generator)[..., 0]


class Canary:
    """A model whose every node's gradient is a fixed contribution (the accountant's fixed inputs)."""

    def __init__(self, contributions: torch.Tensor):
        self.contributions = contributions

    def node_gradients(self, theta, x, y, weight) -> torch.Tensor:
        return self.contributions


class GossipTrials:
    """Muffliato gossip: the protocol's own run on trial values, every message of ``senders`` recorded."""

    blocks_are_iid = False

    def __init__(self, audited, senders: np.ndarray):
        self.audited, self.senders = audited, np.asarray(senders, dtype=np.int64)

    def run(self, values: torch.Tensor, seeds: Seeds, noisy: bool) -> tuple[torch.Tensor, np.ndarray]:
        a, device = self.audited, torch.device("cpu")
        n, trials = values.shape
        local = LocalData(
            values[:, None, :].to(device),
            torch.zeros(n, 1, dtype=torch.long, device=device),
            torch.ones(n, 1, dtype=torch.bool, device=device),
            torch.ones(n, dtype=torch.long, device=device),
            tuple(np.arange(n)[:, None]),
        )
        defense = CoordinateWise(a.defense if noisy else silenced(a.defense))
        recorder = Recorder.broadcast(self.senders)
        sim = Simulation(
            network=a.network,
            dataset=None,
            local=local,
            model=a.context.model,
            defense=defense,
            adversary=a.context.adversary,
            recorder=recorder,
            seeds=seeds,
            device=device,
        )
        a.protocol.run(sim)
        recorded = recorder.transcript().values.to(torch.float64)  # (steps, senders, D)
        return recorded.reshape(1, -1, trials), np.tile(self.senders, recorded.shape[0])


class SGDGossipTrials:
    """Muffliato-SGD (D-SGD with LDP gradient noise and K gossip steps a round): every round each node
    takes the step theta - lr (clipped contribution + noise) with the defense's own noise, then the
    protocol's own K-step mix records every message of ``senders``. The contributions are the same every
    round (fixed inputs, the accountant's model; equal contributions are its worst case on exact pairs)."""

    blocks_are_iid = False

    def __init__(self, audited, senders: np.ndarray):
        self.audited, self.senders = audited, np.asarray(senders, dtype=np.int64)

    def run(self, values: torch.Tensor, seeds: Seeds, noisy: bool) -> tuple[torch.Tensor, np.ndarray]:
        a, device = self.audited, torch.device("cpu")
        defense = a.defense if noisy else silenced(a.defense)
        recorder = Recorder.broadcast(self.senders)
        sim = Simulation(
            network=a.network,
            dataset=None,
            local=None,
            model=a.context.model,
            defense=Defense(),
            adversary=a.context.adversary,
            recorder=recorder,
            seeds=seeds,
            device=device,
        )
        W = a.network.gossip_operator(device, torch.float64)
        generator = seeds.torch("defense.noise")
        theta = torch.zeros_like(values)
        for t in range(a.protocol.rounds):
            g = defense.gradients(Canary(values[..., None]), None, None, None, None, t, generator)[..., 0]
            theta = a.protocol.mix(W, theta - a.protocol.lr * g, t, sim)
        recorded = recorder.transcript().values.to(torch.float64)
        return recorded.reshape(1, -1, values.shape[1]), np.tile(self.senders, recorded.shape[0])


class GradientTrials:
    """User-level Gaussian gradient noise (ldp, cdp, decor): ``steps`` releases of every node's noisy
    clipped contribution (the cdp defense's own aggregate: its exact average, one row). DECOR's rows are
    followed by the edges' shared secrets u_e (row n + e), which a curious or colluding node holds for
    its own edges: drawn from the stream DECOR's pairs share, as :meth:`Decor.correlated` draws them."""

    blocks_are_iid = True

    def __init__(self, audited, steps: int):
        self.defense, self.steps = audited.defense, steps
        edges = audited.network.edges
        self.incidence = torch.zeros(audited.network.n, len(edges), dtype=torch.float64)
        self.incidence[edges[:, 0], np.arange(len(edges))] = 1.0  # +u_e at the first node, -u_e at the second
        self.incidence[edges[:, 1], np.arange(len(edges))] = -1.0

    def run(self, values: torch.Tensor, seeds: Seeds, noisy: bool) -> tuple[torch.Tensor, np.ndarray]:
        n = len(values)
        defense = self.defense if noisy else silenced(self.defense)
        generator, pairs = seeds.torch("defense.noise"), seeds.torch(PAIR_STREAM)
        released = torch.stack(
            [self.release(defense, values, t, generator, pairs) for t in range(self.steps)]
        )
        mechanism = self.defense.mechanism()
        if mechanism.central:
            return released, np.full(1, -1)
        return released, np.arange(n + (self.incidence.shape[1] if mechanism.correlated else 0))

    def release(self, defense: Defense, values: torch.Tensor, step: int, generator, pairs) -> torch.Tensor:
        mechanism = defense.mechanism()
        if mechanism.correlated:  # DECOR's gradients(), the clip taken coordinate by coordinate
            private = rng.normal(values.shape, generator, values.device, values.dtype)
            secrets = defense.sigma_cor * rng.normal(
                (self.incidence.shape[1], values.shape[1]), pairs, values.device, values.dtype
            )
            clipped = clip_rows(values[..., None], defense.clip)[..., 0]
            messages = clipped + defense.sigma_cdp * private + self.incidence @ secrets
            return torch.cat([messages, secrets])
        noisy = defense.gradients(Canary(values[..., None]), None, None, None, None, step, generator)[..., 0]
        return defense.aggregate(None, noisy)[:1] if mechanism.central else noisy
