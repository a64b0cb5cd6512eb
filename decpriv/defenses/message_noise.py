"""Gaussian noise on every sent message (Yu 2023, Sec. 6: "DP noise", mentioned as a defense only).

Each message gets fresh N(0, sigma^2 I) noise; on PDMM the receiver accumulates the noisy Delta z, so the
noise stays in z. No privacy accounting is attached (the source gives none).
"""

from typing import Any

import torch

from decpriv.defenses.base import Defense
from decpriv.errors import bad


class MessageNoise(Defense):
    name = "message_noise"

    def __init__(self, sigma: float = 0.01):
        if sigma <= 0:
            raise bad(
                "defense.sigma", sigma, "the noise level must be positive", "use e.g. defense.sigma=0.01"
            )
        self.sigma = sigma

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn(values.shape, generator=generator, device=values.device, dtype=values.dtype)
        return values + self.sigma * noise

    def summary(self) -> dict[str, Any]:
        return {"message_noise_sigma": self.sigma}
