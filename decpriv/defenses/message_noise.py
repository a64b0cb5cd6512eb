"""Gaussian noise on every sent message (Yu 2023, Sec. 6: "DP noise", mentioned as a defense only).

Each message gets fresh N(0, sigma^2 I) noise; on PDMM the receiver accumulates the noisy Delta z, so the
noise stays in z. No privacy accounting is attached (the source gives none).
"""

from typing import Annotated, Any

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense
from decpriv.random import streams as rng


@checked("defense")
class MessageNoise(Defense):
    name = "message_noise"

    def __init__(self, sigma: Annotated[float, Range(gt=0, what="the noise level", eg=0.01)] = 0.01):
        self.sigma = sigma

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        noise = rng.normal(values.shape, generator, values.device, values.dtype)
        return values + self.sigma * noise

    def summary(self) -> dict[str, Any]:
        return {"message_noise_sigma": self.sigma}
