"""PDMM rounds: the exact local solver, and the stacked (2E, p) edge form vs a node-by-node loop.

1. The exact w-update, ``protocol.solver=newton_cg`` (truncated Newton on Hessian-vector products, in the
   inputs' span) against ``lbfgs`` (the solver before it), on the same sub-problems in the same process:
   each round both solve the round's problems for every node from the same warm start, the run continues
   from L-BFGS's solution; per round the times, the largest residuals and the largest difference between
   the two solutions. Settings: the user's headline (`protocol=pdmm attack=diffgrad`: ring 16, softmax,
   one digit per node) and E2's RGG-100 sigmoid MLP (hidden 100) at n_i = 1, 2, 8.
2. Quadratic f_i (least squares, closed-form local solve) on RGGs with N = 60 and 400, p = 10; both paths
   run the same rounds in float64 and must agree before the timings are printed.
"""

import time

import numpy as np
import torch

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.protocols.pdmm import PDMM

ROUNDS = 30
SOLVER_SETTINGS = {
    "headline: ring 16, softmax, n_i = 1": (["protocol=pdmm", "attack=diffgrad"], 10),
    **{
        f"E2: RGG 100, MLP 100, n_i = {k}": (["experiment=yu_e2_base", f"partition.per_node={k}"], 6)
        for k in (1, 2, 8)
    },
}


def side_by_side(protocol: PDMM, log: list) -> None:
    """Make ``protocol`` solve every round with L-BFGS and with newton_cg, continuing from L-BFGS's."""

    def both(model, w, c, rd, x, y, mask, memory=None):
        protocol.solver = "lbfgs"
        begin = time.perf_counter()
        reference, memory = PDMM.local_solve(protocol, model, w, c, rd, x, y, mask, memory)
        middle = time.perf_counter()
        protocol.solver = "newton_cg"
        new, _ = PDMM.local_solve(protocol, model, w, c, rd, x, y, mask)
        end = time.perf_counter()
        gap = float((new.w - reference.w).abs().max())
        log.append(
            (middle - begin, end - middle, float(reference.residual.max()), float(new.residual.max()), gap)
        )
        return reference, memory

    protocol.local_solve = both


def solvers() -> None:
    for name, (overrides, rounds) in SOLVER_SETTINGS.items():
        cfg, _ = compose_config([*overrides, f"protocol.rounds={rounds}", "protocol.eval_every=1000"])
        setup = experiment.build(cfg)
        log: list = []
        side_by_side(setup.protocol, log)
        experiment.simulate(setup)
        old, new, old_res, new_res, gap = (np.array(column) for column in zip(*log, strict=True))
        print(f"{name} (p = {setup.model.p}, {rounds} rounds): seconds per round, median over rounds")
        print(
            f"  lbfgs {np.median(old):.3f} s | newton_cg {np.median(new):.3f} s | speed-up "
            f"{np.median(old / new):.1f}x (min {np.min(old / new):.1f}x) | max residual {old_res.max():.1e} vs "
            f"{new_res.max():.1e} | max |w_newton - w_lbfgs| per round: median {np.median(gap):.1e}, "
            f"max {gap.max():.1e}"
        )


def loop_rounds(setup, rounds: int, rho: float) -> torch.Tensor:
    net, local = setup.network, setup.local.astype(torch.float64)
    n, p = net.n, setup.model.p
    hoods = [net.neighbours(i).tolist() for i in range(n)]
    z = {(i, j): torch.zeros(p, dtype=torch.float64) for i in range(n) for j in hoods[i]}
    w = torch.zeros(n, p, dtype=torch.float64)
    for _ in range(rounds):
        for i in range(n):
            a = local.x[i][local.mask[i]].reshape(int(local.counts[i]), -1)
            rhs = a.T @ local.y[i][local.mask[i]]
            for j in hoods[i]:
                rhs = rhs - (1.0 if i < j else -1.0) * z[(i, j)]
            w[i] = torch.linalg.solve(a.T @ a + rho * len(hoods[i]) * torch.eye(p, dtype=a.dtype), rhs)
        z = {
            (j, i): z[(i, j)] + 2 * rho * (1.0 if i < j else -1.0) * w[i] for i in range(n) for j in hoods[i]
        }
    return w


def compare(n: int) -> None:
    overrides = [
        "protocol=pdmm",
        "topology=random_geometric",
        f"topology.n={n}",
        f"topology.radius={np.sqrt(np.log(n) / n):.4f}",
        "data=least_squares",
        "partition=contiguous",
        "model=linear_regression",
        f"protocol.rounds={ROUNDS}",
        "protocol.rho=1.0",
        "protocol.z_std=0",  # the loop starts at z = 0: plain PDMM
        "protocol.eval_every=1000",
    ]
    cfg, _ = compose_config(overrides)
    setup = experiment.build(cfg)
    experiment.simulate(setup)  # warm-up: torch.func's first call imports and traces
    begin = time.perf_counter()
    outcome, _ = experiment.simulate(setup)
    vectorised = time.perf_counter() - begin
    begin = time.perf_counter()
    reference = loop_rounds(setup, ROUNDS, 1.0)
    loop = time.perf_counter() - begin
    gap = float((outcome.final - reference).abs().max())
    assert np.isfinite(gap) and gap < 1e-8, gap
    print(f"PDMM, RGG N={n} (E={len(setup.network.edges)}), p={setup.model.p}, {ROUNDS} rounds, float64")
    print(f"  stacked edges (decpriv, incl. evaluation): {vectorised:.3f} s")
    print(f"  node/edge loop:                            {loop:.3f} s   (max |diff| {gap:.1e})")
    print(f"  loop / stacked: {loop / vectorised:.2f}x")


def main() -> None:
    solvers()
    for n in (60, 400):
        compare(n)
