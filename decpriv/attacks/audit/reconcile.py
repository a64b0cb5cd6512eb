"""The audit beside the accountant: join each lower bound to the accountant's value for the same pair, fail
the run where a bound exceeds it (the accountant under-reports), draw both."""

from functools import partial

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from decpriv.report.findings import Findings, keyed  # noqa: E402

RELATIVE_SLACK = 1e-9  # float rounding between two computations of one number, not statistics


class AuditFailed(RuntimeError):
    """An audited lower bound above the accountant's value: the accountant's number is not sound."""


def joined(audit: pd.DataFrame, privacy: pd.DataFrame, currency) -> pd.DataFrame:
    """The audit's rows with the accountant's value in the audit's currency and its (epsilon, delta)."""
    keys = ["source", "observer"] if currency.pairwise else ["source"]
    claims = privacy.assign(
        epsilon_accountant=privacy[currency.column], epsilon_dp_accountant=privacy.epsilon
    )
    if "method" not in claims:
        claims = claims.assign(method="exact" if currency.gaussian_view else "bound")
    claims = claims[[*keys, "epsilon_accountant", "epsilon_dp_accountant", "method"]]
    if currency.pairwise:
        claims = claims.astype({"source": int, "observer": int})
    return audit.merge(claims, on=keys, how="left", validate="many_to_one")


def exceeds(low, high):
    """A lower bound above the accountant's value beyond float rounding."""
    return low > high * (1 + RELATIVE_SLACK) + 1e-12


def proved_over(table):
    """Where an assumption-free bound exceeds the accountant's value (no Gaussian view assumed)."""
    return exceeds(table.epsilon_lower_assumption_free, table.epsilon_accountant) | exceeds(
        table.epsilon_dp_lower, table.epsilon_dp_accountant
    )


def violations(table: pd.DataFrame) -> pd.DataFrame:
    return table[exceeds(table.epsilon_lower, table.epsilon_accountant) | proved_over(table)]


def failure(row: pd.Series, currency, pairs: int) -> str:
    proved = bool(proved_over(row))
    how = (
        "the audit proves at least"
        if proved
        else f"assuming a Gaussian view (KS distance {row.gaussianity_ks:.3f}) the audit finds at least"
    )
    return (
        f"accountant={currency.accountant} under-reports source {row.source} seen by {row.observer}: it claims "
        f"{currency.label} {row.epsilon_accountant:.4g} ((epsilon, delta) {row.epsilon_dp_accountant:.4g}) but "
        f"{how} {row.epsilon_lower:.4g} (assumption-free {row.epsilon_lower_assumption_free:.4g}; (epsilon, "
        f"delta) {row.epsilon_dp_lower:.4g}) at {row.confidence:.0%} confidence over {pairs} pairs, "
        f"{row.trials} trials"
    )


def reconcile(report: Findings, plan) -> None:
    """Add the accountant's columns to audit.csv and the headline audit_epsilon / audit_epsilon_accountant;
    raise :class:`AuditFailed` (the run fails, nothing written) on a bound above the accountant's value."""
    currency = plan.currency
    table = joined(report.tables["audit"], report.tables["privacy"], currency)
    wrong = violations(table)
    if len(wrong):
        worst = wrong.loc[(wrong.epsilon_lower / wrong.epsilon_accountant.clip(lower=1e-300)).idxmax()]
        raise AuditFailed(failure(worst, currency, len(table)))
    top = table.loc[table.epsilon_lower.idxmax()]
    exact = table[table.method == "exact"]
    ratio = exact.epsilon_lower / exact.epsilon_accountant.where(exact.epsilon_accountant > 0)
    tightness = float(top.epsilon_lower / top.epsilon_accountant) if top.epsilon_accountant else 1.0
    report.tables["audit"] = keyed(table, "source", "observer")
    report.summary.update(
        audit_epsilon=float(top.epsilon_lower),
        audit_epsilon_assumption_free=float(table.epsilon_lower_assumption_free.max()),
        audit_epsilon_accountant=float(top.epsilon_accountant),
        audit_tightness=tightness,
        audit_tightness_exact_median=float(ratio.median()) if ratio.notna().any() else float("nan"),
        audit_epsilon_dp=float(table.epsilon_dp_lower.max()),
        verdict=verdict(table, top, currency, tightness, plan.blind_spots) + refused_note(table),
    )
    report.figures["plots/audit.png"] = partial(audit_figure, table, currency)


def verdict(table: pd.DataFrame, top: pd.Series, currency, tightness: float, blind_spots: str) -> str:
    view = (
        f"assuming a Gaussian view (largest KS distance {table.gaussianity_ks.max():.3f}); assumption-free "
        f"at most {table.epsilon_lower_assumption_free.max():.3g}"
        if currency.gaussian_view
        else "no assumption on the view"
    )
    return (
        f"no evidence of under-reporting (tightness {tightness:.2f}): all {len(table)} audited lower bounds "
        f"({currency.label}, {top.confidence:.0%} simultaneous; {view}) stay at or below "
        f"accountant={currency.accountant}; the largest, {top.epsilon_lower:.3g} for source {top.source} seen "
        f"by {top.observer}, is {tightness:.0%} of its {top.epsilon_accountant:.3g}. The audit cannot see "
        f"{blind_spots}"
    )


def refused_note(table: pd.DataFrame) -> str:
    """The verdict's words for pairs whose findings held NaN or inf (scored as no evidence)."""
    refused = int((~table.finite).sum()) if "finite" in table else 0
    if not refused:
        return ""
    return (
        f" {refused} of {len(table)} pair(s) came back with NaN or inf in their counts or bounds: each "
        "scored as no evidence (bound 0), a failure of the audit."
    )


def audit_figure(table: pd.DataFrame, currency) -> Figure:
    """Accountant vs audit lower bound per pair against hop distance (pairwise), else per source node."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    pairwise = "distance" in table
    x = table.distance.to_numpy(float) if pairwise else table.source.to_numpy(float)
    jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(x)) if pairwise else 0.0
    ax.scatter(x - 0.15 + jitter, table.epsilon_accountant, s=10, alpha=0.5, c="C0", label="accountant")
    ax.scatter(
        x + 0.15 + jitter,
        table.epsilon_lower,
        s=10,
        alpha=0.5,
        c="C3",
        marker="x",
        label=f"audit lower bound ({table.confidence.iloc[0]:.0%}, {table.trials.iloc[0]} trials)",
    )
    if pairwise:
        means = table.groupby("distance")[["epsilon_accountant", "epsilon_lower"]].mean()
        ax.plot(means.index - 0.15, means.epsilon_accountant, "o-", c="C0", lw=1)
        ax.plot(means.index + 0.15, means.epsilon_lower, "x-", c="C3", lw=1)
    ax.set_xlabel("hop distance between source and observer" if pairwise else "source node")
    ax.set_ylabel(currency.axis)
    ax.set_ylim(bottom=0)
    ax.set_title(f"Empirical audit vs accountant={currency.accountant}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
