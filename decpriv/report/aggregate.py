"""A sweep as one tidy table: every job's summary row, the swept keys, and mean/std/count over seeds.

The swept keys are the overrides that Hydra expanded (``topology=ring,torus``, ``seed=range(3)``), read from
the sweep's ``multirun.yaml``; a folder of runs without one falls back to the config columns that vary.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from decpriv.report import headline
from decpriv.report.diff import sweep_keys
from decpriv.report.ledger import job_folders, swept_keys_of
from decpriv.report.run_folder import read_status
from decpriv.report.sweep import collect

SEED = "seed"


@dataclass
class Sweep:
    path: Path
    table: pd.DataFrame  # one row per job: job, status, metrics, flattened config
    keys: list[str]  # swept keys, in the order they were given on the command line
    metrics: list[str]  # numeric summary metrics, in the order the runs reported them
    headline: list[dict] = field(default_factory=list)  # the attack's headline entries (report/headline.py)
    flags: set[str] = field(default_factory=set)  # yes/no metrics (read as 0/1): counted as k of m

    def headline_of(self, metric: str) -> dict | None:
        """``metric``'s headline entry (its baseline), None when it is not a headline metric."""
        return next((entry for entry in self.headline if entry["metric"] == metric), None)

    @property
    def completed(self) -> pd.DataFrame:
        return self.table[self.table["status"] == "completed"]

    @property
    def group_keys(self) -> list[str]:
        """Swept keys other than the seed: what one aggregated row stands for."""
        return [k for k in self.keys if k != SEED]


def _metric_names(sweep: Path) -> list[str]:
    names: list[str] = []
    for job in job_folders(sweep):
        for name in read_status(job).get("metrics", []):
            if name not in names:
                names.append(name)
    return names


def sweep_headline(sweep: Path, table: pd.DataFrame) -> list[dict]:
    """The headline entries of the sweep's jobs (decpriv/report/headline.py), each metric once, those
    that are columns of ``table``."""
    seen: dict[str, dict] = {}
    metas = [read_status(job) for job in job_folders(sweep)]
    completed = [meta for meta in metas if meta.get("status") == "completed"]
    for meta in completed or metas:  # a failed job declares no headline: it would fall back to training
        for entry in headline.of_run(meta):
            seen.setdefault(entry["metric"], entry)
    return [entry for entry in seen.values() if entry["metric"] in table]


def metrics_and_keys(sweep: Path, table: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The numeric columns of ``table`` that the jobs' run.json name as metrics, and the swept keys
    (multirun.yaml's, else the config columns that vary)."""
    metrics = [
        m
        for m in _metric_names(sweep)
        if m in table and (pd.api.types.is_numeric_dtype(table[m]) or _is_flag(table[m].dropna()))
    ]
    keys = [k for k in swept_keys_of(sweep) if k in table.columns]
    # no plan (ledger, multirun.yaml) names them: the config columns that vary, never a metric (a verdict)
    return metrics, keys or sweep_keys(table, {*_metric_names(sweep), "job", "error"})


def load_sweep(path: Path | str) -> Sweep:
    """Read a sweep folder (its jobs' summary rows) with its swept keys and metric names."""
    path = Path(path)
    table = collect(path)
    if table.empty:
        raise FileNotFoundError(f"{path}: no job folders with a run.json (is it a sweep folder?)")
    metrics, keys = metrics_and_keys(path, table)
    front = ["job", "status", *keys]
    table = table[front + [c for c in table.columns if c not in front]]
    entries = sweep_headline(path, table)
    flags = {m for m in metrics if _is_flag(table.loc[table["status"] == "completed", m].dropna())}
    # a flag column with a failed job's blank reads as text: as 0/1 it is counted, k of m
    table = table.assign(**{m: pd.to_numeric(table[m].astype("float64")) for m in flags})
    return Sweep(path, table, keys, headline_first(metrics, entries), entries, flags)


def headline_first(metrics: list[str], entries: list[dict]) -> list[str]:
    """``metrics`` led by the headline (each metric, then its baseline): every table and aggregate.csv
    opens with what the sweep found."""
    lead = [n for e in entries for n in (e["metric"], e["baseline"]) if isinstance(n, str) and n in metrics]
    return list(dict.fromkeys([*lead, *metrics]))


def aggregate(sweep: Sweep) -> pd.DataFrame:
    """Tidy statistics over seeds: one row per (swept configuration, metric) with mean, std and count.

    Only completed jobs enter the statistics; ``failed`` counts the jobs of that configuration that did not
    complete, so a missing seed is visible instead of silently shrinking ``count``.
    """
    keys = sweep.group_keys
    table = sweep.table.assign(_all="all") if not keys else sweep.table
    by = keys or ["_all"]
    done = table[table["status"] == "completed"]
    failed = (
        table.assign(_failed=table["status"] != "completed")
        .groupby(by, dropna=False, sort=True)["_failed"]
        .sum()
    )
    parts = []
    for metric in sweep.metrics:
        stats = done.groupby(by, dropna=False, sort=True)[metric].agg(["mean", "std", "count"])
        stats = stats.reindex(failed.index)
        stats["count"] = stats["count"].fillna(0).astype(int)
        stats["failed"] = failed.astype(int)
        stats.insert(0, "metric", metric)
        parts.append(stats.reset_index())
    if not parts:
        return pd.DataFrame(columns=[*keys, "metric", "mean", "std", "count", "failed"])
    out = pd.concat(parts, ignore_index=True)
    if keys:
        out = out.sort_values(keys, key=_natural, kind="stable", ignore_index=True)
    return out.drop(columns=["_all"], errors="ignore")


def headline_over_seeds(sweep: Sweep) -> pd.DataFrame:
    """Each headline metric over the seeds of each swept configuration: on how many seeds it beats its
    baseline (``k`` of ``m`` completed), its median, lowest and highest value and the median baseline, so
    a claim reads as "k of m seeds above the null" rather than as one seed's number."""
    done = sweep.completed
    keys = sweep.group_keys
    groups = done.groupby(keys, dropna=False, sort=True) if keys else [((), done)]
    judgements = {entry["metric"]: judged(entry, done) for entry in sweep.headline}  # once, all jobs
    rows = []
    for key, jobs in groups:
        for entry in sweep.headline:
            metric = entry["metric"]
            verdicts = judgements[metric].loc[jobs.index]
            rows.append(
                {
                    **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                    "metric": metric,
                    "beats": int(verdicts["won"].sum()),
                    "seeds": len(jobs),
                    "median": jobs[metric].median(),
                    "baseline_median": verdicts[
                        "base"
                    ].median(),  # beside the median: never cut at 80 columns
                    "min": jobs[metric].min(),
                    "max": jobs[metric].max(),
                    "against": entry.get("against", ""),
                }
            )
    return pd.DataFrame(rows)


def judged(entry: dict, jobs: pd.DataFrame) -> pd.DataFrame:
    """Each job's baseline value for the headline ``entry`` (numeric, NaN when missing), whether its
    value beats it, and whether it could be judged at all (value and baseline both present)."""
    bases = [headline.baseline_value(entry, row) for _, row in jobs.iterrows()]
    won = [headline.beats(entry, v, b) for v, b in zip(jobs[entry["metric"]], bases, strict=True)]
    return pd.DataFrame(
        {
            "base": pd.to_numeric(pd.Series(bases, index=jobs.index, dtype=object), errors="coerce"),
            "won": [w is True for w in won],
            "judged": [w is not None for w in won],
        },
        index=jobs.index,
    )


def mean_std_count(done: pd.DataFrame, by: list[str], column: str) -> pd.DataFrame:
    """``column``'s mean, std and count over the rows of each ``by`` combination, in natural order."""
    stats = done.groupby(by, dropna=False, sort=True)[column].agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values(by, key=_natural, kind="stable", ignore_index=True)


def _natural(column: pd.Series) -> pd.Series:
    """Sort text with numbers by value (``[2]`` before ``[10]``); numeric columns as they are."""
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        return column
    return column.astype(str).str.replace(r"\d+", lambda m: m.group().zfill(12), regex=True)


def varying_metrics(sweep: Sweep) -> list[str]:
    """Metrics whose value changes between completed jobs: the ones worth a column or a picture."""
    done = sweep.completed
    return [m for m in sweep.metrics if done[m].nunique(dropna=True) > 1]


def _cell(row: pd.Series, flags: set[str]) -> str:
    """``mean ± std``; a flag (a yes/no metric) as ``k of m`` jobs, which a mean and std would blur."""
    if pd.isna(row["mean"]):
        return ""
    if row["metric"] in flags:
        return f"{round(row['mean'] * row['count'])} of {row['count']}"
    return f"{row['mean']:.4g}" + ("" if pd.isna(row["std"]) else f" ± {row['std']:.2g}")


def _is_flag(values: pd.Series) -> bool:
    return len(values) > 0 and all(isinstance(v, bool | np.bool_) for v in values)


def wide(
    stats: pd.DataFrame, keys: list[str], metrics: list[str], flags: set[str] = frozenset()
) -> pd.DataFrame:
    """One row per configuration, one ``mean ± std`` cell per metric (``k of m`` for a flag), and the
    seed count: for reading."""
    rows = stats[stats["metric"].isin(metrics)]
    cell = rows.apply(lambda r: _cell(r, flags), axis=1)
    rows = rows.assign(cell=cell if len(rows) else pd.Series(dtype=str))
    index = keys or []
    if not index:
        out = rows.set_index("metric")["cell"].to_frame().T
        out.insert(0, "n", int(rows["count"].max()) if len(rows) else 0)
        return out.reset_index(drop=True)
    out = rows.pivot_table(index=index, columns="metric", values="cell", aggfunc="first", dropna=False)
    out = out[[m for m in metrics if m in out.columns]]
    counts = rows.groupby(index, dropna=False)["count"].max()
    out.insert(0, "n", counts.reindex(out.index).fillna(0).astype(int))
    out.columns.name = None
    return out.reset_index()


def headline_cells(sweep: Sweep) -> pd.DataFrame:
    """One row per configuration (the swept keys but the seed), one cell per headline metric: its mean
    beside its baseline's and how many jobs beat it, ``0.7378 ± 0.13 vs 0.6213: 2 of 2`` (the finding,
    read as the run reads it)."""
    keys = sweep.group_keys
    done = sweep.completed.assign(_all="all")
    by = keys or ["_all"]
    columns = {}
    for entry in sweep.headline:
        metric = entry["metric"]
        verdicts = judged(entry, done)
        frame = done.assign(
            _value=pd.to_numeric(done[metric], errors="coerce"),
            _base=verdicts["base"],
            _won=verdicts["won"],
            _judged=verdicts["judged"],
        )
        columns[metric] = frame.groupby(by, dropna=False, sort=False).apply(
            _headline_cell, include_groups=False
        )
    out = pd.DataFrame(columns)
    return out.reset_index().drop(columns=["_all"], errors="ignore") if len(out) else out


def _headline_cell(group: pd.DataFrame) -> str:
    values = group["_value"].dropna()
    if values.empty:
        return ""
    text = f"{values.mean():.4g}" + (f" ± {values.std():.2g}" if len(values) > 1 else "")
    if group["_base"].notna().any():
        text += f" vs {group['_base'].mean():.4g}"
    judged = int(group["_judged"].sum())
    return text + (f": {int(group['_won'].sum())} of {judged}" if judged else "")


def across_jobs(sweep: Path, table: pd.DataFrame) -> str | None:
    """One line over a sweep's completed jobs, the first headline's median, range and how many jobs beat
    their baseline: ``across 3 of 4 jobs: mia_received_auc median 0.7744 (0.7516-0.7973), 2 of 3 beat
    their baseline``; None when no job completed."""
    done = table[table["status"] == "completed"]
    entry = next(iter(sweep_headline(sweep, done)), None) if len(done) else None
    if entry is None or done[entry["metric"]].dropna().empty:
        return None
    values = pd.to_numeric(done[entry["metric"]], errors="coerce").dropna()
    line = f"across {len(done)} of {len(table)} jobs: {entry['metric']} median {values.median():.4g}"
    line += f" ({values.min():.4g}-{values.max():.4g})" if len(values) > 1 else ""
    verdicts = judged(entry, done)
    if verdicts["judged"].any():
        line += f", {int(verdicts['won'].sum())} of {int(verdicts['judged'].sum())} beat their baseline"
    return line
