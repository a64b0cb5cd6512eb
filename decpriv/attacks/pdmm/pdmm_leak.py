"""``pdmm_leak``: the leaked trajectories and gradient differences of Theorem 1 (Yu 2023), scored per
node and round against the true ones; one row per early-stopping point t_max."""

from functools import partial

import numpy as np
import pandas as pd
import torch
from torch.func import grad, vmap

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.pdmm.leak import (
    Assumed,
    Leak,
    check_assumptions,
    check_pdmm,
    check_theorem_form,
    extract,
)
from decpriv.attacks.targets import TargetRefused, fixed_targets
from decpriv.errors import bad_value
from decpriv.report.findings import Findings, keyed
from decpriv.report.headline import Headline
from decpriv.report.plots import metric_plot
from decpriv.seal.truth import Truth


def true_gradients(view: View, truth: Truth, points: torch.Tensor) -> torch.Tensor:
    """(K, n, p) grad f_i at points[k, i] on node i's private set (scoring only)."""
    local = truth.local.astype(torch.float64)
    per_node = vmap(grad(view.model.loss))
    over_rounds = vmap(per_node, in_dims=(0, None, None, None))
    return over_rounds(points, local.x, local.y, local.mask.to(torch.float64))


def relative(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-300)


class PDMMLeak(Attack):
    name = "pdmm_leak"
    headline = (
        Headline("leak_difference_error_median", 1.0, "lower", "guessing zero"),
        Headline("leak_plain_gradient_error_median", 1.0, "lower", "guessing zero"),
    )

    def __init__(
        self,
        t_max: list[int] | None = None,
        form: str = "messages",
        update: str | None = None,
        rho: float | None = None,
        theta: float | None = None,
        alpha: float | None = None,
        mu: float | None = None,
    ):
        check_assumptions(update, form, theta, "attack")
        if t_max is not None and (not t_max or min(t_max) < 4):
            raise bad_value(
                "attack.t_max", t_max, "each stopping point needs at least 4 rounds", "use e.g. [10, 50]"
            )
        self.t_max, self.form, self.update = t_max, form, update
        self.rho, self.theta, self.alpha, self.mu = rho, theta, alpha, mu

    def prepare(self, context: AttackContext) -> None:
        check_pdmm(context, self.name)
        check_theorem_form(
            self.form, self.theta if self.theta is not None else context.protocol.theta, "attack"
        )
        if self.t_max is not None and max(self.t_max) > context.protocol.rounds:
            raise bad_value(
                "attack.t_max",
                self.t_max,
                f"the run has {context.protocol.rounds} rounds",
                "stop at most at protocol.rounds",
            )

    def stops(self, view: View) -> list[int]:
        return sorted(set(self.t_max)) if self.t_max else [len(view.transcript.times)]

    def run(self, view: View) -> dict[int, Leak]:
        a = Assumed.resolve(view.hyper, self.rho, self.theta, self.update, self.alpha, self.mu)
        return {
            t: extract(view, t, a.rho, a.theta, a.update, self.form, a.alpha, a.mu) for t in self.stops(view)
        }

    def fixed(self, findings: dict[int, Leak], view: View, p: int) -> dict[int, Leak]:
        """The finding on the stopping points the config fixes (``attack.t_max``, or the run's length),
        each covering rounds 1..t_max - 2 of every node, in order: a stop outside is refused, as is a leak
        over other rounds or nodes; an omitted stop is scored as guessing zero (relative error 1)."""
        n, stops = view.network.n, self.stops(view)
        whose = "attack.t_max's stopping points"
        order = torch.arange(len(findings), dtype=torch.float64)[:, None]
        named = pd.DataFrame({"t_max": [int(t) for t in findings]})
        table, slot = fixed_targets(self.name, named, order, pd.DataFrame({"t_max": stops}), whose)
        given, leaks = (
            dict(zip(table.t_max.tolist(), slot[:, 0].tolist(), strict=True)),
            list(findings.values()),
        )
        fixed = {}
        for t in stops:  # the config's order: the last stop is the headline's
            rounds, k = np.arange(1, t - 1), given[t]
            if np.isnan(k):
                zeros = partial(torch.zeros, dtype=torch.float64)
                K = len(rounds)
                fixed[t] = Leak(np.arange(n), rounds, zeros(t - 1, n, p), zeros(t, n, p), zeros(K, n, p),
                                zeros(K, n, p), zeros(K, n, p), zeros(t, n, p), zeros(t, n, p))  # fmt: skip
                continue
            leak = leaks[int(k)]
            shapes = (leak.difference.shape, leak.start.shape, leak.plain_gradient.shape)
            if not (
                np.array_equal(leak.nodes, np.arange(n))
                and np.array_equal(leak.rounds, rounds)
                and shapes == ((len(rounds), n, p), (len(rounds), n, p), (t, n, p))
            ):
                raise TargetRefused(
                    f"attack={self.name}: its finding for t_max={t} does not cover rounds 1..{t - 2} of "
                    f"every node 0..{n - 1} (fixed outside the attack); a finding cannot choose what it is scored on"
                )
            fixed[t] = leak
        return fixed

    def evaluate(self, findings: dict[int, Leak], truth: Truth, view: View) -> Findings:
        models = truth.extras["models"].to(torch.float64)
        findings = self.fixed(findings, view, models.shape[-1])
        honest = np.setdiff1d(np.arange(view.network.n), view.attackers)
        rows, stops = [], []
        for t_max, leak in findings.items():
            K = len(leak.rounds)
            true_diff = true_gradients(view, truth, models[1 : K + 1]) - true_gradients(
                view, truth, models[3 : K + 3]
            )
            diff_err = relative(leak.difference, true_diff)[:, honest]
            traj_err = (leak.start - models[1 : K + 1]).norm(dim=-1)[:, honest]
            r, v = np.meshgrid(leak.rounds, honest, indexing="ij")
            rows.append(
                pd.DataFrame(
                    {
                        "t_max": t_max,
                        "round": r.ravel(),
                        "node": v.ravel(),
                        "trajectory_error": traj_err.reshape(-1).numpy(),
                        "difference_error": diff_err.reshape(-1).numpy(),
                    }
                )
            )
            plain = true_gradients(view, truth, models[1 : t_max + 1])
            stops.append(
                {
                    "t_max": t_max,
                    "trajectory_error_round1": float(traj_err[0].mean()),
                    "difference_error_round1": float(diff_err[0].median()),
                    "difference_error_median": float(diff_err.median()),
                    "plain_gradient_error_median": float(
                        relative(leak.plain_gradient, plain)[:, honest].median()
                    ),
                }
            )
        table, by_stop = pd.concat(rows, ignore_index=True), pd.DataFrame(stops)
        last = by_stop.iloc[-1]
        summary = {
            "leak_form": self.form,
            "leak_trajectory_error_round1": float(last.trajectory_error_round1),
            "leak_difference_error_median": float(last.difference_error_median),
            "leak_plain_gradient_error_median": float(last.plain_gradient_error_median),
        }
        summary["verdict"] = verdict(self.form, int(last.t_max), summary)
        figures = {
            "plots/leak_difference_error.png": partial(
                metric_plot,
                table,
                "round",
                "difference_error",
                hue="t_max",
                logy=True,
                title="leaked gradient difference: relative error (honest nodes)",
            ),
            "plots/leak_trajectory_error.png": partial(
                metric_plot,
                table,
                "round",
                "trajectory_error",
                hue="t_max",
                logy=True,
                title="reconstructed model trajectory: error (honest nodes)",
            ),
        }
        keyed(table, "t_max", "round", "node"), keyed(by_stop, "t_max")
        return Findings(
            tables={"pdmm_leak": table, "pdmm_leak_by_t_max": by_stop}, summary=summary, figures=figures
        )


def verdict(form: str, t_max: int, summary: dict) -> str:
    """One line: the leaked differences and plain gradients beside guessing zero (relative error 1)."""
    return (
        f"pdmm_leak ({form} form, t_max {t_max}): the honest nodes' gradient differences "
        f"leaked with median relative error {summary['leak_difference_error_median']:.2g} and their plain "
        f"gradients with {summary['leak_plain_gradient_error_median']:.2g} (1: no better than guessing zero); "
        f"model trajectory error {summary['leak_trajectory_error_round1']:.2g} at round 1."
    )
