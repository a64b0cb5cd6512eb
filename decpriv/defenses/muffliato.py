"""Muffliato's private gossip averaging (Cyffers, Even, Bellet, Massoulie, NeurIPS 2022, Alg. 1).

Every node clips its private value to the ball of radius C (so replacing it moves it by at most
Delta = 2C), adds eta_v ~ N(0, sigma^2 C^2 I) ONCE, then the gossip protocol runs its K (optionally
Chebyshev-accelerated) steps on the noisy values. The pairwise Network DP accountant
(``accountant=network_dp``) gives f(u, v), the exact Renyi loss of v's whole view for the actual W and K,
beside the paper's Theorem 1.

Private D-SGD with Muffliato (Sec. 5) is ``defense=ldp protocol.gossip_steps=K accountant=network_dp``:
the LDP gradient noise is the message noise gamma sigma C of the paper's PRIVATE_GOSSIP_AVERAGING.
"""

from typing import Annotated, Any

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense, Mechanism
from decpriv.defenses.dp import clip_rows
from decpriv.random import streams as rng


@checked("defense")
class Muffliato(Defense):
    """Clip each node's value to radius C, add N(0, sigma^2 C^2 I) once before gossip."""

    name = "muffliato"
    accountant = "network_dp"

    def __init__(
        self,
        clip: Annotated[float, Range(gt=0, what="the radius of the values' ball", eg=1.0)] = 1.0,
        sigma: Annotated[float, Range(gt=0, what="Muffliato's noise multiplier", eg=1.0)] = 1.0,
    ):
        self.clip, self.sigma = clip, sigma

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        clipped = clip_rows(values, self.clip)
        noise = rng.normal(clipped.shape, generator, values.device, values.dtype)
        return clipped + self.sigma * self.clip * noise

    def mechanism(self) -> Mechanism:
        return Mechanism("values", self.clip, self.sigma)

    def summary(self) -> dict[str, Any]:
        return {"clip": self.clip, "sigma": self.sigma}
