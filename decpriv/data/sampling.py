"""How a protocol draws each local step's minibatch, and the adjacency a privacy accountant must then use.

A DP-SGD guarantee holds for the sampler it assumes (Chua et al., "How private are DP-SGD implementations?",
ICML 2024): Poisson sampling is accounted under add/remove adjacency, a fixed-size batch drawn without
replacement under replace-one adjacency, where a replaced example moves the clipped sum by 2C (Wang, Balle,
Kasiviswanathan, AISTATS 2019). Protocols draw through :meth:`Sampler.draw`; accountants read ``name`` and
``adjacency``; the audit replays the same ``draw``.
"""

from dataclasses import dataclass

import torch

from decpriv.data.partition import LocalData


@dataclass(frozen=True)
class Sampler:
    """``poisson``, ``fixed`` (without replacement) or, with no batch size, ``full`` (the whole local set)."""

    name: str

    @property
    def adjacency(self) -> str:
        return "add_remove" if self.name == "poisson" else "replace_one"

    @property
    def accounted_as(self) -> str:
        """The sampled-Gaussian analysis of :mod:`decpriv.privacy.sampled_gaussian` that covers it."""
        return {"poisson": "poisson", "fixed": "without_replacement", "full": "gaussian"}[self.name]

    def rates(self, local: LocalData, size: int | None) -> torch.Tensor:
        """Each node's inclusion probability of a given sample, b / m_v (1 for the full batch)."""
        if size is None:
            return torch.ones(local.n, dtype=torch.float64, device=local.counts.device)
        return (size / local.counts.to(torch.float64)).clamp(max=1.0)

    def draw(self, local: LocalData, size: int | None, generator: torch.Generator):
        """(x, y, weight) of one step's batch for every node (weight 0 on padding)."""
        if self.name == "poisson":
            return local.poisson_batch(self.rates(local, size).to(local.x.device), generator)
        return local.batch(size, generator)  # fixed, or the whole set when size is None


def sampler_of(name: str, size: int | None) -> Sampler:
    return Sampler("full" if size is None else name)
