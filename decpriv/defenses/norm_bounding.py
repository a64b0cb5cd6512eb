"""Norm bounding with weak differential privacy, the backdoor defence of Sun, Kairouz, Suresh, McMahan,
"Can You Really Backdoor Federated Learning?" (2019, Sec. 4): the server clips each client's update to norm
at most M, Delta_k <- Delta_k / max(1, ||Delta_k|| / M), averages, and adds Gaussian noise N(0, sigma^2 I)
to the new model ("weak DP": too little noise for a privacy guarantee, enough to blur a backdoor).

In D-SGD each node is the server of its closed neighbourhood, a sender's update being its model minus the
node's own: x_v <- x_v + sum_u W_vu CLIP(x_u - x_v, M) + sigma xi_v (fixed-radius clipped gossip, He et al.
2022, Eq. 3, plus noise); under FedAvg/FedSGD the server clips the chosen updates around the global model.
The noise is drawn from the ``defense.norm_bounding`` stream, the same draws in the attacked run and its
clean baseline. It bounds what a sender moves a node by W_vu M a round, not how many senders may lie, so it
refuses no adversary.
"""

from typing import Annotated

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.defenses import robust_rules as rules
from decpriv.defenses.base import Built
from decpriv.defenses.neighbourhoods import Neighbourhoods
from decpriv.defenses.robust import RobustAggregation
from decpriv.random import streams as rng


@checked("defense")
class NormBounding(RobustAggregation):
    name = "norm_bounding"

    def __init__(
        self,
        bound: Annotated[float, Range(gt=0, what="the update norm bound M", eg=1.0)] = 1.0,
        sigma: Annotated[float, Range(ge=0, what="the weak-DP noise std", eg=0.01)] = 0.01,
    ):
        super().__init__()
        self.bound, self.sigma = bound, sigma
        self._noise: torch.Generator | None = None

    def bind(self, setup: Built) -> None:
        super().bind(setup)
        self._noise = setup.seeds.torch("defense.norm_bounding")

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return sizes - 1  # every sender is bounded, none is voted out

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        bounded = rules.clipped_gossip(x, hood.weight.to(x.dtype), own, self.bound)
        if not self.sigma:
            return bounded
        return bounded + self.sigma * rng.normal(bounded.shape, self._noise, bounded.device, bounded.dtype)

    def summary(self) -> dict[str, float]:
        return {"norm_bound": self.bound, "weak_dp_sigma": self.sigma}
