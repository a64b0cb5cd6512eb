"""PDMM's local objectives phi_i(w) = f_i(w) + c_i^T w + (rd_i / 2) ||w||^2 for every node at once.

Yu 2023, Eq. 2.6: node i's w-update minimises phi_i, with rd_i = rho d_i and c_i = sum_j B_{i|j} z_{i|j}.
:class:`LocalProblems` gives the solvers of :mod:`decpriv.protocols.local_solve` the values, gradients
and Hessian-vector products of all nodes' phi_i as (n,), (n, p), (n, p) tensors, and can be restricted to
the nodes still iterating, so a node that has converged costs nothing more.

f_i is a sum over the local samples (PDMM's convention). Chains of linear layers and pointwise
activations (softmax, logistic and linear regression, MLPs) get a hand-written batched forward and
backward pass: one bmm per layer for all nodes, where vmap(grad) of a functional call costs ~20x more in
dispatch on small models. Its Hessian-vector product is forward-mode differentiation of that backward
pass (``torch.func.jvp``: Pearlmutter's R-operator, Neural Computation 1994), so no Hessian is ever
formed. Other models go through ``torch.func`` (vmap of grad_and_value, jvp of vmap(grad)).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.func import grad, grad_and_value, jvp, vmap

from decpriv.models.functional import ACTIVATIONS, FunctionalModel, loss_slope


@dataclass(frozen=True)
class Layout:
    """Where an affine chain's layers sit in the flat parameter vector, and its loss."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    chain: tuple  # ((weight name, bias name or None, activation type or None), ...), FunctionalModel.chain
    loss_name: str
    per_sample_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    @classmethod
    def of(cls, model: FunctionalModel) -> "Layout | None":
        if model.chain is None:
            return None
        return cls(
            tuple(model.names),
            tuple(model.shapes),
            tuple(model.chain),
            model.loss_name,
            model.per_sample_loss,
        )

    @property
    def numels(self) -> list[int]:
        return [math.prod(shape) for shape in self.shapes]

    def first_weight(self) -> tuple[int, int, int]:
        """The first weight's offset in the flat parameter vector and its shape (out, in)."""
        at = self.names.index(self.chain[0][0])
        return sum(self.numels[:at]), *self.shapes[at]

    def narrowed(self, inputs: int) -> "Layout":
        """The same chain on inputs of dimension ``inputs`` (its first weight (out, inputs))."""
        first = self.names.index(self.chain[0][0])
        shapes = list(self.shapes)
        shapes[first] = (shapes[first][0], inputs)
        return Layout(self.names, tuple(shapes), self.chain, self.loss_name, self.per_sample_loss)


def reduce_first_layer(layout: Layout, basis: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """(..., p_red): the flat ``vectors`` (..., p) with their first weight (h, d) replaced by W Q (h, r),
    for one basis Q (d, r) or one per row (n, d, r)."""
    begin, h, d = layout.first_weight()
    first = vectors[..., begin : begin + h * d].reshape(*vectors.shape[:-1], h, d) @ basis
    return torch.cat((vectors[..., :begin], first.flatten(-2), vectors[..., begin + h * d :]), -1)


# d sigma'(z) / d a as a function of the activation's output a (sigma' is written in a, ACTIVATIONS)
SLOPE_CHANGE = {nn.ReLU: torch.zeros_like, nn.Sigmoid: lambda a: 1 - 2 * a, nn.Tanh: lambda a: -2 * a}


def _affine(weight: torch.Tensor, bias: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
    # z^T = W h^T: the (n, out, in) weights as the left operand, as FunctionalModel's backward pass does
    z = torch.bmm(weight, h.transpose(1, 2)).transpose(1, 2)
    return z if bias is None else z + bias[:, None, :]


def _outer(dz: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """sum over samples of dz_s h_s^T: (n, k, in); elementwise for one sample (a bmm over an inner
    dimension of one is slower)."""
    return dz.transpose(1, 2) * h if dz.shape[1] == 1 else torch.bmm(dz.transpose(1, 2), h)


def _split(model: Layout, theta: torch.Tensor) -> dict[str, torch.Tensor]:
    n = theta.shape[0]
    parts = theta.split(model.numels, 1)
    return {k: t.reshape(n, *s) for k, t, s in zip(model.names, parts, model.shapes, strict=True)}


def _forward(model: Layout, params: dict, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The chain's outputs (n, b, k) and every layer's input (n, b, in)."""
    h, inputs = x.reshape(*x.shape[:2], -1), []
    for w, bias, act in model.chain:
        inputs.append(h)
        z = _affine(params[w], params[bias] if bias else None, h)
        h = z if act is None else ACTIVATIONS[act][0](z)
    return h, inputs


def chain_value_and_grad(
    model: Layout, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) summed, ``weight``-masked local losses and their (n, p) gradients for an affine chain
    (``model.chain``), every node's batch at once; equal to vmap(grad_and_value(model.loss)) (tested)."""
    n, b = x.shape[:2]
    params = _split(model, theta)
    out, inputs = _forward(model, params, x)
    losses = model.per_sample_loss(out.reshape(n * b, -1), y.reshape(n * b, *y.shape[2:]))
    values = (losses.view(n, b) * weight).sum(1)
    dz = loss_slope(model.loss_name, out, y) * weight[..., None]
    grads = {}
    for layer in range(len(model.chain) - 1, -1, -1):
        w, bias, _ = model.chain[layer]
        grads[w] = _outer(dz, inputs[layer])
        if bias is not None:
            grads[bias] = dz.sum(1)
        if layer:
            act = model.chain[layer - 1][2]
            dz = torch.bmm(dz, params[w])
            dz = dz if act is None else dz * ACTIVATIONS[act][1](inputs[layer])
    return values, torch.cat([grads[k].reshape(n, -1) for k in model.names], 1)


@dataclass(frozen=True, eq=False)
class ChainCurvature:
    """v -> H v for the summed local losses of an affine chain at fixed points, all nodes at once:
    Pearlmutter's R-operator (Neural Computation 1994, Sec. 4), i.e. the forward and backward passes
    differentiated along v, R{z_l} = R{h_(l-1)} W_l^T + h_(l-1) V_l^T + Vb_l forward, then the backward pass
    term by term. The passes at the points themselves are computed once (``at``) and reused by every
    product of a CG solve. Equal to forward-mode AD of the gradient (tested)."""

    layout: Layout
    cache: dict[str, torch.Tensor]  # every tensor with the node axis first, so rows can be dropped
    rd: torch.Tensor

    @classmethod
    def at(cls, layout: Layout, theta, x, y, weight, rd) -> "ChainCurvature":
        params = _split(layout, theta)
        out, inputs = _forward(layout, params, x)
        cache = {**params, "weight": weight[..., None]}
        # the link's output, which the loss's curvature in the outputs is written in (once, not per product)
        if layout.loss_name == "cross_entropy":
            cache["prob"] = torch.softmax(out, -1)
        elif layout.loss_name == "binary_cross_entropy":
            cache["prob"] = torch.sigmoid(out)
        dz = loss_slope(layout.loss_name, out, y) * weight[..., None]
        for layer in range(len(layout.chain) - 1, -1, -1):
            cache[f"input{layer}"], cache[f"dz{layer}"] = inputs[layer], dz
            if layer:
                act = layout.chain[layer - 1][2]
                back = torch.bmm(dz, params[layout.chain[layer][0]])
                cache[f"back{layer}"] = back
                if act is not None:
                    cache[f"slope{layer}"] = ACTIVATIONS[act][1](inputs[layer])
                    cache[f"change{layer}"] = SLOPE_CHANGE[act](inputs[layer])
                    back = back * cache[f"slope{layer}"]
                dz = back
        return cls(layout, cache, rd)

    def restrict(self, rows: torch.Tensor) -> "ChainCurvature":
        return ChainCurvature(self.layout, {k: t[rows] for k, t in self.cache.items()}, self.rd[rows])

    def _output_curvature(self, r: torch.Tensor) -> torch.Tensor:
        """The per-sample loss's Hessian in the outputs times r: diag(p) - p p^T for softmax."""
        if self.layout.loss_name == "cross_entropy":
            prob = self.cache["prob"]
            return prob * r - prob * (prob * r).sum(-1, keepdim=True)
        if self.layout.loss_name == "binary_cross_entropy":
            s = self.cache["prob"]
            return s * (1 - s) * r
        return r

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        layout, cache, n = self.layout, self.cache, len(v)
        along, layers = _split(layout, v), len(layout.chain)
        r_inputs, r = [], None  # R{input of each layer}: none for the data
        for layer, (w, bias, act) in enumerate(layout.chain):
            r_inputs.append(r)
            rz = _affine(along[w], along[bias] if bias else None, cache[f"input{layer}"])
            rz = rz if r is None else rz + _affine(cache[w], None, r)
            r = rz if act is None else cache[f"slope{layer + 1}"] * rz
        rdz = self._output_curvature(r) * cache["weight"]
        grads = {}
        for layer in range(layers - 1, -1, -1):
            w, bias, _ = layout.chain[layer]
            dz = cache[f"dz{layer}"]
            grads[w] = _outer(rdz, cache[f"input{layer}"])
            if r_inputs[layer] is not None:
                grads[w] = grads[w] + _outer(dz, r_inputs[layer])
            if bias is not None:
                grads[bias] = rdz.sum(1)
            if layer:
                r_back = torch.bmm(rdz, cache[w]) + torch.bmm(dz, along[w])
                if layout.chain[layer - 1][2] is None:
                    rdz = r_back
                else:
                    change = cache[f"back{layer}"] * cache[f"change{layer}"] * r_inputs[layer]
                    rdz = r_back * cache[f"slope{layer}"] + change
        return torch.cat([grads[k].reshape(n, -1) for k in layout.names], 1) + self.rd[:, None] * v


@dataclass(frozen=True, eq=False)
class FunctionCurvature:
    """v -> H v for any model: forward-mode derivative (jvp) of vmap(grad) of its loss."""

    model: FunctionalModel
    w: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    rd: torch.Tensor

    def restrict(self, rows: torch.Tensor) -> "FunctionCurvature":
        return replace(
            self, w=self.w[rows], x=self.x[rows], y=self.y[rows], mask=self.mask[rows], rd=self.rd[rows]
        )

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        gradient = vmap(grad(self.model.loss))
        product = jvp(lambda u: gradient(u, self.x, self.y, self.mask), (self.w,), (v,))[1]
        return product + self.rd[:, None] * v


@dataclass(frozen=True, eq=False)
class LocalProblems:
    """phi_i for the nodes of the rows of ``c``: f_i on (x_i, y_i, mask_i) plus the linear and proximal
    terms; by the hand-written passes when ``layout`` is set, by torch.func on ``model`` otherwise."""

    model: FunctionalModel
    layout: Layout | None
    c: torch.Tensor  # (n, p) linear terms
    rd: torch.Tensor  # (n,) proximal weights rho d_i
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor  # (n, b) 1 for a sample, 0 for padding

    def restrict(self, rows: torch.Tensor) -> "LocalProblems":
        """The same problems for the nodes ``rows`` (indices or a mask into this batch) only."""
        return replace(
            self, c=self.c[rows], rd=self.rd[rows], x=self.x[rows], y=self.y[rows], mask=self.mask[rows]
        )

    def value_and_grad(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n,) phi_i(w_i) and (n, p) grad phi_i(w_i)."""
        if self.layout is not None:
            value, gradient = chain_value_and_grad(self.layout, w, self.x, self.y, self.mask)
        else:
            gradient, value = vmap(grad_and_value(self.model.loss))(w, self.x, self.y, self.mask)
        value = value + (self.c * w).sum(1) + 0.5 * self.rd * (w * w).sum(1)
        return value, gradient + self.c + self.rd[:, None] * w

    def curvature(self, w: torch.Tensor) -> ChainCurvature | FunctionCurvature:
        """v -> (n, p) Hessians of phi_i at w_i times v_i, restrictable to fewer nodes like the problems."""
        if self.layout is not None:
            return ChainCurvature.at(self.layout, w, self.x, self.y, self.mask, self.rd)
        return FunctionCurvature(self.model, w, self.x, self.y, self.mask, self.rd)


@dataclass(frozen=True, eq=False)
class InputSpan:
    """The exact reduction of an affine chain's local problems to its inputs' span.

    f_i depends on the first weight W (out, d) only through W x_k for node i's samples x_k, so with Q_i
    (d, r) an orthonormal basis of a space containing them, W = U Q_i^T + W_perp splits phi_i into a part in
    (U, the other layers) and the quadratic c_perp^T W_perp + (rd_i / 2) ||W_perp||^2, minimised at
    W_perp = -c_perp / rd_i in closed form. The rest is the same chain on the r coordinates Q_i^T x_k:
    r = n_i <= d parameters per hidden unit instead of d (E2's MLP at n_i = 1: 1210 instead of 7510), the
    same solution. (The same fact lets the attacker read the span off a leaked difference, docs/pdmm.md.)
    """

    basis: torch.Tensor  # (n, d, r)

    @classmethod
    def of(cls, problems: LocalProblems) -> "InputSpan | None":
        layout, x = problems.layout, problems.x
        d, b = math.prod(x.shape[2:]), x.shape[1]
        if layout is None or b >= d:
            return None
        inputs = (x.reshape(x.shape[0], b, d) * problems.mask[..., None]).transpose(1, 2)
        return cls(torch.linalg.qr(inputs).Q)  # (n, d, b): orthonormal, its span holds every sample

    def reduce(self, problems: LocalProblems, w: torch.Tensor) -> tuple[LocalProblems, torch.Tensor]:
        """The reduced problems and the start w mapped into them."""
        n, b = problems.x.shape[:2]
        coordinates = torch.bmm(problems.x.reshape(n, b, -1), self.basis)  # (n, b, r)
        layout = problems.layout
        reduced = replace(
            problems,
            layout=layout.narrowed(self.basis.shape[2]),
            c=reduce_first_layer(layout, self.basis, problems.c),
            x=coordinates,
        )
        return reduced, reduce_first_layer(layout, self.basis, w)

    def expand(self, problems: LocalProblems, reduced_w: torch.Tensor) -> torch.Tensor:
        """The full solution: W = U Q^T - c_perp / rd."""
        n, (start, out, d) = len(reduced_w), problems.layout.first_weight()
        c_first = problems.c[:, start : start + out * d].reshape(n, out, d)
        c_perp = c_first - c_first @ self.basis @ self.basis.transpose(1, 2)
        stop = start + out * self.basis.shape[2]
        u = reduced_w[:, start:stop].reshape(n, out, -1)
        first = torch.bmm(u, self.basis.transpose(1, 2)) - c_perp / problems.rd[:, None, None]
        return torch.cat([reduced_w[:, :start], first.flatten(1), reduced_w[:, stop:]], 1)
