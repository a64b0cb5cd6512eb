"""Theta-averaged PDMM / ADMM in node form with differential messaging (Yu 2023, Sec. 2.3, Algorithm 2).

For every node i and neighbour j, with B_{i|j} = +I if i < j and -I otherwise:

    w_i^{t+1}   = argmin_w f_i(w) + sum_j z_{i|j}^{t T} B_{i|j} w + (rho d_i / 2) ||w||^2
    z_{j|i}^{t+1} = (1 - theta) z_{j|i}^t + theta (z_{i|j}^t + 2 rho B_{i|j} w_i^{t+1})

theta = 1 is PDMM, theta = 1/2 ADMM. The local problem is solved ``exact`` (damped Newton when
p <= ``newton_max``, otherwise truncated Newton on Hessian-vector products in the span of the node's
inputs, or L-BFGS with ``solver=lbfgs``, all with a line search, until the optimality residual
||grad||_inf is below ``tol``; :mod:`decpriv.protocols.local_solve`), ``inexact`` (k_max warm-started
gradient steps of size alpha, Sec. 3.2) or by the quadratic approximation ``qa``
(w^{t+1} = [mu w^t - grad f_i(w^t) - sum_j B z^t] / (mu + rho d_i)). f_i is a sum over the local samples.
The exact update's largest residual over nodes and rounds goes to summary.csv (``pdmm_max_residual``);
above ``tol`` the run warns, or fails with ``strict``.

Differential messaging with subspace perturbation: z^0 ~ N(0, z_std^2) goes over an encrypted channel
and is never recorded; afterwards node i sends Delta z_{j|i}^{t+1} = z_{j|i}^{t+1} - z_{j|i}^t in the clear
(through ``defense.messages``, so quantisation and noise act on what is sent and received alike).

Edge variables are stacked as a (2E, p) tensor over directed edges (i -> j holds z_{j|i}, sorted by
(sender, receiver)); node sums are ``index_add`` over receivers, so nothing loops over nodes or edges.
"""

import warnings
from dataclasses import replace
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import torch
from torch.func import grad, hessian, vmap

from decpriv.config.types import Range, checked
from decpriv.data.datasets import Dataset
from decpriv.errors import bad_value
from decpriv.graphs.network import Network
from decpriv.metrics.training import Evaluator, summarise
from decpriv.models.functional import FunctionalModel
from decpriv.protocols.base import MAX_COUNT, EvalEvery, Outcome, Precision, Protocol, Simulation, eval_rounds
from decpriv.protocols.local_solve import Memory, Solve, lbfgs, newton, newton_cg
from decpriv.protocols.pdmm_objective import InputSpan, Layout, LocalProblems
from decpriv.random import streams as rng

Rounds = Annotated[int, Range(ge=3, le=MAX_COUNT, what="PDMM's number of rounds")]
Penalty = Annotated[float, Range(gt=0, what="the penalty rho", eg=0.4)]
Tolerance = Annotated[float, Range(gt=0, what="the residual tolerance", eg=1e-8)]
MaxInner = Annotated[int, Range(ge=1, what="the number of inner iterations", eg=500)]
Solver = Literal["newton_cg", "lbfgs"]


class NotConverged(RuntimeError):
    """``protocol.strict=true`` and a local solve ended above ``protocol.tol``."""


def directed_edges(network: Network) -> np.ndarray:
    """(2E, 2) directed edges (sender, receiver) sorted by sender then receiver."""
    e = network.edges
    d = np.vstack([e, e[:, ::-1]])
    return d[np.lexsort((d[:, 1], d[:, 0]))]


def reverse_index(directed: np.ndarray, n: int) -> np.ndarray:
    """Position of (j, i) for every directed edge (i, j)."""
    keys = directed[:, 0] * n + directed[:, 1]
    return np.searchsorted(keys, directed[:, 1] * n + directed[:, 0])


def positions(directed: np.ndarray, senders: np.ndarray, receivers: np.ndarray, n: int) -> np.ndarray:
    """Positions of the given (sender, receiver) pairs in ``directed``."""
    return np.searchsorted(directed[:, 0] * n + directed[:, 1], senders * n + receivers)


def last_change(trajectory: torch.Tensor) -> float:
    """||W^T - W^{T-2}|| / ||W^T|| over all nodes' models: near 0 once PDMM settled. Two rounds apart, so
    the period-2 swing that theta = 1 keeps up on problems it does not converge on shows as well."""
    return float((trajectory[-1] - trajectory[-3]).norm() / trajectory[-1].norm().clamp_min(1e-300))


@checked("protocol")
class PDMM(Protocol):
    name = "pdmm"
    recorder_kind = "edges"
    reduction = "sum"
    public = ("rounds", "rho", "theta", "update", "k_max", "alpha", "mu", "z_std")

    def __init__(
        self,
        rounds: Rounds = 100,
        rho: Penalty = 0.4,
        theta: Annotated[
            float, Range(gt=0, le=1, what="the averaging weight (1: PDMM, 0.5: ADMM)", eg=1)
        ] = 1.0,
        update: Literal["exact", "inexact", "qa"] = "exact",
        k_max: Annotated[int, Range(ge=1, what="the number of inner steps")] = 1,
        alpha: Annotated[float, Range(gt=0, what="the inner step size", eg=0.1)] = 0.1,
        mu: Annotated[float, Range(gt=0, what="the QA curvature", eg=1)] = 1.0,
        z_std: Annotated[float, Range(ge=0, what="a standard deviation", eg=10)] = 0.0,
        tol: Tolerance = 1e-8,
        max_inner: MaxInner = 500,
        newton_max: int = 64,
        solver: Solver = "newton_cg",
        strict: bool = False,
        eval_every: EvalEvery = None,
        dtype: Precision = "float64",
    ):
        self.solver = solver
        self.rounds, self.rho, self.theta, self.update = rounds, rho, theta, update
        self.k_max, self.alpha, self.mu, self.z_std = k_max, alpha, mu, z_std
        self.tol, self.max_inner, self.newton_max, self.strict = tol, max_inner, newton_max, strict
        self.eval_every, self.dtype = eval_every, dtype

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        if model.reduction != "sum":
            raise bad_value(
                "model.reduction",
                model.reduction,
                "PDMM's f_i is a sum over the local samples (Yu 2023, Sec. 2.1)",
                "set model.reduction=sum",
            )
        if self.z_std > 0 and len(network.edges) < network.n:
            warnings.warn(
                f"the graph has E={len(network.edges)} < N={network.n} edges: z has no non-convergent "
                "subspace, so z_std does not hide the gradients",
                stacklevel=2,
            )

    def local_solve(
        self,
        model: FunctionalModel,
        w: torch.Tensor,
        c: torch.Tensor,
        rd: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        memory: Memory | None = None,
    ) -> tuple[Solve, Memory | None]:
        """argmin f_i(w) + c_i^T w + (rd_i / 2)||w||^2 for all nodes, per ``update``, warm-started at w.

        ``exact`` returns the optimality residual ||grad||_inf of every node (and, with ``solver=lbfgs``,
        L-BFGS's curvature ``memory`` for the next round); the inexact updates do not aim at the optimum
        (residual NaN).
        """
        if self.update in ("qa", "inexact"):
            gradient = vmap(grad(model.loss))
            if self.update == "qa":
                w = (self.mu * w - gradient(w, x, y, mask) - c) / (self.mu + rd)[:, None]
            else:
                for _ in range(self.k_max):
                    w = w - self.alpha * (gradient(w, x, y, mask) + c + rd[:, None] * w)
            nan = torch.full((w.shape[0],), float("nan"), dtype=w.dtype, device=w.device)
            steps = torch.full_like(nan, self.k_max if self.update == "inexact" else 1).long()
            return Solve(w, nan, steps), None

        problems = LocalProblems(model, Layout.of(model), c, rd, x, y, mask)
        if w.shape[1] <= self.newton_max:

            def phi(wi, ci, rdi, xi, yi, mi):
                return model.loss(wi, xi, yi, mi) + ci @ wi + 0.5 * rdi * (wi @ wi)

            curvature = vmap(hessian(phi))
            hess = lambda v: curvature(v, c, rd, x, y, mask)  # noqa: E731
            return newton(problems.value_and_grad, hess, w, self.tol, self.max_inner), None
        if self.solver == "lbfgs":  # on torch.func gradients, as before newton_cg: the benchmark's reference
            return lbfgs(replace(problems, layout=None).value_and_grad, w, self.tol, self.max_inner, memory)
        span = InputSpan.of(problems)
        if span is None:
            return newton_cg(problems, w, self.tol, self.max_inner), None
        reduced, start = span.reduce(problems, w)
        inner = newton_cg(reduced, start, self.tol, self.max_inner)
        # the residual reported is the full problem's: polish there (no step where the reduction reached tol)
        full = newton_cg(problems, span.expand(problems, inner.w), self.tol, self.max_inner)
        return replace(full, iterations=inner.iterations + full.iterations), None

    def convergence(self, residuals: torch.Tensor, inner: torch.Tensor) -> dict[str, float]:
        """The exact update's largest optimality residual over nodes and rounds; warn (or fail when
        ``strict``) when it exceeds ``tol``: the leaked differences of Theorem 1 are then off by as much."""
        facts = {"pdmm_inner_iterations": float(inner.mean())}
        if self.update != "exact":
            return facts
        worst = float(residuals.max())
        facts["pdmm_max_residual"] = worst
        if not worst <= self.tol:
            round_ = int(torch.nonzero(~(residuals <= self.tol))[0]) + 1
            message = (
                f"PDMM's exact local solve did not converge: optimality residual {worst:.3g} > "
                f"protocol.tol={self.tol:g} (first at round {round_}, protocol.max_inner={self.max_inner}); "
                "raise protocol.max_inner or protocol.tol, or use protocol.dtype=float64"
            )
            if self.strict:
                raise NotConverged(message)
            warnings.warn(message, stacklevel=2)
        return facts

    def run(self, sim: Simulation) -> Outcome:
        dtype = getattr(torch, self.dtype)
        model, local, net, device = sim.model, sim.local.astype(dtype), sim.network, sim.device
        n = net.n
        directed = directed_edges(net)
        send = torch.as_tensor(directed[:, 0], device=device)
        recv = torch.as_tensor(directed[:, 1], device=device)
        rev = torch.as_tensor(reverse_index(directed, n), device=device)
        b_send = torch.where(send < recv, 1.0, -1.0).to(dtype)[:, None]  # B_{i|j} for edge i -> j
        rd = self.rho * torch.as_tensor(net.degrees, dtype=dtype, device=device)
        observed = torch.as_tensor(
            positions(directed, sim.recorder.senders, sim.recorder.receivers, n), device=device
        )
        w = model.init(n, sim.seeds.seed("init")).to(device, dtype)
        z = self.z_std * rng.normal((len(directed), model.p), sim.seeds.torch("pdmm.z0"), device, dtype)
        noise = sim.seeds.torch("defense.noise")
        x, y, mask = local.x, local.y, local.mask.to(dtype)
        evaluate = Evaluator(model, sim.dataset, local, device)
        evals = eval_rounds(self.rounds, self.eval_every)
        models, rows, residuals, inner = [w.clone()], [], [], []
        memory = None
        for t in sim.progress(self.rounds + 1, self.name):
            if t in evals:
                row = {"round": t, **evaluate(w)}
                if t > 0:
                    row["local_residual"] = float(residuals[-1])
                rows.append(row)
                sim.guard(t, w)
            if t == self.rounds:
                break
            # z_{i|j} sits on edge j -> i, whose receiver is i, and B_{i|j} = -B_{j|i}.
            c = torch.zeros_like(w).index_add_(0, recv, -b_send * z)
            solve, memory = self.local_solve(model, w, c, rd, x, y, mask, memory)
            w = solve.w
            residuals.append(solve.residual.max())
            inner.append(solve.iterations.double().mean())
            target = (1 - self.theta) * z + self.theta * (z[rev] + 2 * self.rho * b_send * w[send])
            delta = sim.defense.messages(target - z, t, noise)
            z = z + delta
            sim.recorder.record(t + 1, 0, delta[observed])
            models.append(w.clone())
        history = pd.DataFrame(rows)
        summary = summarise(history, self.rounds)
        summary.update(z_std=self.z_std, pdmm_theta=self.theta, pdmm_update=self.update)
        summary.update(self.convergence(torch.stack(residuals).cpu(), torch.stack(inner).cpu()))
        trajectory = torch.stack(models).cpu()
        summary["pdmm_last_change"] = last_change(trajectory)
        own = torch.as_tensor(sim.adversary.nodes, dtype=torch.int64, device=trajectory.device)
        return Outcome(
            history,
            w,
            summary,
            truth={"models": trajectory},
            public={"own_models": trajectory[:, own]},
        )
