"""Rates that tables report (accuracies, true/false positive rates): the hits counted as integers, divided
in float64 (docs/simulation.md, "Same numbers on any device").

A float32 mean of booleans is not the same number on every device: its rounding depends on the kernel
(CUDA's mean multiplies the sum by a rounded 1/n), and float32 carries 7 digits; an H100 gave accuracies
1.3e-6 .. 2.7e-5 away from the CPU's. An integer count is exact on any device and in any order, and one
IEEE division of two integers (each exact in float64 below 2^53) is correctly rounded everywhere. A mean of
such rates is taken with :func:`math.fsum`, whose result does not depend on the order of its terms.
"""

import math

import torch


def hit_rate(hits: torch.Tensor, dim: int | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Fraction of true ``hits`` over ``dim`` (all of them when None), among the entries ``mask`` keeps:
    float64, the same bits on any device. A row whose mask keeps nothing is 0/0 = nan."""
    hits = hits.bool()
    if mask is not None:
        hits = hits & mask.bool()
        total = mask.bool().sum(dim) if dim is not None else mask.bool().sum()
    else:
        total = torch.tensor(hits.numel() if dim is None else hits.shape[dim], device=hits.device)
    count = hits.sum(dim) if dim is not None else hits.sum()
    return count.double() / total.double()


def exact_sum(values: torch.Tensor) -> float:
    """The sum of a tensor's entries in float64, correctly rounded whatever their order (a reduction's
    order depends on the device's kernel and, on the CPU, on how many threads split it)."""
    return math.fsum(values.detach().double().flatten().tolist())


def exact_mean(values: torch.Tensor) -> float:
    """The mean of a tensor's entries: :func:`exact_sum` over their number."""
    return exact_sum(values) / values.numel()
