"""The gradient-inversion engine: find inputs whose gradient matches a leaked one.

One function, :func:`invert`, covers the reference designs:

- DLG (Zhu et al. 2019, eq. 4): min_{x', y'} ||grad_w l(F(x', w), y') - grad_w||^2 with L-BFGS, soft dummy
  labels optimised jointly (``labels="optimise"``).
- iDLG (Zhao et al. 2020): the same with the label read off the last layer (``labels="infer"``).
- Inverting gradients (Geiping et al. 2020, eq. 4): min_x 1 - cos(grad(x), grad) + alpha TV(x), x in the
  data box, signed Adam with step decay, several restarts keeping the best.
- Differential gradient attack (Yu 2023, sec. 5): the target is a gradient DIFFERENCE
  grad f(w_t) - grad f(w_{t+2}); ``params`` is then (2, p) and the labels are enumerated.

Every (label candidate, restart) pair is an independent problem; they are stacked into one (N, d) tensor
of flat unknowns and optimised together: gradients come from ``vmap(grad_and_value(.))`` over the stack,
and both optimisers keep the problems independent (:mod:`decpriv.attacks.inversion.optimisers`).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from torch.func import grad, grad_and_value, vmap

from decpriv.attacks.inversion.costs import COSTS, total_variation
from decpriv.attacks.inversion.graphs import graphed
from decpriv.attacks.inversion.labels import candidate_labels, infer_labels
from decpriv.attacks.inversion.optimisers import adam, lbfgs
from decpriv.device import attack_device
from decpriv.errors import bad_value
from decpriv.models.functional import FunctionalModel
from decpriv.random import streams as rng
from decpriv.report.progress import updates

COST_NAMES = tuple(COSTS)
OPTIMISERS = ("lbfgs", "adam")
INITS = ("randn", "rand", "zeros")
LABEL_MODES = ("infer", "enumerate", "optimise")

PROGRESS_EVERY = 25  # optimiser steps between two status updates on a terminal


@dataclass(frozen=True)
class InversionConfig:
    """How to invert. ``labels`` applies when no labels are given to :func:`invert`:
    ``infer`` (iDLG / batch counting, single gradients only), ``enumerate`` (every label multiset,
    at most ``max_label_candidates``) or ``optimise`` (DLG's soft labels, learnt jointly)."""

    cost: str = "l2"
    optimiser: str = "lbfgs"
    iterations: int = 100
    lr: float = 1.0
    lr_decay: bool = True
    restarts: int = 1
    graphs: bool = True  # on a GPU, replay the objective as one CUDA graph (graphs.py)
    init: str = "randn"
    tv: float = 0.0
    box: bool = False
    signed: bool = False
    labels: str = "infer"
    max_label_candidates: int = 100
    history: int = 10

    def __post_init__(self) -> None:
        for key, value, allowed in (
            ("cost", self.cost, COST_NAMES),
            ("optimiser", self.optimiser, OPTIMISERS),
            ("init", self.init, INITS),
            ("labels", self.labels, LABEL_MODES),
        ):
            if value not in allowed:
                raise bad_value(f"attack.{key}", value, f"unknown {key}", f"use one of {', '.join(allowed)}")
        for key, value in (("iterations", self.iterations), ("restarts", self.restarts)):
            if value < 1:
                raise bad_value(f"attack.{key}", value, "must be at least 1", "use a positive integer")
        if self.lr <= 0:
            raise bad_value("attack.lr", self.lr, "the step size must be positive", "use e.g. 0.1")
        if self.tv < 0:
            raise bad_value("attack.tv", self.tv, "a prior weight cannot be negative", "use 0 or more")


@dataclass(frozen=True, eq=False)
class Inversion:
    """The best reconstruction over restarts and label candidates.

    x: (B, *input_shape); y: (B,) labels (hard; the argmax of soft labels when optimised);
    objective: its final objective value (cost + TV); history: (T + 1,) best objective over all
    problems at each iteration; objectives: (K, R) final objective of every label candidate and restart;
    candidates: (K, B) the label candidates tried.
    """

    x: torch.Tensor
    y: torch.Tensor
    objective: float
    history: torch.Tensor
    objectives: torch.Tensor
    candidates: torch.Tensor


def _soft_loss(
    model: FunctionalModel, theta: torch.Tensor, x: torch.Tensor, logits: torch.Tensor
) -> torch.Tensor:
    per_sample = -(logits.softmax(-1) * model.forward(theta, x).log_softmax(-1)).sum(-1)
    return per_sample.mean() if model.reduction == "mean" else per_sample.sum()


def dummy_gradient(
    model: FunctionalModel, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(p,) gradient of the model's loss on (x, y) at ``params`` (p,), or the difference
    grad(params[0]) - grad(params[1]) when ``params`` is (2, p). Float ``y`` (B, C) are soft-label logits."""
    loss = (lambda th, xx, yy: _soft_loss(model, th, xx, yy)) if y.is_floating_point() else model.loss
    if params.dim() == 1:
        return grad(loss)(params, x, y)
    return grad(loss)(params[0], x, y) - grad(loss)(params[1], x, y)


@dataclass(frozen=True, eq=False)
class _Problem:
    """The stacked problems of one :func:`invert` call: N = K label candidates x R restarts."""

    candidates: torch.Tensor  # (K, B) label candidates
    labels: torch.Tensor  # (N, B) problem n: candidate n // R, restart n % R
    nx: int  # unknowns per problem for the inputs (B x basis rank, or B x input size)
    soft: bool  # soft labels learnt jointly: B x C more unknowns after the inputs


def _check(model: FunctionalModel, params: torch.Tensor, target: torch.Tensor, batch_size: int) -> None:
    if params.dim() not in (1, 2) or params.shape[-1] != model.p or (params.dim() == 2 and len(params) != 2):
        raise bad_value(
            "params",
            tuple(params.shape),
            f"expected ({model.p},) or (2, {model.p})",
            "pass the model's flat parameters",
        )
    if target.shape != (model.p,):
        raise bad_value(
            "target", tuple(target.shape), f"expected ({model.p},)", "pass the leaked flat gradient"
        )
    if batch_size < 1:
        raise bad_value("batch_size", batch_size, "must be at least 1", "use a positive integer")


def _label_candidates(
    model: FunctionalModel,
    params: torch.Tensor,
    target: torch.Tensor,
    num_classes: int,
    batch_size: int,
    labels: torch.Tensor | None,
    config: InversionConfig,
) -> tuple[torch.Tensor, bool]:
    """(K, B) label candidates and whether soft labels are learnt instead (then one dummy candidate)."""
    device = params.device
    soft = labels is None and config.labels == "optimise"
    if soft and model.loss_name != "cross_entropy":
        raise bad_value(
            "attack.labels",
            "optimise",
            "soft labels need a cross-entropy model",
            "give labels or use enumerate",
        )
    if labels is not None:
        return labels.reshape(1, batch_size).to(device), False
    if config.labels == "infer":
        if params.dim() == 2:
            raise bad_value(
                "attack.labels",
                "infer",
                "labels cannot be read off a gradient difference (Yu 2023, Table 5.1)",
                "use labels=enumerate or optimise",
            )
        return infer_labels(model, target, batch_size).reshape(1, batch_size).to(device), False
    if config.labels == "enumerate":
        return candidate_labels(num_classes, batch_size, config.max_label_candidates).to(device), False
    return torch.zeros(1, batch_size, dtype=torch.long, device=device), soft


def _initial(
    problem: _Problem,
    num_classes: int,
    data_range: tuple[float, float] | None,
    basis: torch.Tensor | None,
    config: InversionConfig,
    generator: torch.Generator,
    like: torch.Tensor,
) -> torch.Tensor:
    """(N, nx [+ B C]) starting points: inputs drawn by ``config.init`` (in the basis' coordinates, the
    draw's projection), then soft-label logits ~ N(0, 1)."""
    n, batch = problem.labels.shape
    width = problem.nx if basis is None else batch * basis.shape[0]

    def normal(columns: int) -> torch.Tensor:
        return rng.normal((n, columns), generator, like.device, like.dtype)

    if config.init == "zeros":
        u = like.new_zeros(n, width)
    elif config.init == "rand":
        low, high = data_range if data_range is not None else (0.0, 1.0)
        base = rng.uniform((n, width), generator, like.device, like.dtype)
        u = low + (high - low) * base
    else:
        u = normal(width)
    if basis is not None:
        u = (u.reshape(n, batch, -1) @ basis).reshape(n, problem.nx)
    return torch.cat([u, normal(batch * num_classes)], 1) if problem.soft else u


def invert(
    model: FunctionalModel,
    params: torch.Tensor,
    target: torch.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    batch_size: int = 1,
    labels: torch.Tensor | None = None,
    data_range: tuple[float, float] | None = None,
    config: InversionConfig = InversionConfig(),
    generator: torch.Generator | None = None,
    basis: torch.Tensor | None = None,
) -> Inversion:
    """Reconstruct a batch of ``batch_size`` inputs whose gradient (or gradient difference) is ``target``.

    model: the public architecture; params: (p,) the point the gradient was taken at, or (2, p) the two
    points of a gradient difference; target: (p,) the leaked vector; labels: (B,) when known, else
    ``config.labels`` decides; data_range: the input box (used by ``init=rand`` and ``box=True``);
    generator: the attack's random stream (initialisation only); basis: (d, r) orthonormal columns
    spanning the inputs when the leak reveals their span (:func:`input_span`): the unknowns are then
    each input's r coordinates, x = basis a (not with ``box``).

    CPU inputs in an attack's process that started the run's GPU (:func:`decpriv.device.attack_device`)
    are inverted there, the result brought back to the CPU: what crosses into that process is on the CPU.
    """
    _check(model, params, target, batch_size)
    device = attack_device()
    if params.device.type == "cpu" and device != "cpu":  # the sealed process started the run's GPU
        moved = [None if t is None else t.to(device) for t in (params, target, labels, basis)]
        found = invert(
            model.on(device), moved[0], moved[1], input_shape, num_classes, batch_size, moved[2],
            data_range, config, generator, moved[3],
        )  # fmt: skip
        return replace(
            found, **{f.name: v.cpu() for f in fields(found) if torch.is_tensor(v := getattr(found, f.name))}
        )
    if config.box and data_range is None:
        raise bad_value("attack.box", True, "the data has no declared value range", "set box=false")
    if config.box and basis is not None:
        raise bad_value("attack.box", True, "a box cannot be kept inside the inputs' span", "set box=false")
    params, target = params.detach(), target.detach().to(params.dtype)
    candidates, soft = _label_candidates(model, params, target, num_classes, batch_size, labels, config)
    per_input = math.prod(input_shape) if basis is None else basis.shape[1]
    problem = _Problem(
        candidates, candidates.repeat_interleave(config.restarts, 0), batch_size * per_input, soft
    )
    if generator is None:  # a fixed stream, so that a call without one still repeats itself
        generator = rng.Seeds(0).torch("attack.inversion")
    u0 = _initial(problem, num_classes, data_range, basis, config, generator, params)
    objective, inputs = _objective(model, params, target, input_shape, num_classes, problem, basis, config)
    project = _projection(problem.nx, data_range, config.box)
    if config.graphs:
        objective = graphed(objective, u0)
    best_u, best_value, trace = _optimise(objective, project(u0), project, config)
    winner = int(best_value.argmin())
    u = best_u[winner]
    y = u[problem.nx :].reshape(batch_size, num_classes).argmax(-1) if soft else problem.labels[winner]
    return Inversion(
        x=inputs(u),
        y=y,
        objective=float(best_value[winner]),
        history=trace.to(torch.float64),
        objectives=best_value.reshape(len(candidates), config.restarts).cpu(),
        candidates=candidates.cpu(),
    )


def _objective(
    model: FunctionalModel,
    params: torch.Tensor,
    target: torch.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    problem: _Problem,
    basis: torch.Tensor | None,
    config: InversionConfig,
) -> tuple[Callable, Callable]:
    """The stacked objective u (N, .) -> (gradient, value) and the map from one problem's u to its inputs."""
    batch, nx, cost = problem.labels.shape[1], problem.nx, COSTS[config.cost]

    def inputs(u: torch.Tensor) -> torch.Tensor:
        x = u[:nx].reshape(batch, -1)
        return (x if basis is None else x @ basis.T).reshape(batch, *input_shape)

    def one(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = inputs(u)
        lab = u[nx:].reshape(batch, num_classes) if problem.soft else y
        return cost(dummy_gradient(model, params, x, lab), target) + config.tv * total_variation(x)

    batched = vmap(grad_and_value(one))

    def objective(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g, v = batched(u, problem.labels)
        return g.detach(), v.detach()

    return objective, inputs


def _projection(nx: int, data_range: tuple[float, float] | None, box: bool) -> Callable:
    """Clamp the inputs (not the soft labels) to the data box after each step, when ``box``."""
    if not box:
        return lambda u: u
    low, high = data_range
    return lambda u: torch.cat([u[:, :nx].clamp(low, high), u[:, nx:]], 1)


def _optimise(
    objective: Callable, u0: torch.Tensor, project: Callable, config: InversionConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the configured optimiser on every problem at once; each problem's best point and value over
    its iterates, and the best value over all problems at each iteration."""
    best_value = torch.full((len(u0),), math.inf, dtype=u0.dtype, device=u0.device)
    best_u = u0.clone()
    trace: list[torch.Tensor] = []  # kept on the device: a float() a step would wait on a GPU every step

    def on_step(u: torch.Tensor, value: torch.Tensor) -> None:
        better = value < best_value
        best_value.copy_(torch.where(better, value, best_value))
        best_u.copy_(torch.where(better[:, None], u, best_u))
        trace.append(best_value.min())
        if len(trace) % PROGRESS_EVERY == 0:  # as breaching prints its loss
            best = float(trace[-1])
            updates.debug("iteration %d of %d, best loss %.4g", len(trace), config.iterations, best)

    if config.optimiser == "adam":
        u = adam(
            objective, u0, config.iterations, config.lr, config.lr_decay, config.signed, project, on_step
        )
        on_step(u, objective(u)[1])
    else:
        lbfgs(objective, u0, config.iterations, config.lr, config.history, project, on_step)
    return best_u, best_value, torch.stack(trace).cpu()
