"""The Byzantine nodes' messages, forged each round in the sealed attack process
(:class:`~decpriv.adversary.behaviour.Behaviour`): every attacker sends each honest neighbour a poisoned
model instead of its own, through whatever aggregation rule the defense applies.

- :class:`VectorForger` (model poisoning): one crafted vector per attacker from the honest messages it
  knows: ``knowledge=neighbours`` reads this round's messages of its honest neighbours (a rushing adversary,
  the omniscient setting of Baruch et al. 2019 and Xie et al. 2020, restricted to what the node hears);
  ``knowledge=own`` only the attackers' own honest models (no honest message read).
- :class:`PoisonedTrainer` (data poisoning): each attacker runs D-SGD on its own poisoned data (flipped
  labels, or a backdoor trigger) and sends that model; it keeps its model as the plain average of what it
  hears, its own poisoned model included.
"""

from collections.abc import Callable

import numpy as np
import torch

from decpriv.adversary.behaviour import Behaviour, Forgery
from decpriv.attacks.poisoning import vectors
from decpriv.graphs.network import Network
from decpriv.models.functional import FunctionalModel
from decpriv.random import streams as rng


def honest_links(network: Network, attackers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(senders, receivers): every link from an attacker to an honest neighbour."""
    A = network.adjacency[attackers]
    senders = np.repeat(attackers, np.diff(A.indptr))
    receivers = A.indices
    honest = ~np.isin(receivers, attackers)
    return senders[honest], receivers[honest]


class VectorForger(Behaviour):
    """Model poisoning: ``craft(mean, std, generator) -> (A, p)`` from the honest messages each attacker knows."""

    def __init__(
        self,
        network: Network,
        attackers: np.ndarray,
        heard: np.ndarray,
        knowledge: str,
        craft: Callable,
        generator: torch.Generator,
    ):
        self.attackers, self.knowledge, self.craft, self.generator = attackers, knowledge, craft, generator
        self.senders, self.receivers = honest_links(network, attackers)
        near = network.adjacency[attackers][:, heard].toarray() > 0  # (A, S)
        self.reads = torch.as_tensor(near & ~np.isin(heard, attackers)[None, :])
        self.row = torch.as_tensor(np.searchsorted(attackers, self.senders))

    def forge(self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor) -> Forgery:
        values = observed if self.knowledge == "neighbours" else own
        mask = (
            self.reads if self.knowledge == "neighbours" else torch.ones(len(own), len(own), dtype=torch.bool)
        )
        mean, std = vectors.masked_moments(values.double(), mask)
        crafted = self.craft(mean, std, self.generator).to(observed.dtype)
        return Forgery(self.senders, self.receivers, crafted[self.row])


class PoisonedTrainer(Behaviour):
    """Data poisoning: local SGD on ``poison(x, y, generator) -> (x, y)`` of the attackers' own batches."""

    def __init__(
        self,
        network: Network,
        attackers: np.ndarray,
        heard: np.ndarray,
        model: FunctionalModel,
        data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        hyper: dict,
        poison: Callable,
        generator: torch.Generator,
    ):
        self.attackers, self.model, self.poison, self.generator = attackers, model, poison, generator
        self.x, self.y, self.mask = data
        self.lr, self.steps = float(hyper["lr"]), int(hyper.get("local_steps", 1))
        self.batch = hyper.get("batch_size")
        self.senders, self.receivers = honest_links(network, attackers)
        self.row = torch.as_tensor(np.searchsorted(attackers, self.senders))
        self.mixing = torch.as_tensor(network.W[attackers][:, heard].toarray())  # (A, S)
        self.own_columns = torch.as_tensor(np.searchsorted(heard, attackers))
        self.state: torch.Tensor | None = None

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each attacker's batch: ``batch_size`` of its own samples, drawn with replacement (all without one)."""
        counts = self.mask.sum(1)
        if self.batch is None:
            return self.x, self.y
        pick = (rng.uniform((len(counts), int(self.batch)), self.generator) * counts[:, None]).long()
        rows = torch.arange(len(counts))[:, None]
        return self.x[rows, pick], self.y[rows, pick]

    def forge(self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor) -> Forgery:
        # the first round starts from the honest step the attacker just took (its initial model is not public)
        theta = (own if self.state is None else self.state).detach().clone()
        for _ in range(self.steps):
            x, y = self.draw()
            x, y = self.poison(x, y, self.generator)
            weight = torch.ones(y.shape, dtype=theta.dtype) if self.batch else self.mask.to(theta.dtype)
            with torch.no_grad():
                theta = theta - self.lr * self.model.node_gradients(theta, x.to(theta.dtype), y, weight)
        heard = observed.clone()
        heard[self.own_columns] = theta
        self.state = self.mixing.to(theta.dtype) @ heard
        return Forgery(self.senders, self.receivers, theta[self.row])
