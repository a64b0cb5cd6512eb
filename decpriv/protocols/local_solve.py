"""Globally convergent solvers for n independent local problems at once (PDMM's exact w-update).

PDMM's w-update (Yu 2023, Eq. 2.6) asks every node for argmin_w phi_i(w) with
phi_i(w) = f_i(w) + c_i^T w + (rho d_i / 2) ||w||^2, and Theorem 1 reads the leaked gradient difference
off its optimality condition (Eq. 2.11), so the value the adversary extracts is only as right as the
solve. Both solvers here run all nodes in lockstep on stacked (n, p) tensors, stop a node once its
optimality residual ||grad phi_i||_inf is below ``tol`` and return that residual, so the caller can say
whether the solve converged:

- :func:`newton`: Newton's method with an Armijo backtracking line search (Nocedal & Wright 2006,
  Alg. 3.1 with the Newton direction); where a node's Hessian is not positive definite (non-convex f_i)
  it takes the steepest-descent direction instead, so the line search always sees a descent direction.
- :func:`lbfgs`: limited-memory BFGS (Nocedal & Wright 2006, Alg. 7.4, two-loop recursion) with the same
  line search; curvature pairs with s^T y <= 0 are skipped, which keeps the inverse-Hessian model
  positive definite on non-convex f_i (MLP, CNN).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

ValueAndGrad = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (n, p) -> (n,), (n, p)
Hessian = Callable[[torch.Tensor], torch.Tensor]  # (n, p) -> (n, p, p)

ARMIJO = 1e-4
MAX_HALVINGS = 40


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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backtracking from step 1 until every node accepts (halving per node).

    A step is accepted on the Armijo condition or, where the decrease is lost in rounding near the
    optimum, on Hager & Zhang's approximate Wolfe conditions (SIAM J. Optim. 2005, Eq. 4.1): value within
    rounding of the current one and the directional derivative shrunk to [0.9, -0.8] x its start.
    Nodes whose direction is zero (converged) stay where they are. Returns the new w, value, gradient.
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
    return new_w, new_value, new_gradient


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
        w, value, gradient = _line_search(objective, w, value, gradient, direction)
        iterations += active.long()
    return Solve(w, _residual(gradient), iterations)


def lbfgs(objective: ValueAndGrad, w: torch.Tensor, tol: float, max_iter: int, memory: int = 10) -> Solve:
    """L-BFGS on every node until ||grad phi_i||_inf <= tol or ``max_iter`` iterations."""
    n, p = w.shape
    S = w.new_zeros(n, memory, p)
    Y = w.new_zeros(n, memory, p)
    inv_curv = w.new_zeros(n, memory)  # 1 / (s^T y); 0 marks an empty or skipped slot
    gamma = w.new_zeros(n)  # s^T y / y^T y of the newest usable pair: the initial inverse-Hessian scale
    value, gradient = objective(w)
    iterations = torch.zeros(n, dtype=torch.int64, device=w.device)
    for k in range(max_iter):
        active = _residual(gradient) > tol
        if not active.any():
            break
        q = gradient.clone()
        coefficient = w.new_zeros(n, memory)
        newest_first = [(k - 1 - j) % memory for j in range(memory)]
        for slot in newest_first:
            coefficient[:, slot] = inv_curv[:, slot] * (S[:, slot] * q).sum(1)
            q = q - coefficient[:, slot, None] * Y[:, slot]
        scale = torch.where(gamma > 0, gamma, 1 / gradient.norm(dim=1).clamp_min(1.0))
        r = scale[:, None] * q
        for slot in reversed(newest_first):
            beta = inv_curv[:, slot] * (Y[:, slot] * r).sum(1)
            r = r + (coefficient[:, slot] - beta)[:, None] * S[:, slot]
        direction = -r
        uphill = (direction * gradient).sum(1) >= 0
        direction = torch.where(uphill[:, None], -gradient, direction)
        inv_curv = torch.where(uphill[:, None], torch.zeros_like(inv_curv), inv_curv)
        gamma = torch.where(uphill, torch.zeros_like(gamma), gamma)
        direction = torch.where(active[:, None], direction, torch.zeros_like(direction))
        new_w, value, new_gradient = _line_search(objective, w, value, gradient, direction)
        s, y = new_w - w, new_gradient - gradient
        sy = (s * y).sum(1)
        usable = active & (sy > 1e-10 * s.norm(dim=1) * y.norm(dim=1))
        slot = k % memory
        S[:, slot] = torch.where(usable[:, None], s, S[:, slot])
        Y[:, slot] = torch.where(usable[:, None], y, Y[:, slot])
        inv_curv[:, slot] = torch.where(usable, 1 / sy.clamp_min(torch.finfo(w.dtype).tiny), 0.0)
        gamma = torch.where(usable, sy / (y * y).sum(1).clamp_min(torch.finfo(w.dtype).tiny), gamma)
        w, gradient = new_w, new_gradient
        iterations += active.long()
    return Solve(w, _residual(gradient), iterations)
