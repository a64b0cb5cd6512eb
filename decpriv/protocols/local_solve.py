"""Globally convergent solvers for n independent local problems at once (PDMM's exact w-update).

PDMM's w-update (Yu 2023, Eq. 2.6) asks every node for argmin_w phi_i(w) with
phi_i(w) = f_i(w) + c_i^T w + (rho d_i / 2) ||w||^2, and Theorem 1 reads the leaked gradient difference
off its optimality condition (Eq. 2.11), so the value the adversary extracts is only as right as the
solve. The solvers here run all nodes in lockstep on stacked (n, p) tensors, stop a node once its
optimality residual ||grad phi_i||_inf is below ``tol`` and return that residual, so the caller can say
whether the solve converged:

- :func:`newton`: Newton's method with an Armijo backtracking line search (Nocedal & Wright 2006,
  Alg. 3.1 with the Newton direction); where a node's Hessian is not positive definite (non-convex f_i)
  it takes the steepest-descent direction instead, so the line search always sees a descent direction.
- :func:`newton_cg`: truncated Newton (Newton-CG, Nocedal & Wright 2006, Alg. 7.1) with the same line
  search, for large p: each Newton direction solves H d = -g by conjugate gradients on Hessian-vector
  products only (:class:`decpriv.protocols.pdmm_objective.LocalProblems`), to the relative accuracy
  min(0.5, sqrt(||g||)) that keeps Newton's superlinear convergence; negative curvature met at the first CG
  step gives steepest descent, later the CG iterate so far (both descent directions). Nodes leave the batch
  as they converge, so a slow node does not make the others pay.
- :func:`lbfgs`: limited-memory BFGS (Nocedal & Wright 2006, Alg. 7.4, two-loop recursion) with the same
  line search; curvature pairs with s^T y <= 0 are skipped, which keeps the inverse-Hessian model
  positive definite on non-convex f_i (MLP, CNN).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from decpriv.protocols.pdmm_objective import ChainCurvature, FunctionCurvature, LocalProblems

    Curvature = ChainCurvature | FunctionCurvature

ValueAndGrad = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (n, p) -> (n,), (n, p)
Hessian = Callable[[torch.Tensor], torch.Tensor]  # (n, p) -> (n, p, p)

ARMIJO = 1e-4
MAX_HALVINGS = 40
FORCING = 0.5


@dataclass(frozen=True)
class Solve:
    """The solution and, per node, its optimality residual ||grad phi_i(w_i)||_inf and iteration count."""

    w: torch.Tensor
    residual: torch.Tensor
    iterations: torch.Tensor


def _line_search(
    objective: ValueAndGrad,
    w: torch.Tensor,
    value: torch.Tensor,
    gradient: torch.Tensor,
    direction: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backtracking from step 1 until every node accepts (halving per node).

    A step is accepted on the Armijo condition or, where the decrease is lost in rounding near the
    optimum, on Hager & Zhang's approximate Wolfe conditions (SIAM J. Optim. 2005, Eq. 4.1): value within
    rounding of the current one and the directional derivative shrunk to [0.9, -0.8] x its start.
    Nodes whose direction is zero (converged) stay where they are. Returns the new w, value, gradient
    and the nodes that found no acceptable step (they stay put too).
    """
    slope = (gradient * direction).sum(1)
    rounding = 1e3 * torch.finfo(value.dtype).eps * (1 + value.abs())
    step = torch.ones_like(value)
    new_w, (new_value, new_gradient) = w, (value, gradient)
    pending = slope < 0
    for _ in range(MAX_HALVINGS):
        trial = w + step[:, None] * direction
        trial_value, trial_gradient = objective(trial)
        trial_slope = (trial_gradient * direction).sum(1)
        armijo = trial_value <= value + ARMIJO * step * slope
        wolfe = (
            (trial_value <= value + rounding) & (0.9 * slope <= trial_slope) & (trial_slope <= -0.8 * slope)
        )
        accept = pending & (armijo | wolfe)
        new_w = torch.where(accept[:, None], trial, new_w)
        new_value = torch.where(accept, trial_value, new_value)
        new_gradient = torch.where(accept[:, None], trial_gradient, new_gradient)
        pending = pending & ~accept
        if not pending.any():
            break
        step = torch.where(pending, step / 2, step)
    return new_w, new_value, new_gradient, pending


def _residual(gradient: torch.Tensor) -> torch.Tensor:
    return gradient.abs().amax(1)


def newton(objective: ValueAndGrad, hessian: Hessian, w: torch.Tensor, tol: float, max_iter: int) -> Solve:
    """Damped Newton on every node until ||grad phi_i||_inf <= tol or ``max_iter`` iterations."""
    value, gradient = objective(w)
    iterations = torch.zeros(w.shape[0], dtype=torch.int64, device=w.device)
    for _ in range(max_iter):
        active = _residual(gradient) > tol
        if not active.any():
            break
        factor, info = torch.linalg.cholesky_ex(hessian(w))
        convex = info == 0
        newton_step = torch.cholesky_solve(-gradient[:, :, None], factor).squeeze(-1)
        direction = torch.where(convex[:, None], newton_step, -gradient)
        direction = torch.where(active[:, None], direction, torch.zeros_like(direction))
        w, value, gradient, _ = _line_search(objective, w, value, gradient, direction)
        iterations += active.long()
    return Solve(w, _residual(gradient), iterations)


def truncated_cg(curvature: "Curvature", gradient: torch.Tensor, max_iter: int) -> torch.Tensor:
    """Per node, an approximate solution d of H d = -g by CG from d = 0 (Nocedal & Wright 2006, Alg. 7.1),
    stopped at ||H d + g|| <= min(FORCING, ||g||) ||g||, at negative curvature, or after ``max_iter``;
    a node that stops leaves the batch (``curvature.restrict``)."""
    norm = gradient.norm(dim=1)
    target = torch.minimum(norm, torch.full_like(norm, FORCING)) * norm
    d = torch.zeros_like(gradient)
    rows = torch.nonzero(norm > 0).squeeze(1)
    r = -gradient[rows]
    p, rr, operator = r, norm[rows] ** 2, curvature.restrict(rows)
    for k in range(max_iter):
        if not len(rows):
            break
        hp = operator(p)
        curvature_along = (p * hp).sum(1)
        negative = curvature_along <= 0
        if k == 0:  # no CG step yet: the steepest descent direction
            d[rows[negative]] = -gradient[rows[negative]]
        alpha = torch.where(negative, 0.0, rr / torch.where(negative, 1.0, curvature_along))
        d.index_add_(0, rows, alpha[:, None] * p)
        r = r - alpha[:, None] * hp
        new_rr = (r * r).sum(1)
        keep = ~negative & (new_rr.sqrt() > target[rows])
        p, rr = r + (new_rr / rr)[:, None] * p, new_rr
        if not keep.all():
            rows, r, p, rr, operator = rows[keep], r[keep], p[keep], rr[keep], operator.restrict(keep)
    return d


def newton_cg(
    problems: "LocalProblems", w: torch.Tensor, tol: float, max_iter: int, cg_max: int = 100
) -> Solve:
    """Truncated Newton on every node until ||grad phi_i||_inf <= tol, no acceptable step, or ``max_iter``
    iterations; a node that stops is dropped from the batch (its rows are no longer evaluated)."""
    n, here, sub = w.shape[0], w, problems
    w = w.clone()
    residual, iterations = w.new_empty(n), torch.zeros(n, dtype=torch.int64, device=w.device)
    rows = torch.arange(n, device=w.device)
    value, gradient = sub.value_and_grad(here)
    stuck = torch.zeros(n, dtype=torch.bool, device=w.device)
    for k in range(max_iter + 1):
        res = _residual(gradient)
        residual[rows], w[rows] = res, here
        going = (res > tol) & ~stuck
        if k == max_iter or not going.any():
            break
        if not going.all():
            rows, here, value, gradient = rows[going], here[going], value[going], gradient[going]
            sub = sub.restrict(going)
        direction = truncated_cg(sub.curvature(here), gradient, cg_max)
        here, value, gradient, stuck = _line_search(sub.value_and_grad, here, value, gradient, direction)
        iterations[rows] += 1
    return Solve(w, residual, iterations)


@dataclass(eq=False)
class Memory:
    """L-BFGS curvature pairs per node, kept across calls: PDMM's local problems change only in their
    linear term c_i from round to round, so last round's pairs still describe the curvature."""

    S: torch.Tensor  # (n, m, p) steps s
    Y: torch.Tensor  # (n, m, p) gradient changes y
    inv_curv: torch.Tensor  # (n, m) 1 / (s^T y); 0 marks an empty or skipped slot
    gamma: torch.Tensor  # (n,) s^T y / y^T y of the newest usable pair: the initial inverse-Hessian scale
    count: int = 0  # pairs written so far (slot = count mod m)

    @classmethod
    def empty(cls, w: torch.Tensor, size: int) -> "Memory":
        n, p = w.shape
        return cls(w.new_zeros(n, size, p), w.new_zeros(n, size, p), w.new_zeros(n, size), w.new_zeros(n))

    def forget(self, nodes: torch.Tensor) -> None:
        self.inv_curv = torch.where(nodes[:, None], torch.zeros_like(self.inv_curv), self.inv_curv)
        self.gamma = torch.where(nodes, torch.zeros_like(self.gamma), self.gamma)

    def direction(self, gradient: torch.Tensor) -> torch.Tensor:
        """-H g by the two-loop recursion (Nocedal & Wright 2006, Alg. 7.4), batched over nodes."""
        size = self.inv_curv.shape[1]
        newest_first = [(self.count - 1 - j) % size for j in range(size)]
        q = gradient.clone()
        coefficient = torch.zeros_like(self.inv_curv)
        for slot in newest_first:
            coefficient[:, slot] = self.inv_curv[:, slot] * (self.S[:, slot] * q).sum(1)
            q = q - coefficient[:, slot, None] * self.Y[:, slot]
        scale = torch.where(self.gamma > 0, self.gamma, 1 / gradient.norm(dim=1).clamp_min(1.0))
        r = scale[:, None] * q
        for slot in reversed(newest_first):
            beta = self.inv_curv[:, slot] * (self.Y[:, slot] * r).sum(1)
            r = r + (coefficient[:, slot] - beta)[:, None] * self.S[:, slot]
        return -r

    def add(self, s: torch.Tensor, y: torch.Tensor, usable: torch.Tensor) -> None:
        """Store the pairs of ``usable`` nodes (s^T y > 0 keeps the model positive definite)."""
        sy = (s * y).sum(1)
        tiny = torch.finfo(s.dtype).tiny
        slot = self.count % self.inv_curv.shape[1]
        self.S[:, slot] = torch.where(usable[:, None], s, self.S[:, slot])
        self.Y[:, slot] = torch.where(usable[:, None], y, self.Y[:, slot])
        self.inv_curv[:, slot] = torch.where(usable, 1 / sy.clamp_min(tiny), 0.0)
        self.gamma = torch.where(usable, sy / (y * y).sum(1).clamp_min(tiny), self.gamma)
        self.count += 1


def lbfgs(
    objective: ValueAndGrad, w: torch.Tensor, tol: float, max_iter: int, memory: Memory | None = None
) -> tuple[Solve, Memory]:
    """L-BFGS on every node until ||grad phi_i||_inf <= tol or ``max_iter`` iterations; returns the
    solve and the curvature memory to warm-start the next, similar problem with."""
    memory = memory if memory is not None else Memory.empty(w, 10)
    value, gradient = objective(w)
    iterations = torch.zeros(w.shape[0], dtype=torch.int64, device=w.device)
    for _ in range(max_iter):
        active = _residual(gradient) > tol
        if not active.any():
            break
        direction = memory.direction(gradient)
        uphill = (direction * gradient).sum(1) >= 0
        direction = torch.where(uphill[:, None], -gradient, direction)
        memory.forget(uphill)
        direction = torch.where(active[:, None], direction, torch.zeros_like(direction))
        new_w, value, new_gradient, stuck = _line_search(objective, w, value, gradient, direction)
        s, y = new_w - w, new_gradient - gradient
        usable = active & ~stuck & ((s * y).sum(1) > 1e-10 * s.norm(dim=1) * y.norm(dim=1))
        memory.forget(stuck)  # a node whose quasi-Newton direction found no step restarts from -g
        memory.add(s, y, usable)
        w, gradient = new_w, new_gradient
        iterations += active.long()
    return Solve(w, _residual(gradient), iterations), memory
