"""How a data-poisoning attacker changes its own training batches.

- label flipping (Tolpegin et al., ESORICS 2020; ByzFL's LabelFlipping): a ``fraction`` of the labels y
  become C - 1 - y;
- backdoor (Gu, Dolan-Gavitt, Garg, BadNets, 2017, Sec. 3): a ``fraction`` of the images get a trigger,
  a ``patch`` x ``patch`` square at the bottom-right corner set to the data's maximum, and the
  ``target`` label; a model that learnt it sends triggered inputs to ``target`` and others where they
  belong.
"""

from dataclasses import dataclass

import torch

from decpriv.random import streams as rng


def chosen(y: torch.Tensor, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """A mask of the samples poisoned: each with probability ``fraction`` (all at 1)."""
    if fraction >= 1:
        return torch.ones(y.shape, dtype=torch.bool)
    return rng.uniform(y.shape, generator) < fraction


@dataclass(frozen=True)
class LabelFlip:
    num_classes: int
    fraction: float

    def __call__(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator):
        flip = chosen(y, self.fraction, generator)
        return x, torch.where(flip, self.num_classes - 1 - y, y)


@dataclass(frozen=True)
class Trigger:
    """The backdoor's patch on (..., C, H, W) images and its target label."""

    patch: int
    value: float
    target: int

    def stamp(self, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[..., -self.patch :, -self.patch :] = self.value
        return out


@dataclass(frozen=True)
class Backdoor:
    trigger: Trigger
    fraction: float

    def __call__(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator):
        poisoned = chosen(y, self.fraction, generator)
        stamped = self.trigger.stamp(x)
        shape = poisoned.shape + (1,) * (x.dim() - poisoned.dim())
        x = torch.where(poisoned.reshape(shape), stamped, x)
        return x, torch.where(poisoned, torch.full_like(y, self.trigger.target), y)
