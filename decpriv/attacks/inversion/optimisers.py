"""Optimisers over a stack of N independent inversion problems u (N, d), without coupling them.

Adam (Kingma & Ba 2015) is coordinate-wise, so one Adam over the stack is exactly N independent runs;
Geiping et al. 2020 (sec. 4) use it with signed gradients and step decay at 3/8, 5/8, 7/8 of the budget.
L-BFGS (Nocedal & Wright 2006, Alg. 7.4 two-loop recursion, Alg. 3.1 backtracking Armijo line search),
used by DLG (Zhu et al. 2019) and Yu 2023's diffgrad, is written here batched: every problem keeps its
own curvature pairs and its own step length, so stacking N problems never mixes their line searches
(torch.optim.LBFGS on the summed objective would).
"""

from collections.abc import Callable

import torch

Objective = Callable[
    [torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]  # u (N, d) -> (grad (N, d), value (N,))
Project = Callable[[torch.Tensor], torch.Tensor]


def adam(
    objective: Objective,
    u: torch.Tensor,
    iterations: int,
    lr: float,
    lr_decay: bool,
    signed: bool,
    project: Project,
    on_step: Callable[[torch.Tensor, torch.Tensor], None],
) -> torch.Tensor:
    u = u.clone().requires_grad_(False)
    opt = torch.optim.Adam([u], lr=lr)
    milestones = [iterations * 3 // 8, iterations * 5 // 8, iterations * 7 // 8] if lr_decay else []
    schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    for _ in range(iterations):
        g, value = objective(u)
        on_step(u, value)
        u.grad = g.sign() if signed else g
        opt.step()
        schedule.step()
        with torch.no_grad():
            u.copy_(project(u))
    return u


def _direction(g: torch.Tensor, s: torch.Tensor, y: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """-H g by the two-loop recursion, batched; ``valid`` (N, m) masks unfilled history slots."""
    sy = (s * y).sum(-1)
    rho = torch.where(valid, 1.0 / sy.where(valid, torch.ones_like(sy)), torch.zeros_like(sy))
    q = g.clone()
    m = s.shape[1]
    alpha = torch.zeros_like(rho)
    for i in reversed(range(m)):  # loop over the m stored pairs (m ~ 10), vectorised over problems
        alpha[:, i] = rho[:, i] * (s[:, i] * q).sum(-1)
        q = q - alpha[:, i, None] * y[:, i]
    # pairs enter at the last slot and shift left, so the newest pair is always slot m - 1
    yy = (y[:, -1] ** 2).sum(-1)
    gamma = torch.where(valid[:, -1], sy[:, -1] / yy.clamp_min(1e-300), torch.ones_like(yy))
    r = gamma[:, None] * q
    for i in range(m):
        beta = rho[:, i] * (y[:, i] * r).sum(-1)
        r = r + s[:, i] * (alpha[:, i] - beta)[:, None]
    return -r


def lbfgs(
    objective: Objective,
    u: torch.Tensor,
    iterations: int,
    lr: float,
    history: int,
    project: Project,
    on_step: Callable[[torch.Tensor, torch.Tensor], None],
    backtracks: int = 12,
    c1: float = 1e-4,
) -> torch.Tensor:
    n, d = u.shape
    s = u.new_zeros(n, history, d)
    y = u.new_zeros(n, history, d)
    valid = torch.zeros(n, history, dtype=torch.bool, device=u.device)
    g, value = objective(u)
    for k in range(iterations):
        on_step(u, value)
        p = _direction(g, s, y, valid)
        slope = (p * g).sum(-1)
        downhill = slope < 0
        # not a descent direction (curvature pairs went stale): restart from steepest descent
        p = torch.where(downhill[:, None], p, -g)
        slope = torch.where(downhill, slope, -(g * g).sum(-1))
        first = lr * torch.clamp(1.0 / g.abs().sum(-1).clamp_min(1e-300), max=1.0) if k == 0 else None
        t = first if first is not None else torch.full((n,), lr, dtype=u.dtype, device=u.device)
        accepted = torch.zeros(n, dtype=torch.bool, device=u.device)
        u_new, g_new, v_new = u.clone(), g.clone(), value.clone()
        for _ in range(backtracks):
            trial = project(u + t[:, None] * p)
            g_try, v_try = objective(trial)
            ok = (v_try <= value + c1 * t * slope) & ~accepted & torch.isfinite(v_try)
            u_new = torch.where(ok[:, None], trial, u_new)
            g_new = torch.where(ok[:, None], g_try, g_new)
            v_new = torch.where(ok, v_try, v_new)
            accepted |= ok
            if bool(accepted.all()):
                break
            t = torch.where(accepted, t, t / 2)
        step, change = u_new - u, g_new - g
        keep = accepted & ((step * change).sum(-1) > 1e-10)
        s = torch.where(keep[:, None, None], torch.cat([s[:, 1:], step[:, None]], 1), s)
        y = torch.where(keep[:, None, None], torch.cat([y[:, 1:], change[:, None]], 1), y)
        valid = torch.where(keep[:, None], torch.cat([valid[:, 1:], keep[:, None]], 1), valid)
        u, g, value = u_new, g_new, v_new
    on_step(u, value)
    return u
