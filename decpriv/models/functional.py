"""A torch module seen as a function of a flat parameter vector, so n nodes train in one vmap call.

Node states live in one (n, p) tensor; :class:`FunctionalModel` maps a row to the module's named
parameters (``torch.func.functional_call``) and provides batched per-node and per-example gradients
(``vmap(grad(...))``), the building blocks of every protocol, defense and attack.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


def _binary_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits.squeeze(-1), y.to(logits.dtype), reduction="none")


def _half_squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * (out.squeeze(-1) - y.to(out.dtype)) ** 2


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": _cross_entropy,
    "binary_cross_entropy": _binary_cross_entropy,
    "half_squared_error": _half_squared_error,
}


class FunctionalModel:
    """``module`` as f(theta, x) with theta a flat vector of its trainable parameters.

    ``reduction`` sets how a node's per-sample losses combine: ``mean`` (SGD convention) or ``sum``
    (Yu 2023's PDMM objective f_i, and DECOR's quadratics); None (a config's null) until :func:`decpriv.experiment.build`
    gives it the protocol's convention (``Protocol.reduction``).
    """

    def __init__(self, module: nn.Module, loss: str, reduction: str | None = "mean"):
        self.module = module
        self.loss_name = loss
        self.per_sample_loss = LOSSES[loss]
        self.reduction = reduction
        named = [(k, v) for k, v in module.named_parameters() if v.requires_grad]
        self.names = [k for k, _ in named]
        self.shapes = [tuple(v.shape) for _, v in named]
        self.numels = [v.numel() for _, v in named]
        self.buffers = dict(module.named_buffers())
        self.p = sum(self.numels)

    def to(self, device: torch.device) -> "FunctionalModel":
        self.module.to(device)
        self.buffers = dict(self.module.named_buffers())
        return self

    def flat(self) -> torch.Tensor:
        """The module's current parameters as one flat vector."""
        return torch.cat([dict(self.module.named_parameters())[k].detach().reshape(-1) for k in self.names])

    def init(self, n: int, seed: int, same: bool = True) -> torch.Tensor:
        """(n, p) initial states: one draw of the module's default init for all nodes, or one per node."""
        rows = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for _ in range(1 if same else n):
                for layer in self.module.modules():
                    if hasattr(layer, "reset_parameters"):
                        layer.reset_parameters()
                rows.append(self.flat())
        theta = torch.stack(rows)
        return theta.expand(n, -1).clone() if same else theta

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(theta, self.numels)
        return {k: t.view(shape) for k, t, shape in zip(self.names, parts, self.shapes, strict=True)}

    def forward(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs for a batch x under one parameter vector."""
        return functional_call(self.module, (self.unflatten(theta), self.buffers), (x,))

    def loss(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Local objective on a (possibly padded) batch; ``weight`` masks padding."""
        per_sample = self.per_sample_loss(self.forward(theta, x), y)
        if weight is None:
            return per_sample.mean() if self.reduction == "mean" else per_sample.sum()
        total = (per_sample * weight).sum()
        return total / weight.sum().clamp_min(1.0) if self.reduction == "mean" else total

    def node_gradients(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(n, p) gradients: node v's local objective at theta[v] on its batch (x[v], y[v])."""
        if weight is None:
            return vmap(grad(self.loss))(theta, x, y)
        return vmap(grad(self.loss))(theta, x, y, weight)

    def example_gradients(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(n, b, p) per-example gradients (DP-SGD): nested vmap over nodes then examples."""

        def one(th, xi, yi):
            return grad(self.loss)(th, xi[None], yi[None])

        return vmap(vmap(one, in_dims=(None, 0, 0)))(theta, x, y)

    def predict(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(n, m) predicted labels of every node's model on a shared batch x."""
        out = vmap(self.forward, in_dims=(0, None))(theta, x)
        if self.loss_name == "binary_cross_entropy":
            return (out.squeeze(-1) > 0).long()
        return out.argmax(-1)

    def losses(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(n, m) per-sample losses of every node's model on a shared batch (membership inference)."""
        out = vmap(self.forward, in_dims=(0, None))(theta, x)
        return vmap(self.per_sample_loss, in_dims=(0, None))(out, y)
