"""Gaussian-mechanism defenses on the local gradient: LDP and CDP (Allouah et al., ICML 2024, Sec. 5) at
the user or the example level, and DP-SGD (Abadi et al., CCS 2016, Alg. 1), LDP at the example level.

``level`` says what one privacy unit is:

- ``user``: the node's whole batch gradient clipped to C plus N(0, sigma^2 C^2 I), so replacing a node's
  data moves the released gradient by up to 2C (replace-one).
- ``example``: per-example gradients (vmap), each clipped to norm C, summed, N(0, sigma^2 C^2 I) added to
  the sum, divided by the expected batch size b (a public constant: dividing by a Poisson batch's drawn
  size would release it). ``sampler`` says how the protocol draws the batch and so how it is accounted
  (:mod:`decpriv.data.sampling`): ``poisson`` (each example with rate b / m, add/remove adjacency, as
  Opacus) or ``fixed`` (b distinct examples, replace-one adjacency, a replaced example moving the sum by 2C).

- ``ldp``: every message is locally private (noise std sigma C per node).
- ``cdp`` (central baseline): noise sigma C / sqrt(n) per node, and nodes combine by the exact average
  (W = 11^T/n, a trusted aggregator, whatever the topology): the average carries the noise of one LDP node
  divided by n, i.e. CDP on the average (DECOR's CDP baseline).
- ``dpsgd``: ``ldp`` at the example level (its name in the DP-SGD literature).

``sigma`` is the noise multiplier (noise std / C). Set ``epsilon`` instead to have the accountant calibrate
sigma before the run (target (epsilon, accountant.delta) over all local steps; it replaces ``sigma``).
"""

from dataclasses import replace
from typing import Annotated, Any, Literal

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense, Mechanism
from decpriv.errors import bad_value
from decpriv.models.functional import FunctionalModel
from decpriv.random import streams as rng


def clip_rows(g: torch.Tensor, clip: float) -> torch.Tensor:
    """g * min(1, C / ||g||) along the last axis."""
    norms = g.norm(dim=-1, keepdim=True)
    return g * (clip / norms.clamp_min(1e-12)).clamp(max=1.0)


# What the Gaussian defenses' keys accept (decpriv.config.types)
Clip = Annotated[float, Range(gt=0, what="the clipping norm", eg=1.0)]
Target = Annotated[float, Range(gt=0, what="a privacy target", eg=5)] | None


def check_noise(sigma: float | None, epsilon: float | None) -> None:
    """A noise level or a privacy target to calibrate one from: two keys, one of them needed."""
    if sigma is None and epsilon is None:
        raise bad_value(
            "defense.sigma",
            None,
            "no noise level and no privacy target",
            "set defense.sigma (noise multiplier) or defense.epsilon (target, calibrated)",
        )


Level = Literal["user", "example"]
BatchSampler = Literal["poisson", "fixed"]


def example_level_sum(
    model: FunctionalModel,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    weight: torch.Tensor,
    clip: float,
) -> torch.Tensor:
    """(n, p) sums of the per-example gradients of each node's batch, each clipped to ``clip``."""
    per_example = clip_rows(model.example_gradients(theta, x, y), clip)  # (n, b, p)
    return (per_example * weight[..., None]).sum(1)


def batch_sampler(level: str, sampler: str | None) -> str:
    """How the protocol draws batches for a defense at ``level``: the example level's ``sampler``
    (Poisson when unset); the user level's guarantee does not depend on it, so setting one is refused."""
    if level == "user":
        if sampler is not None:
            raise bad_value(
                "defense.sampler",
                sampler,
                "the user level releases the node's whole batch gradient, so its guarantee does not depend "
                "on how the batch is drawn",
                "drop defense.sampler, or set defense.level=example",
            )
        return "fixed"
    return sampler or "poisson"


class PrivacyUnit:
    """What a Gaussian gradient defense protects, ``level`` (user | example), and the batch it divides by.

    At the example level the noisy sum is divided by the expected batch b, set by :meth:`bind` from the
    protocol (every node's expected batch is b: protocols refuse a b above the smallest local set); with
    the full local set the divisor is the node's set size."""

    level: str = "user"
    expected_batch: int | None = None

    def bind(self, setup) -> None:
        self.expected_batch = getattr(setup.protocol, "batch_size", None)

    def unit_gradients(
        self,
        model: FunctionalModel,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        """The clipped release before noise: the node's gradient (user) or its clipped per-example sum."""
        if self.level == "user":
            return clip_rows(model.node_gradients(theta, x, y, weight), self.clip)
        return example_level_sum(model, theta, x, y, weight, self.clip)

    def per_unit(self, noisy: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The noisy release as a mean gradient: the example level's sum divided by the expected batch."""
        if self.level == "user":
            return noisy
        return noisy / (self.expected_batch or weight.sum(1, keepdim=True).clamp_min(1.0))


@checked("defense")
class GaussianDefense(PrivacyUnit, Defense):
    """Clip, then add Gaussian noise of std ``sigma * clip * noise_scale(n)`` to each node's gradient."""

    accountant = "rdp"

    def __init__(
        self,
        clip: Clip = 1.0,
        sigma: Annotated[float, Range(ge=0, what="a noise multiplier", eg=1.0)] | None = 1.0,
        epsilon: Target = None,
        level: Level = "user",
        sampler: BatchSampler | None = None,
    ):
        check_noise(sigma, epsilon)
        self.clip, self.sigma, self.epsilon = clip, sigma, epsilon
        self.level, self.batch_sampler = level, batch_sampler(level, sampler)

    @staticmethod
    def unread(node: Any) -> dict[str, str]:
        """``sigma`` is replaced by the calibrated value while a target ``epsilon`` is set."""
        if node.get("epsilon") is None:
            return {}
        return {
            "sigma": f"while defense.epsilon={node.epsilon} is set: the accountant calibrates sigma to meet it "
            "(defense.epsilon=null runs this sigma)"
        }

    def calibrate(self, sigma: float) -> None:
        """Set the noise multiplier found by the accountant for the target ``epsilon``."""
        self.sigma = float(sigma)

    def noise_std(self, n: int) -> float:
        if self.sigma is None:
            raise RuntimeError(
                f"defense={self.name}: epsilon target not calibrated (no accountant ran check)"
            )
        return self.sigma * self.clip

    def gradients(
        self,
        model: FunctionalModel,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        round_: int,
        generator: torch.Generator,
    ) -> torch.Tensor:
        g = self.unit_gradients(model, theta, x, y, weight)
        noise = rng.normal(g.shape, generator, g.device, g.dtype)
        return self.per_unit(g + self.noise_std(len(g)) * noise, weight)

    def mechanism(self) -> Mechanism:
        return Mechanism(
            "gradients", self.clip, self.sigma, self.level, target=self.epsilon, sampler=self.batch_sampler
        )

    def summary(self) -> dict[str, Any]:
        return {"clip": self.clip, "sigma": self.sigma, "privacy_level": self.level}


class LocalDP(GaussianDefense):
    """Local DP: the clipped gradient (user) or clipped per-example sum (example) plus N(0, sigma^2 C^2 I)."""

    name = "ldp"


class DPSGD(LocalDP):
    """Example-level DP-SGD: per-example clipping, noise on the sum (Abadi et al. 2016, Alg. 1)."""

    name = "dpsgd"

    def __init__(
        self,
        clip: Clip = 1.0,
        sigma: Annotated[float, Range(ge=0, what="a noise multiplier", eg=1.0)] | None = 1.0,
        epsilon: Target = None,
        sampler: BatchSampler = "poisson",
    ):
        super().__init__(clip, sigma, epsilon, "example", sampler)


class CentralDP(GaussianDefense):
    """Central-DP baseline: per-node noise sigma C / sqrt(n), i.e. sigma C / n on the exact average."""

    name = "cdp"
    own_aggregation = True

    def mechanism(self) -> Mechanism:
        return replace(super().mechanism(), central=True)

    def noise_std(self, n: int) -> float:
        return super().noise_std(n) / n**0.5

    def aggregate(self, W: torch.Tensor, messages: torch.Tensor) -> torch.Tensor:
        return messages.mean(0, keepdim=True).expand_as(messages).clone()
