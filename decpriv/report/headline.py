"""What a run is read by: the attack's headline metrics, each beside the no-attack baseline it is judged
against, then the training metrics.

An attack declares its headline once, as a class attribute (``headline = (Headline(...), ...)``); the run
resolves the declaration against the metrics it measured and writes the result into run.json
(``headline``), so every view (the table after ``decpriv run``, ``decpriv runs``, ``show``, ``report``,
``plot``) reads the same list without importing the attack. A new attack adds one line, e.g.::

    headline = (Headline("audit_epsilon", "audit_epsilon_accountant", "lower", "the accountant's bound"),)
"""

from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import Any

TRAINING = ("test_accuracy", "train_loss", "optimality_gap", "mse", "consensus_distance")
# the training metrics a run without an attack is read by, in this order (those the protocol measured)
PRIVACY = (("epsilon_rdp_max", "ldp_level"), ("epsilon_mean_max", "ldp_level"), ("epsilon", None))
# what an accounting run without an attack is read by: the worst pairwise and the worst mean loss beside
# the local-DP level (the same noise without gossip's amplification), then the (epsilon, delta) guarantee
LDP = "the local-DP level of the same noise (Renyi)"


@dataclass(frozen=True)
class Headline:
    """One number the attack is judged by and its baseline.

    ``metric``: a summary key; one ``*`` stands for a part that varies (``mia_*_auc``: one entry per
    view). ``baseline``: the key of the no-attack baseline (the same ``*`` filled in), or a constant (a
    random direction has cosine 0), or None. ``better``: ``higher`` or ``lower``. ``against``: the
    baseline in words, for captions."""

    metric: str
    baseline: str | float | None = None
    better: str = "higher"
    against: str = ""
    verb: str = (
        "beats"  # the comparison's word in a table's header: an audit's bound stays "within" its value
    )

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"Headline.better must be 'higher' or 'lower', not {self.better!r}")


# every view of a run whose attack was handed the truth (attack.oracle=true) says so
ORACLE_NOTE = (
    "oracle: attack.oracle=true, the attack ran with the ground truth (a paper's shortcut, not what an "
    "adversary sees)"
)


# every view of a run whose attack ran outside bubblewrap's sandbox says so (docs/ARCHITECTURE.md)
PROCESS_SEAL_NOTE = (
    "seal: process, the attack ran outside bubblewrap's sandbox (it could read and write what the user "
    "can, and reach the network)"
)


def resolve(declared: tuple[Headline, ...], names: list[str]) -> list[dict[str, Any]]:
    """The declared headlines that the run measured, patterns expanded in the order of ``names``:
    ``[{metric, baseline, better, against}]`` with ``baseline`` a key of ``names``, a number or None.
    A metric that two declarations match takes the first (a named view, then ``*`` for the others)."""
    out = []
    for entry in declared:
        taken = {e["metric"] for e in out}
        for name in [n for n in names if fnmatchcase(n, entry.metric) and n not in taken]:
            baseline = entry.baseline
            if isinstance(baseline, str):
                part = _star(entry.metric, name)
                baseline = baseline.replace("*", part, 1)
                baseline = baseline if baseline in names else None
            out.append({**asdict(entry), "metric": name, "baseline": baseline})
    return out


def _star(pattern: str, name: str) -> str:
    """What ``*`` matched in ``name`` (``mia_*_auc``, ``mia_received_auc`` -> ``received``)."""
    if "*" not in pattern:
        return ""
    head, tail = pattern.split("*", 1)
    return name[len(head) : len(name) - len(tail)]


def of_run(meta: dict[str, Any], summary: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A run's headline from its run.json; a run without a declared one (no attack, or written before
    headlines existed) is read by its first training metric."""
    declared = [h for h in meta.get("headline") or [] if summary is None or h["metric"] in summary]
    if declared:
        return declared
    metrics = meta.get("metrics") or list(summary or {})
    privacy = [
        {
            "metric": m,
            "baseline": b if b in metrics else None,
            "better": "lower",
            "against": LDP,
            "verb": "below",
        }
        for m, b in PRIVACY
        if m in metrics
    ]
    if privacy:  # an accounting run is read by its privacy loss
        return privacy
    first = next((m for m in TRAINING if m in metrics), None)
    better = "lower" if first in ("train_loss", "optimality_gap", "mse", "consensus_distance") else "higher"
    return [{"metric": first, "baseline": None, "better": better, "against": ""}] if first else []


def baseline_value(entry: dict[str, Any], row: Any) -> Any:
    """The baseline's value in a summary row (a dict or pandas Series): a column, a constant, or None."""
    baseline = entry.get("baseline")
    if isinstance(baseline, str):
        return row.get(baseline) if hasattr(row, "get") else None
    return baseline


def beats(entry: dict[str, Any], value: Any, baseline: Any) -> bool | None:
    """Whether ``value`` beats its baseline in the declared direction (None when either is missing)."""
    try:
        value, baseline = float(value), float(baseline)
    except (TypeError, ValueError):
        return None
    if value != value or baseline != baseline:
        return None
    return value > baseline if entry.get("better", "higher") == "higher" else value < baseline


def cell(entry: dict[str, Any], value: Any, baseline: Any) -> str:
    """``0.5675 vs 0.5422 ✓``: the value beside its baseline, ticked when it beats it (crossed when not);
    the value alone without a baseline."""
    from decpriv.report.text import fmt

    if value is None or (isinstance(value, float) and value != value):
        return ""
    short = fmt(round(value, 4 - _digits(value))) if isinstance(value, float) else fmt(value)
    won = beats(entry, value, baseline)
    if won is None:
        return short
    base = fmt(round(float(baseline), 4 - _digits(float(baseline))))
    return f"{short} vs {base} {'✓' if won else '✗'}"


def _digits(value: float) -> int:
    """Digits before the point (for rounding to four significant digits)."""
    from math import floor, isfinite, log10

    return 1 + floor(log10(abs(value))) if value and isfinite(value) else 1  # inf: no noise, epsilon inf


def label(entry: dict[str, Any], row: Any) -> str:
    """The headline metric's cell for a summary row (a dict or pandas Series)."""
    return cell(entry, row.get(entry["metric"]), baseline_value(entry, row))
