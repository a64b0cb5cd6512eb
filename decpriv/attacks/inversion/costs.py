"""Gradient-matching costs and image priors of the inversion objective.

- ``l2``: squared Euclidean distance ||g - t||^2 (Zhu et al. 2019, DLG, eq. 4).
- ``sim``: one minus cosine similarity, 1 - <g, t> / (||g|| ||t||) (Geiping et al. 2020, eq. 4).
- total variation: mean absolute difference of neighbouring pixels (Geiping et al. 2020, eq. 4, TV(x)).
"""

from collections.abc import Callable

import torch


def l2(g: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((g - target) ** 2).sum()


def sim(g: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # the epsilon keeps the cost differentiable at a zero dummy gradient (zeros initialisation)
    return 1 - (g * target).sum() / (g.norm() * target.norm() + 1e-12)


COSTS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"l2": l2, "sim": sim}


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV of a batch (B, ..., H, W): mean |x[i+1,j] - x[i,j]| + mean |x[i,j+1] - x[i,j]|.

    Inputs with fewer than two spatial axes (feature vectors) have no neighbourhood: their TV is 0.
    """
    if x.dim() < 3:
        return x.new_zeros(())
    dh = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    dw = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    return dh + dw
