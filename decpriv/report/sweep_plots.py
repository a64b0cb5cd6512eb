"""Pictures of a sweep: a metric against a swept numeric key, one line per categorical configuration, error
bars over seeds (drawn by :func:`decpriv.report.plots.metric_plot`)."""

import difflib

import pandas as pd
from matplotlib.figure import Figure

from decpriv.errors import bad_value
from decpriv.report.aggregate import Sweep, varying_metrics
from decpriv.report.plots import metric_plot

MAX_DEFAULT_PLOTS = 6


def is_numeric(column: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(column):
        return False
    return bool(pd.to_numeric(column, errors="coerce").notna().all())


def wide_range(column: pd.Series) -> bool:
    """Positive values spanning two decades or more (privacy budgets, learning rates): a log axis reads best."""
    values = pd.to_numeric(column, errors="coerce")
    return bool((values > 0).all() and values.max() / values.min() >= 100)


def with_hue(table: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, str | None]:
    """One legend label per combination of ``keys`` (``topology=ring, defense=ldp``)."""
    if not keys:
        return table, None
    if len(keys) == 1:
        return table.assign(**{keys[0]: table[keys[0]].astype(str)}), keys[0]
    label = table[keys].astype(str).apply(lambda r: ", ".join(f"{k}={v}" for k, v in r.items()), axis=1)
    return table.assign(configuration=label), "configuration"


def axes_for(sweep: Sweep) -> tuple[str, list[str]] | None:
    """The x key (first numeric swept key, else the first swept key) and the keys drawn as lines."""
    keys = [k for k in sweep.group_keys if sweep.table[k].astype(str).nunique() > 1]
    if not keys:
        return None
    numeric = [k for k in keys if is_numeric(sweep.table[k])]
    x = numeric[0] if numeric else keys[0]
    return x, [k for k in keys if k != x]


def band_of(table: pd.DataFrame, baseline: str | float | None) -> tuple[str | float, str | float] | None:
    """The (low, high) of a headline's baseline: a shuffled null's 95% interval (``*_null_lo`` beside
    ``*_null_hi``), else the baseline alone (a line); None without one."""
    if baseline is None or (isinstance(baseline, str) and baseline not in table):
        return None
    if isinstance(baseline, str) and baseline.endswith("_null_hi"):
        low = baseline[: -len("hi")] + "lo"
        return (low if low in table else baseline, baseline)
    return (baseline, baseline)


def plot(
    table: pd.DataFrame,
    x: str,
    y: str,
    hue: list[str] | None = None,
    logx: bool | None = None,
    logy: bool = False,
    baseline: dict | None = None,
) -> Figure:
    """``y`` against ``x`` with error bars over repeated rows; refuses unknown or non-numeric columns.
    ``baseline``: ``y``'s headline entry (decpriv/report/headline.py), drawn as a band."""
    for key, name in [("x", x), ("y", y), *[("hue", h) for h in hue or []]]:
        if name not in table.columns:
            near = difflib.get_close_matches(name, [str(c) for c in table.columns], n=1)
            shown = ", ".join(table.columns[:12]) + (", ..." if len(table.columns) > 12 else "")
            fix = f"did you mean {near[0]}? The columns: {shown}" if near else f"use one of: {shown}"
            raise bad_value(key, name, "is not a column of this table", fix)
    if not is_numeric(table[y]):
        raise bad_value("y", y, "is not a numeric column", "plot a metric such as test_accuracy")
    data = table.assign(**{y: pd.to_numeric(table[y])})
    numeric_x = is_numeric(data[x])
    data = data.assign(**{x: pd.to_numeric(data[x]) if numeric_x else data[x].astype(str)})
    if logx is None:
        logx = numeric_x and wide_range(data[x])
    data, hue_column = with_hue(data, hue or [])
    title = f"{y} vs {x}" + (f" by {', '.join(hue)}" if hue else "")
    band = band_of(data, baseline["baseline"]) if baseline else None
    words = ""
    if band is not None:
        what = baseline.get("against") or str(baseline["baseline"])
        words = "its null, 2.5-97.5%" if band[0] != band[1] else f"baseline: {what}"
    return metric_plot(data, x, y, hue_column, logx=logx, logy=logy, title=title, band=band, band_label=words)


def default_plots(sweep: Sweep) -> dict[str, Figure]:
    """``plots/<metric>_vs_<x>.png``: the attack's headline metrics first, each with its baseline band,
    then the other metrics that vary across the sweep (at most six in all)."""
    axes = axes_for(sweep)
    if axes is None or sweep.completed.empty:
        return {}
    x, hue = axes
    entries = {entry["metric"]: entry for entry in sweep.headline}
    metrics = [*entries, *[m for m in varying_metrics(sweep) if m not in entries]]
    done = sweep.completed
    # a job may lack a metric (an attack view a defense leaves nothing to test on): plot the jobs that have it
    return {
        f"plots/{metric}_vs_{x}.png": plot(
            done[done[metric].notna()], x, metric, hue, baseline=entries.get(metric)
        )
        for metric in metrics[:MAX_DEFAULT_PLOTS]
        if metric in done and done[metric].notna().any()
    }
