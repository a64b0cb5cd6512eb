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
from decpriv.errors import bad_value

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

    def plan(self, context: AttackContext) -> tuple[float, str]:
        """(z, where it comes from): ``attack.z``, or :func:`default_z` over the honest receivers. With
        ``knowledge=own`` the mean and deviation are the Byzantine nodes' own models': one node's deviation
        is 0, and it would send its honest model whatever z (refused)."""
        if self.knowledge == "own" and context.adversary.nodes.size < 2:
            raise bad_value(
                "attack.knowledge",
                self.knowledge,
                "with one Byzantine node the standard deviation over its own model is 0, so ALIE would send "
                "that honest model whatever attack.z",
                "corrupt 2 or more nodes (adversary.count=2) or use attack.knowledge=neighbours",
            )
        if self.z is not None:
            return self.z, "attack.z"
        return default_z(context.network.W, context.network.adjacency, context.adversary.nodes)

    def craft(self, plan: tuple[float, str]):
        return crafted(vectors.alie, plan[0])

    def run(self, view) -> dict:
        return {**super().run(view), "alie_z": view.plan[0], "alie_z_rule": view.plan[1]}

    def evaluate(self, findings, truth, view):
        out = super().evaluate(findings, truth, view)
        out.summary["alie_z"], out.summary["alie_z_rule"] = findings["alie_z"], findings["alie_z_rule"]
        out.summary["verdict"] = (
            f"{out.summary['verdict'][:-1]}; z = {findings['alie_z']:.3f} ({findings['alie_z_rule']})."
        )
        return out


FALLBACK_Z = 1.5  # ByzFL's default tau for ALittleIsEnough (Allouah et al. 2025)


def default_z(W, adjacency, attackers: np.ndarray) -> tuple[float, str]:
    """Baruch et al.'s z_max for the tightest honest receiver (its n senders, f of them Byzantine), over
    the receivers where the formula gives a positive z (:func:`vectors.alie_z`); where it gives one at
    none (one attacker beside an even neighbourhood: the complete graph on an even n, a star's leaf),
    ByzFL's default 1.5, and the summary says which (``alie_z_rule``)."""
    receivers = np.setdiff1d(adjacency[attackers].indices, attackers)
    sizes, byz = neighbourhood_sizes(W)[receivers], byzantine_neighbours(W, attackers)[receivers]
    zs = [vectors.alie_z(int(n), int(f)) for n, f in set(zip(sizes, byz, strict=True))]
    meaningful = [z for z in zs if z is not None]
    if meaningful:
        return float(min(meaningful)), "Baruch et al. z_max, tightest receiver"
    return FALLBACK_Z, "ByzFL's default: Baruch et al.'s z_max is not positive at any receiver"


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
