"""The honest diffgrad adversary's joint problem: the victim's anchor and its inputs from several rounds.

Theorem 1.2 of Yu 2023 anchors every honest node's trajectory at the corrupt node's model at t_max; on
the MLP with subspace perturbation PDMM never settles, so that anchor is ~90 off (docs/pdmm.md). What the
messages give exactly, for a victim i, are its relative trajectory u^t = w_i^t - w_i^{t_max} (the sum of
its leaked steps) and its gradient differences D^t (messages form). The unknowns are the anchor a = w_i^{t_max}
and the inputs, tied by

    D^t = G(a + u^t) - G(a + u^{t+2}),   G(w) = sum_k grad l(w; x_k, y_k),   t = 1..K.

Inputs lie in the span read off D's first layer (:func:`decpriv.attacks.inversion.analytic.input_span`), and
f depends on the first weight W only through W Q (Q the span's basis), so everything here lives in the
reduced coordinates of :class:`decpriv.protocols.pdmm_objective.InputSpan`: the anchor has
(h r + the other layers) unknowns, the inputs B x r coordinates. :class:`JointProblem` predicts D from
(a, coordinates); :func:`identifiability` measures, at a given point, how much of the inputs' effect on D an
anchor change cannot mimic; :func:`joint_fit` fits both by L-BFGS from the corrupt node's model.
"""

from dataclasses import dataclass

import torch
from torch.func import jacfwd

from decpriv.protocols.pdmm_objective import Layout, chain_value_and_grad


@dataclass(frozen=True, eq=False)
class JointProblem:
    """One victim in the inputs' span: its relative trajectory, its leaked differences and labels."""

    layout: Layout  # the model on r input coordinates (Layout.narrowed)
    relative: torch.Tensor  # (T, p_red) u^t = w^t - w^{t_max}, t = 1..T
    difference: torch.Tensor  # (K, p_red) D^t, t = 1..K (K <= T - 2)

    def predicted(
        self, anchor: torch.Tensor, coordinates: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        """(K, p_red) G(a + u^t) - G(a + u^{t+2}) for the inputs Q coordinates (B, r) and ``labels``:
        (B,) classes, or (B, C) class probabilities (soft labels)."""
        k, points = len(self.difference), anchor + self.relative[: len(self.difference) + 2]
        b = len(coordinates)
        x = coordinates.expand(len(points), b, -1)
        y = labels.expand(len(points), *labels.shape)
        weight = torch.ones(len(points), b, dtype=points.dtype, device=points.device)
        gradients = chain_value_and_grad(self.layout, points, x, y, weight)[1]
        return gradients[:k] - gradients[2 : k + 2]

    def residual(self, anchor: torch.Tensor, coordinates: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return (self.predicted(anchor, coordinates, labels) - self.difference).flatten()


def identifiability(
    problem: JointProblem, anchor: torch.Tensor, coordinates: torch.Tensor, labels: torch.Tensor
) -> dict[str, float]:
    """How well D pins the inputs down when the anchor is free, at the point (anchor, coordinates).

    With J_a, J_x the Jacobians of the predicted differences in the anchor and in the input coordinates,
    ``free_anchor`` = sigma_min((I - P_a) J_x) / sigma_min(J_x), P_a the projection onto the range of J_a:
    the share of the smallest input perturbation's effect on D that no anchor perturbation can cancel
    (1: the anchor costs nothing; ~0: some input change is locally indistinguishable from an anchor
    change). ``anchor_rank`` is the numerical rank of J_a over its p_red columns (what D says about a)."""
    j_a = jacfwd(problem.residual, argnums=0)(anchor, coordinates, labels)
    j_x = jacfwd(problem.residual, argnums=1)(anchor, coordinates, labels).flatten(1)
    u, s, _ = torch.linalg.svd(j_a, full_matrices=False)
    rank = int((s > 1e-10 * s[0]).sum())
    u = u[:, :rank]
    alone = torch.linalg.svdvals(j_x)
    free = torch.linalg.svdvals(j_x - u @ (u.T @ j_x))
    return {
        "free_anchor": float(free[-1] / alone[-1]),
        "inputs_alone": float(alone[-1] / alone[0]),
        "anchor_rank": rank,
        "anchor_unknowns": j_a.shape[1],
    }


def joint_fit(
    problem: JointProblem,
    anchor: torch.Tensor,
    coordinates: torch.Tensor,
    labels: torch.Tensor,
    iterations: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """L-BFGS (strong Wolfe line search) on ||D(a, x, y) - D||^2 over the anchor and the input coordinates
    together, from (anchor, coordinates); ``labels`` (B,) classes stay fixed, (B, C) probabilities are
    learnt too (as softmax of logits, DLG's soft labels). Returns the three and the final objective."""
    soft = labels.is_floating_point()
    a, x = anchor.clone().requires_grad_(True), coordinates.clone().requires_grad_(True)
    logits = labels.clamp_min(1e-6).log().requires_grad_(True) if soft else None
    optimiser = torch.optim.LBFGS(
        [a, x, logits] if soft else [a, x],
        max_iter=iterations,
        max_eval=2 * iterations,
        history_size=50,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-15,
        tolerance_change=0.0,
    )

    def current() -> torch.Tensor:
        return torch.softmax(logits, -1) if soft else labels

    def closure():
        optimiser.zero_grad()
        loss = problem.residual(a, x, current()).pow(2).sum()
        loss.backward()
        return loss

    optimiser.step(closure)
    with torch.no_grad():
        y = current()
        objective = float(problem.residual(a, x, y).pow(2).sum())
    return a.detach(), x.detach(), y.detach(), objective
