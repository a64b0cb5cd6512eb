"""``attack=audit``: the empirical privacy audit of the run's defense against its accountant.

The auditor runs the mechanism itself (:mod:`decpriv.attacks.audit.mechanisms`) on ``trials`` pairs of
neighbouring datasets, half under each (Steinke, Nasr, Jagielski, NeurIPS 2023: every node is a canary
with its own random bit in every trial; the test of source u knows the other nodes' values, as a DP
adversary knows both neighbouring datasets). Each audited pair's test is the likelihood-ratio test of the
observer's view (:mod:`decpriv.attacks.audit.likelihood`), learnt and thresholded on ``fit_trials`` more
(DP-SGD's test is learnt from its trials: :mod:`decpriv.attacks.audit.subsampled`). The error counts give
lower bounds (:mod:`decpriv.attacks.audit.bounds`) that hold simultaneously at ``confidence``: a union
bound over every Clopper-Pearson limit stated, FPR and FNR at two thresholds for every pair. audit.csv
keeps the counts, thresholds and per-limit alpha, so every bound can be re-derived from it. After accounting, :meth:`Audit.reconcile` puts the accountant's value
beside each bound and fails the run where a bound exceeds it.
"""

import time
from typing import Annotated

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.audit.bounds import dp_lower, gdp_lower, rates_upper, renyi_lower
from decpriv.attacks.audit.likelihood import (
    Counted,
    LinearTest,
    choose_thresholds,
    error_counts,
    fit_test,
    gaussianity,
    heldout_counts,
    noise_factor,
    statistics,
)
from decpriv.attacks.audit.plan import Audited, AuditPlan, plan_audit
from decpriv.attacks.audit.reconcile import reconcile
from decpriv.attacks.audit.subsampled import SampledTrials, canary_draw, learn_step_test
from decpriv.attacks.audit.walk import WalkTrials, walk_draw
from decpriv.attacks.base import Attack
from decpriv.attacks.targets import fixed_targets
from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense
from decpriv.device import attack_device
from decpriv.errors import bad_value
from decpriv.random.streams import Seeds
from decpriv.report.findings import Findings, keyed
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth

MEMORY = 2.5e8  # bytes of released values held at once (the trials run in chunks below it)
LIMITS_PER_PAIR = 4  # FPR and FNR at the GDP threshold and at the (epsilon, delta) threshold


@checked("attack")
class Audit(Attack):
    name = "audit"
    needs_adversary = False  # the adversary is the accountant's observer, instantiated by the audit
    audits = True  # the pipeline hands it the mechanism (plan_trials) and the accountant's table (reconcile)
    # sound when the measured lower bound stays at or below what the accountant claims for the same pair
    headline = (
        Headline("audit_epsilon", "audit_epsilon_accountant", "lower", "the accountant's value", "within"),
    )

    def __init__(
        self,
        trials: int = 100000,
        fit_trials: int = 20000,
        confidence: Annotated[float, Range(gt=0, lt=1, what="a confidence level", eg=0.95)] = 0.95,
        chunk: int = 20000,
        max_observers: Annotated[int, Range(ge=1, what="the number of audited observers", eg=40)] = 40,
    ):
        for key, value, least in (
            ("trials", trials, 1000),
            ("fit_trials", fit_trials, 1000),
            ("chunk", chunk, 1000),
        ):
            if value < least or value % 2:
                raise bad_value(
                    f"attack.{key}",
                    value,
                    f"needs an even count of at least {least}",
                    f"use e.g. {key}=20000",
                )
        self.trials, self.fit_trials, self.confidence = trials, fit_trials, confidence
        self.chunk, self.max_observers = chunk, max_observers

    def plan_trials(self, context: AttackContext, protocol, defense: Defense, accountant) -> AuditPlan:
        """The audit's plan: it reruns the protocol and the (calibrated) defense, never the data, and checks
        the accountant; refuses (exit 2) a pair it does not cover."""
        return plan_audit(Audited(context, protocol, defense, accountant), self.max_observers)

    def run(self, view: View) -> pd.DataFrame:
        plan: AuditPlan = view.plan
        begin = time.perf_counter()
        pairs = sum(len(o.sources) for o in plan.observers)
        alpha = (1.0 - self.confidence) / (LIMITS_PER_PAIR * pairs)
        if isinstance(plan.trials, SampledTrials | WalkTrials):
            sampled = isinstance(plan.trials, SampledTrials)
            if sampled:  # on the attack's device: the run's, where its process got the GPU
                draw = canary_draw(plan.trials, view.seeds, attack_device())
            else:
                draw = walk_draw(plan.trials, view.seeds)
            counted = heldout_counts(
                draw,
                self.fit_trials,
                self.trials,
                self.chunk_size(plan.trials.steps if sampled else 0, pairs),
                alpha,
                plan.currency.delta,
                pairs,
                learn_step_test if sampled else None,
            )
        else:
            counted = self.linear_counts(plan, view, alpha)
        return self.bounds(plan, counted, alpha).assign(seconds=time.perf_counter() - begin)

    def linear_counts(self, plan: AuditPlan, view: View, alpha: float) -> Counted:
        """A linear Gaussian view: the likelihood-ratio test fitted on the fit trials, counted on the rest."""
        unit, senders = plan.trials.run(
            plan.clip * torch.eye(plan.n, dtype=torch.float64),
            Seeds(view.seeds.seed("attack.audit.unit")),
            False,
        )
        response = unit / plan.clip  # (B, rows, n): the view's mean per unit contribution of each node
        sources = np.concatenate([o.sources for o in plan.observers])
        noise, signs = self.draw(plan, response, view, "fit", self.fit_trials)
        test = self.tests(plan, response, senders, noise)
        t = statistics(test, noise, signs[sources], plan.clip)
        tau = choose_thresholds(t, signs[sources], alpha, plan.currency.delta)
        ks = gaussianity(t.numpy(), signs[sources].numpy() < 0)
        del noise, t
        counts = np.zeros((2, 4, len(sources)), dtype=np.int64)
        size = self.chunk_size(response.shape[0] * response.shape[1], len(sources))
        for index, start in enumerate(range(0, self.trials, size)):
            noise, signs = self.draw(plan, response, view, f"eval.{index}", min(size, self.trials - start))
            t = statistics(test, noise, signs[sources], plan.clip).numpy()
            negative = signs[sources].numpy() < 0
            counts[0] += error_counts(t, negative, tau.gdp)
            counts[1] += error_counts(t, negative, tau.dp)
        return Counted(counts, np.stack([tau.gdp, tau.dp]), ks)

    @staticmethod
    def tests(
        plan: AuditPlan, response: torch.Tensor, senders: np.ndarray, noise: torch.Tensor
    ) -> LinearTest:
        """Every audited pair's test direction, zero outside its observer's rows: (B, rows, pairs)."""
        factor = noise_factor(noise, plan.trials.blocks_are_iid)
        directions, shifts = [], []
        for o in plan.observers:
            rows = torch.from_numpy(np.isin(senders, o.senders))
            test = fit_test(factor[rows], response[:, rows][:, :, o.sources])
            W = torch.zeros(response.shape[0], response.shape[1], len(o.sources), dtype=response.dtype)
            W[:, rows] = test.W
            directions.append(W)
            shifts.append(test.c)
        return LinearTest(torch.cat(directions, dim=2), torch.cat(shifts))

    def chunk_size(self, rows: int, pairs: int) -> int:
        # per trial: the released values, their mean and the noise (rows each); statistics and signs (pairs)
        fits = int(MEMORY // (8 * 3 * max(rows, pairs))) // 2 * 2
        return max(1000, min(self.chunk, fits))

    def draw(self, plan: AuditPlan, response: torch.Tensor, view: View, name: str, trials: int):
        """One chunk: every node's balanced random signs, the noisy run, and its noise (run minus mean)."""
        rng = view.seeds.numpy(f"attack.audit.signs.{name}")
        half = np.repeat([-1.0, 1.0], trials // 2)
        signs = torch.from_numpy(rng.permuted(np.tile(half, (plan.n, 1)), axis=1))
        released, _ = plan.trials.run(
            plan.clip * signs, Seeds(view.seeds.seed(f"attack.audit.noise.{name}")), True
        )
        return released - torch.einsum("brn,nd->brd", response, plan.clip * signs), signs

    def bounds(self, plan: AuditPlan, counted: Counted, alpha: float) -> pd.DataFrame:
        """Per pair: the bounds, and everything they are computed from (counts, thresholds, alpha)."""
        currency, counts = plan.currency, counted.counts
        fpr, fnr = rates_upper(*counts[0], alpha)
        fpr_dp, fnr_dp = rates_upper(*counts[1], alpha)
        mu, dp = gdp_lower(fpr, fnr), dp_lower(fpr_dp, fnr_dp, currency.delta)
        if currency.alpha:  # Renyi currency: the Bernoulli bound needs no assumption on the view
            free = np.maximum(
                renyi_lower(currency.alpha, fpr, fnr), renyi_lower(currency.alpha, fpr_dp, fnr_dp)
            )
        else:
            free = dp
        table = pd.DataFrame(
            {
                "source": np.concatenate([o.sources for o in plan.observers]),
                "observer": np.concatenate(
                    [np.full(len(o.sources), o.label, dtype=object) for o in plan.observers]
                ),
                "epsilon_lower": [currency.of_mu(m) for m in mu] if currency.gaussian_view else free,
                "epsilon_lower_assumption_free": free,
                "epsilon_dp_lower": dp,
                "gaussian_view": currency.gaussian_view,
                "gaussianity_ks": counted.ks,
                "mu_lower": mu,
                "fpr_upper": fpr,
                "fnr_upper": fnr,
                "fpr_dp_upper": fpr_dp,
                "fnr_dp_upper": fnr_dp,
                **{
                    f"{row}_{name}": counts[i, j]
                    for i, row in enumerate(("gdp", "dp"))
                    for j, name in enumerate(("false_positives", "negatives", "false_negatives", "positives"))
                },
                "gdp_threshold": counted.thresholds[0],
                "dp_threshold": counted.thresholds[1],
                "alpha_per_limit": alpha,
                "delta": currency.delta,
            }
        )
        if plan.distance is not None:
            table["observer"] = table.observer.astype(int)
            table["distance"] = plan.distance[table.source, table.observer].astype(int)
        return table.assign(trials=self.trials, fit_trials=self.fit_trials, confidence=self.confidence)

    def fixed(self, findings: pd.DataFrame, plan: AuditPlan) -> pd.DataFrame:
        """The finding on the pairs the pipeline's own plan (``plan_trials``, never the attack's) audits:
        a pair outside, or twice, is refused; an omitted pair is no evidence (every bound 0)."""
        expected = pd.DataFrame(
            {
                "source": np.concatenate([o.sources for o in plan.observers]),
                "observer": np.concatenate(
                    [np.full(len(o.sources), o.label, dtype=object) for o in plan.observers]
                ),
            }
        )
        if plan.distance is not None:
            expected["observer"] = expected.observer.astype(int)
        whose = "the (source, observer) pairs of the pipeline's audit plan"
        scores = torch.zeros(len(findings), 1)
        return fixed_targets(self.name, findings, scores, expected, whose)[0]

    def evaluate(self, findings: pd.DataFrame, truth: Truth, view: View) -> Findings:
        seconds = float(findings.seconds.iloc[0])
        findings = self.fixed(findings, view.plan)
        table = keyed(refuse_nonfinite(findings.drop(columns="seconds")), "source", "observer")
        summary = {
            "audit_nonfinite_pairs": int((~table.finite).sum()),
            "audit_trials": self.trials,
            "audit_fit_trials": self.fit_trials,
            "audit_pairs": len(table),
            "audit_seconds": seconds,
            "audit_confidence": self.confidence,
            "audit_currency": view.plan.currency.label,
        }
        return Findings(tables={"audit": table}, summary=summary)

    def reconcile(self, report: Findings, plan: AuditPlan) -> None:
        """After accounting: the accountant's value beside each bound; fails the run on a violation."""
        reconcile(report, plan)


BOUNDS = ("epsilon_lower", "epsilon_lower_assumption_free", "epsilon_dp_lower", "mu_lower")


def refuse_nonfinite(table: pd.DataFrame) -> pd.DataFrame:
    """A pair whose counts, rates or bounds hold NaN or inf is no evidence (every bound 0, ``finite``
    False): a non-finite lower bound would otherwise pass for, or hide, an accountant under-reporting."""
    numbers = table.select_dtypes("number").to_numpy(dtype=float)
    finite = np.isfinite(numbers).all(1)
    table = table.assign(finite=finite)
    table.loc[~finite, list(BOUNDS)] = 0.0
    return table
