"""The CPU's stand-in for another device's kernels: every sum, mean and contraction taken in reverse order.

A GPU splits a reduction or a matrix product's inner dimension otherwise than the CPU does, so a float64
result differs in its last bits; what a run's tables make of that is the question ``make gpu-check``
answers on a GPU. On the CPU the same question is asked by running a command inside :class:`ReversedOrder`:
``torch.sum``/``mean`` flip the dimensions they reduce, and ``matmul``/``mm``/``bmm``/``@``/``linear``
(and ``addmm``/``baddbmm``) flip their inner dimension, before the operation (the same sum in the other order: no term changes, only
the rounding of the partial sums). It covers the process that enters it (the simulation and the
evaluation), not the sealed attack process.
"""

import torch
from torch.nn import functional
from torch.overrides import TorchFunctionMode

REDUCTIONS = {torch.sum, torch.Tensor.sum, torch.mean, torch.Tensor.mean}
PRODUCTS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm}
PRODUCTS |= {torch.bmm, torch.Tensor.bmm}
# input + a @ b: the product's inner dimension reversed, the addition as it was
ADDED_PRODUCTS = {torch.addmm, torch.Tensor.addmm, torch.Tensor.addmm_, torch.baddbmm, torch.Tensor.baddbmm}
ADDED_PRODUCTS |= {torch.Tensor.baddbmm_}


def _reduced_dims(args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    """The dimensions a sum/mean call reduces; None for all of them."""
    dim = args[1] if len(args) > 1 and not isinstance(args[1], torch.dtype) else kwargs.get("dim")
    if dim is None:
        return None
    return (dim,) if isinstance(dim, int) else tuple(dim)


class ReversedOrder(TorchFunctionMode):
    """Within it, reductions and contractions run their terms in reverse order (module docstring)."""

    def __init__(self):
        super().__init__()
        self.calls = 0  # how many operations it reversed: a test sees that it reached the run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in REDUCTIONS and isinstance(args[0], torch.Tensor) and args[0].ndim:
            dims = _reduced_dims(args, kwargs)
            flipped = args[0].flip(tuple(range(args[0].ndim)) if dims is None else dims)
            args, self.calls = (flipped, *args[1:]), self.calls + 1
        elif func in PRODUCTS and len(args) > 1 and all(isinstance(a, torch.Tensor) for a in args[:2]):
            a, b = args[:2]
            args = (a.flip(-1), b.flip(-2 if b.ndim > 1 else -1), *args[2:])
            self.calls += 1
        elif func in ADDED_PRODUCTS and len(args) > 2:
            a, b = args[1:3]
            args, self.calls = (args[0], a.flip(-1), b.flip(-2), *args[3:]), self.calls + 1
        elif func is functional.linear and len(args) > 1:
            x, weight = args[:2]
            args, self.calls = (x.flip(-1), weight.flip(-1), *args[2:]), self.calls + 1
        return func(*args, **kwargs)
