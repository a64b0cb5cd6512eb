"""DP-SGD audited with a gradient canary (Nasr et al., IEEE S&P 2021, Sec. 4: the adversary inserts an
example whose clipped gradient it chooses; Nasr et al., USENIX Security 2023: white-box, every update seen).

The neighbouring datasets differ by one canary example of the audited node (add/remove, the accountant's
adjacency) whose clipped gradient is C along one coordinate, every other example's gradient being zero (the
worst case for the noisy sum). Each step includes the canary with probability q (the accountant's Poisson
sampling; decpriv's sampler draws fixed-size batches, the usual stand-in), and the defense's own
``gradients`` adds its noise to the clipped per-example sum. Each coordinate is one trial. The test is the
likelihood ratio of the whole run: per step z = sum / (sigma C) is N(0, 1) without the canary and the
mixture (1 - q) N(0, 1) + q N(1/sigma, 1) with it, so LLR = sum_t log(1 - q + q exp(z_t / sigma - 1 / (2
sigma^2))).
"""

import math

import numpy as np
import torch

from decpriv.defenses.base import Defense
from decpriv.rng import Seeds


class CanaryExamples:
    """A model whose per-example gradients are given: (1, b, D, 1), the canary in slot 0."""

    def __init__(self, gradients: torch.Tensor):
        self.gradients = gradients

    def example_gradients(self, theta, x, y) -> torch.Tensor:
        return self.gradients


class SubsampledTrials:
    """``steps`` DP-SGD updates of one node with sampling rate ``rate`` and batches of ``batch`` examples."""

    def __init__(self, defense: Defense, steps: int, rate: float, batch: int):
        self.defense, self.steps, self.rate, self.batch = defense, steps, rate, batch

    def statistics(self, present: torch.Tensor, seeds: Seeds) -> torch.Tensor:
        """(D,) log-likelihood ratio of every trial; ``present`` (D,) bool marks the trials with the canary."""
        clip, sigma = self.defense.clip, self.defense.sigma
        noise, sampler = seeds.torch("defense.noise"), seeds.torch("audit.sampling")
        weight = torch.ones(1, self.batch, 1, dtype=torch.float64)
        llr = torch.zeros(len(present), dtype=torch.float64)
        log_keep, log_rate = math.log1p(-self.rate) if self.rate < 1 else -math.inf, math.log(self.rate)
        for t in range(self.steps):
            included = present & (
                torch.rand(len(present), generator=sampler, dtype=torch.float64) < self.rate
            )
            examples = torch.zeros(1, self.batch, len(present), 1, dtype=torch.float64)
            examples[0, 0, :, 0] = clip * included
            update = self.defense.gradients(CanaryExamples(examples), None, None, None, weight, t, noise)
            z = update[0, :, 0] * self.batch / (sigma * clip)  # the noisy sum over sigma C
            llr += torch.logaddexp(torch.tensor(log_keep), log_rate + z / sigma - 0.5 / sigma**2)
        return llr


def canary_draw(trials: SubsampledTrials, seeds):
    """``draw(name, size)`` of :func:`heldout_counts`: balanced canary presence, the run's statistics."""

    def draw(name: str, size: int):
        rng = seeds.numpy(f"attack.audit.signs.{name}")
        signs = torch.from_numpy(rng.permutation(np.repeat([-1.0, 1.0], size // 2)))
        t = trials.statistics(signs > 0, Seeds(seeds.seed(f"attack.audit.noise.{name}")))
        return t[None], signs[None]

    return draw
