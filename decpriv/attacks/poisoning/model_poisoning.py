"""Model poisoning: sign flipping, Gaussian, A Little Is Enough, Inner Product Manipulation
(:mod:`decpriv.attacks.poisoning.vectors` for each paper's vector), forged by
:class:`~decpriv.attacks.poisoning.forgers.VectorForger`."""

from abc import abstractmethod
from functools import partial
from typing import Annotated, Literal

import numpy as np

from decpriv.adversary.view import AttackContext
from decpriv.attacks.poisoning import vectors
from decpriv.attacks.poisoning.attack import Poisoning
from decpriv.attacks.poisoning.forgers import VectorForger
from decpriv.config.types import Range, checked
from decpriv.defenses.robust import byzantine_neighbours, neighbourhood_sizes

Knowledge = Literal["neighbours", "own"]  # read the honest neighbours' messages (rushing), or only its own
Strength = Annotated[float, Range(gt=0, what="the attack's strength", eg=1.0)]


def crafted(craft, *args):
    """``craft(mean, std, *args)`` as the forger calls it (a generator it does not need dropped)."""
    return partial(_apply, craft, args)


def _apply(craft, args, mean, std, generator):
    return craft(mean, std, *args)


class VectorAttack(Poisoning):
    knowledge: str = "neighbours"

    @abstractmethod
    def craft(self, plan):
        """The forger's crafting function ``(mean, std, generator) -> the Byzantine vector``."""

    def behaviour(self, context: AttackContext, plan) -> VectorForger:
        heard = context.adversary.observed_senders(context.network)
        generator = context.seeds.torch(f"attack.{self.name}")
        return VectorForger(
            context.network, context.adversary.nodes, heard, self.knowledge, self.craft(plan), generator
        )

    def settings(self) -> dict:
        return {"poisoning_knowledge": self.knowledge}


@checked("attack")
class SignFlip(VectorAttack):
    name = "sign_flip"

    def __init__(self, scale: Strength = 1.0, knowledge: Knowledge = "neighbours"):
        self.scale, self.knowledge = scale, knowledge

    def craft(self, plan):
        return crafted(vectors.sign_flip, self.scale)

    def settings(self) -> dict:
        return {**super().settings(), "poisoning_scale": self.scale}


@checked("attack")
class InnerProductManipulation(VectorAttack):
    name = "ipm"

    def __init__(self, epsilon: Strength = 0.5, knowledge: Knowledge = "neighbours"):
        self.epsilon, self.knowledge = epsilon, knowledge

    def craft(self, plan):
        return crafted(vectors.ipm, self.epsilon)

    def settings(self) -> dict:
        return {**super().settings(), "poisoning_epsilon": self.epsilon}


@checked("attack")
class ALittleIsEnough(VectorAttack):
    name = "alie"

    def __init__(
        self,
        z: Annotated[float, Range(gt=0, what="the standard deviations moved", eg=1.0)] | None = None,
        knowledge: Knowledge = "neighbours",
    ):
        self.z, self.knowledge = z, knowledge

    def plan(self, context: AttackContext) -> float:
        """z: ``attack.z``, or Baruch et al.'s z_max for the tightest honest receiver (its senders, its
        Byzantine senders)."""
        if self.z is not None:
            return self.z
        W, attackers = context.network.W, context.adversary.nodes
        receivers = np.setdiff1d(context.network.adjacency[attackers].indices, attackers)
        sizes, byz = neighbourhood_sizes(W)[receivers], byzantine_neighbours(W, attackers)[receivers]
        return float(min(vectors.alie_z(int(n), int(f)) for n, f in set(zip(sizes, byz, strict=True))))

    def craft(self, plan: float):
        return crafted(vectors.alie, plan)

    def run(self, view) -> dict:
        return {**super().run(view), "alie_z": view.plan}

    def evaluate(self, findings, truth, view):
        out = super().evaluate(findings, truth, view)
        out.summary["alie_z"] = findings["alie_z"]
        return out


def gaussian_craft(mu: float, sigma: float, mean, std, generator):
    return vectors.gaussian(tuple(mean.shape), mu, sigma, generator)


@checked("attack")
class Gaussian(VectorAttack):
    name = "gaussian"

    def __init__(self, mu: float = 0.0, sigma: Strength = 1.0):
        self.mu, self.sigma = mu, sigma
        self.knowledge = "own"  # reads nothing: the shape only

    def craft(self, plan):
        return partial(gaussian_craft, self.mu, self.sigma)

    def settings(self) -> dict:
        return {"poisoning_mu": self.mu, "poisoning_sigma": self.sigma}
