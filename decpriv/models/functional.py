"""A torch module seen as a function of a flat parameter vector, so n nodes train in one vmap call.

Node states live in one (n, p) tensor; :class:`FunctionalModel` maps a row to the module's named
parameters (``torch.func.functional_call``) and provides batched per-node and per-example gradients
(``vmap(grad(...))``), the building blocks of every protocol, defense and attack.

Chains of linear layers and pointwise activations (softmax and logistic regression, linear regression,
MLPs) also have a hand-written batched backward pass (:meth:`FunctionalModel.node_gradients` with
``out``): it writes every node's gradient straight into a caller-owned (n, p) buffer. vmap(grad) builds
each layer's gradient in its own fresh tensor and concatenates them into a new (n, p) one, which for
many nodes costs more than the arithmetic (a batched outer product through bmm with an inner dimension of
one, the concatenation, the first-touch page faults of every fresh buffer).
"""

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from decpriv.errors import bad_value


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """F.cross_entropy's numbers, bit for bit (its log-softmax, then the label's entry); under vmap it
    needs no decomposition of nll_loss, whose check imports sympy (0.4-1.2 s of every command)."""
    log_p = torch.log_softmax(logits, -1)
    if y.is_floating_point():  # class probabilities (an attacker's soft labels)
        return -(log_p * y).sum(-1)
    return -log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def _binary_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits.squeeze(-1), y.to(logits.dtype), reduction="none")


def _half_squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * (out.squeeze(-1) - y.to(out.dtype)) ** 2


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": _cross_entropy,
    "binary_cross_entropy": _binary_cross_entropy,
    "half_squared_error": _half_squared_error,
}


def loss_slope(loss: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d per-sample loss / d output, for outputs (n, b, k): softmax minus one-hot, sigmoid minus label, residual.

    Cross-entropy's y may also be (n, b, k) class probabilities (an attacker's soft labels)."""
    if loss == "cross_entropy" and y.shape == out.shape:
        return torch.softmax(out, -1) - y
    if loss == "cross_entropy":
        # out of place: softmax's backward needs its output (PDMM's joint anchor fit differentiates this)
        slope = torch.softmax(out, -1)
        return slope.scatter_add(-1, y.unsqueeze(-1), torch.full_like(slope[..., :1], -1.0))
    if loss == "binary_cross_entropy":
        return torch.sigmoid(out) - y.to(out.dtype).unsqueeze(-1)
    return out - y.to(out.dtype).unsqueeze(-1)


# activation, and its derivative written with the activation's output a
ACTIVATIONS: dict[type, tuple[Callable, Callable]] = {
    nn.ReLU: (torch.relu, lambda a: (a > 0).to(a.dtype)),
    nn.Sigmoid: (torch.sigmoid, lambda a: a * (1 - a)),
    nn.Tanh: (torch.tanh, lambda a: 1 - a * a),
}


def affine_chain(module: nn.Module, trainable: list[str]) -> list[tuple[str, str | None, type | None]] | None:
    """[(weight name, bias name or None, activation type or None)] when ``module`` is Sequential(Flatten?,
    Linear, activation, ..., Linear) with every parameter trainable; None for any other architecture."""
    if not isinstance(module, nn.Sequential):
        return None
    layers = list(module.named_children())
    if layers and type(layers[0][1]) is nn.Flatten:
        flatten = layers.pop(0)[1]
        if (flatten.start_dim, flatten.end_dim) != (1, -1):
            return None
    chain: list[tuple[str, str | None, type | None]] = []
    for name, layer in layers:
        if type(layer) is nn.Linear:
            chain.append((f"{name}.weight", None if layer.bias is None else f"{name}.bias", None))
        elif type(layer) in ACTIVATIONS and chain and chain[-1][2] is None:
            chain[-1] = (*chain[-1][:2], type(layer))
        else:
            return None
    if not chain or chain[-1][2] is not None:
        return None
    named = {w for w, _, _ in chain} | {b for _, b, _ in chain if b}
    return chain if named == set(trainable) else None


class FunctionalModel:
    """``module`` as f(theta, x) with theta a flat vector of its trainable parameters.

    ``reduction`` sets how a node's per-sample losses combine: ``mean`` (SGD convention) or ``sum``
    (Yu 2023's PDMM objective f_i, and DECOR's quadratics); None (a config's null) until :func:`decpriv.experiment.build`
    gives it the protocol's convention (``Protocol.reduction``).

    ``init_value`` None keeps the module's own random initialisation; a number starts every parameter of
    every node there (the least squares of Allouah et al., ICML 2024, Sec. 6.1, start at x^0 = 1 in the
    authors' code, elfirdoussilab1/DECOR).
    """

    def __init__(
        self, module: nn.Module, loss: str, reduction: str | None = "mean", init_value: float | None = None
    ):
        if init_value is not None and (
            isinstance(init_value, bool)
            or not isinstance(init_value, int | float)
            or not math.isfinite(init_value)
        ):
            raise bad_value(
                "model.init_value",
                init_value,
                "the initial parameter value must be a finite number",
                "use e.g. model.init_value=1.0, or null for the module's random initialisation",
            )
        self.module = module
        self.init_value = init_value
        self.loss_name = loss
        self.per_sample_loss = LOSSES[loss]
        self.reduction = reduction
        named = [(k, v) for k, v in module.named_parameters() if v.requires_grad]
        self.names = [k for k, _ in named]
        self.shapes = [tuple(v.shape) for _, v in named]
        self.numels = [v.numel() for _, v in named]
        self.buffers = dict(module.named_buffers())
        self.p = sum(self.numels)
        self.chain = affine_chain(module, self.names)

    def on(self, device: torch.device | str) -> "FunctionalModel":
        """This model computing on ``device``: a copy whose buffers live there. The module itself stays on
        the CPU, where :meth:`init` draws, so one seed gives one model whatever the device."""
        moved = copy.copy(self)
        moved.buffers = {k: v.to(device) for k, v in self.buffers.items()}
        return moved

    def flat(self) -> torch.Tensor:
        """The module's current parameters as one flat vector."""
        return torch.cat([dict(self.module.named_parameters())[k].detach().reshape(-1) for k in self.names])

    def init(self, n: int, seed: int, same: bool = True) -> torch.Tensor:
        """(n, p) initial states: one draw of the module's default init for all nodes, or one per node;
        every entry ``init_value`` when it is set."""
        if self.init_value is not None:
            return torch.full((n, self.p), float(self.init_value), dtype=self.flat().dtype, device="cpu")
        rows = []
        with torch.random.fork_rng(devices=[]):
            # reset_parameters draws from the global CPU generator; seeding only that one keeps CUDA's alone
            torch.random.default_generator.manual_seed(seed)
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
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(n, p) gradients: node v's local objective at theta[v] on its batch (x[v], y[v]).

        With ``out`` (an (n, p) tensor, not aliasing theta) the gradients are written into it and it is
        returned: by the hand-written backward pass for affine chains outside autograd, by vmap(grad) and a
        copy otherwise. The backward pass is not differentiable, so it is only taken when asked for."""
        if out is not None and self.chain is not None and not torch.is_grad_enabled():
            return self._chain_gradients(theta, x, y, weight, out)
        if weight is None:
            g = vmap(grad(self.loss))(theta, x, y)
        else:
            g = vmap(grad(self.loss))(theta, x, y, weight)
        return g if out is None else out.copy_(g)

    def sgd_step_(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, lr: float
    ) -> bool:
        """theta <- theta - lr * node_gradients(theta, x, y, weight) in place, layer by layer, without an
        (n, p) gradient (the backward pass subtracts each layer's gradient as it forms): True when done,
        False (theta untouched) for models outside the affine chains or under autograd."""
        if self.chain is None or torch.is_grad_enabled():
            return False
        self._chain_gradients(theta, x, y, weight, None, lr)
        return True

    def _split(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of an (n, p) tensor as each parameter with a leading node axis."""
        parts = torch.split(theta, self.numels, dim=1)
        n = theta.shape[0]
        return {k: t.view(n, *shape) for k, t, shape in zip(self.names, parts, self.shapes, strict=True)}

    def _chain_gradients(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor | None,
        out: torch.Tensor | None,
        lr: float | None = None,
    ) -> torch.Tensor:
        """Backpropagation through the affine chain, all nodes at once, each layer's gradient written into
        its slice of ``out``, or (``lr``) subtracted from theta in place once the layer below no longer
        needs its weights; equal to vmap(grad(loss)) (tested)."""
        n, b = x.shape[:2]
        params = self._split(theta)
        grads = None if out is None else self._split(out)
        h = x.reshape(n, b, -1)
        inputs = []
        for w, bias, act in self.chain:
            # z^T = W h^T: the weights, strided by p between nodes, as the left operand (h W^T copies them
            # into a contiguous batch first)
            W, ht = params[w], h.transpose(1, 2)
            z = (
                torch.bmm(W, ht) if bias is None else torch.baddbmm(params[bias].unsqueeze(2), W, ht)
            ).transpose(1, 2)
            inputs.append(h)
            h = z if act is None else ACTIVATIONS[act][0](z)
        # each sample's share of the node objective: 1/b (mean), w_s / max(sum w, 1) (masked mean), w_s, 1
        dz = loss_slope(self.loss_name, h, y)
        if weight is not None:
            share = weight.to(h.dtype)
            if self.reduction == "mean":
                share = share / share.sum(1, keepdim=True).clamp_min(1.0)
            dz = dz * share.unsqueeze(-1)
        elif self.reduction == "mean":
            dz = dz * (1.0 / b)
        for layer in range(len(self.chain) - 1, -1, -1):
            w, bias, _ = self.chain[layer]
            below = None
            if layer:
                act = self.chain[layer - 1][2]
                below = torch.bmm(dz, params[w])
                if act is not None:
                    below = below * ACTIVATIONS[act][1](inputs[layer])  # layer - 1's activated output
            # b = 1: an outer product, elementwise (a bmm with an inner dimension of one is slower)
            if grads is not None and b == 1:
                torch.mul(dz.transpose(1, 2), inputs[layer], out=grads[w])
            elif grads is not None:
                grads[w].copy_(torch.bmm(dz.transpose(1, 2), inputs[layer]))
            elif b == 1:
                params[w].addcmul_(dz.transpose(1, 2), inputs[layer], value=-lr)
            else:  # not baddbmm_: on a strided view it falls back to one addmm_ per node
                params[w].add_(torch.bmm(dz.transpose(1, 2), inputs[layer]), alpha=-lr)
            if bias is not None and grads is not None:
                torch.sum(dz, 1, out=grads[bias])
            elif bias is not None:
                params[bias].add_(dz.sum(1), alpha=-lr)
            dz = below
        return theta if out is None else out

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
