"""``decpriv diff A B``: compare two runs, two sweeps or two CSV tables, like ``diff``.

Rows are aligned on key columns (those a table declared, else ``round``, ``node``, ... for run tables; the
swept keys for sweep summaries, so rows only one sweep ran show as added or removed), numbers compare within ``atol + rtol *
max(|a|, |b|)``, and the exit status is 0 when everything agrees.
Bookkeeping columns that differ between any two runs (``job``, ``error``) are ignored. Two run folders that
both recorded a ``repeatable_within`` bound (CKKS: noise the seed does not fix) compare their results
within it (:class:`Bound`), their config exactly.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from decpriv.errors import ConfigError, bad_value
from decpriv.report.grid import swept_overrides
from decpriv.report.ledger import has_plan, job_folders, job_row
from decpriv.report.run_folder import read_status, read_table
from decpriv.report.sweep import collect

# Key columns of tables that declare none (report.findings.keyed declares them; run.json keeps them).
ROW_KEYS = (
    "job_key",
    "round",
    "step",
    "node",
    "source",
    "observer",
    "target",
    "victim",
    "attacker",
    "view",
    "threat",
    "alpha",
)
IGNORED = ("job", "error")


@dataclass
class TableDiff:
    name: str
    keys: list[str]
    changed: pd.DataFrame  # key columns + column, a, b, rel_diff
    added: pd.DataFrame  # rows only in B
    removed: pd.DataFrame  # rows only in A
    added_columns: list[str] = field(default_factory=list)
    removed_columns: list[str] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)  # columns that are results, not config
    within: pd.DataFrame = field(default_factory=pd.DataFrame)  # changed cells within a recorded bound
    bound: "Bound | None" = None

    @property
    def equal(self) -> bool:
        return (
            self.changed.empty
            and self.added.empty
            and self.removed.empty
            and not self.added_columns
            and not self.removed_columns
        )


@dataclass(frozen=True)
class Bound:
    """How closely two runs of one config repeat when their noise is not the seed's (run.json's
    ``repeatable_within``, written by a defense such as CKKS): results compare within ``rtol``, and the
    ``varies`` columns (times, the measured noise itself) are never expected to repeat."""

    rtol: float
    varies: frozenset[str]
    name: str
    why: str


# diff's own tolerance; a recorded bound stands in for it only while the user gave no other
DEFAULT_RTOL, DEFAULT_ATOL = 1e-9, 0.0


def recorded_bound(status_a: dict, status_b: dict) -> Bound | None:
    """The looser of the two runs' recorded bounds; None unless both runs recorded one, and None for a
    relative bound of 1 or more, which would call any two numbers of one sign the same."""
    found = [s.get("repeatable_within") for s in (status_a, status_b)]
    if not all(isinstance(f, dict) and isinstance(f.get("rtol"), int | float) for f in found):
        return None
    if not all(0 <= float(f["rtol"]) < 1 for f in found):
        return None
    varies = frozenset(str(c) for f in found for c in f.get("varies", []))
    first = found[0]
    return Bound(
        max(float(f["rtol"]) for f in found), varies, str(first.get("name", "")), str(first.get("why", ""))
    )


def split_by_bound(
    found: TableDiff, bound: Bound, rtol: float, atol: float, results: set[str] | None
) -> None:
    """Move the changed cells that stay within ``bound`` to ``found.within``: result columns only
    (``results``; None: every column of a run's other tables), config cells still compare exactly."""
    _split(found, [bound] * len(found.changed), rtol, atol, results)


def split_rows_by_bound(
    found: TableDiff, bounds: dict[str, Bound], keys: list[str] | None, rtol: float, atol: float
) -> None:
    """A sweep's summary, one row a job: each row's changed result cells within the bound its job pair
    recorded (``bounds``, by the swept values as :func:`_paired_jobs` keys them); rows of jobs without one
    compare exactly."""
    if found.changed.empty or not bounds or not keys:
        return
    named = [key_text(row, keys) for _, row in found.changed.iterrows()]
    _split(found, [bounds.get(key) for key in named], rtol, atol, found.metrics)


def _split(found: TableDiff, bounds: list, rtol: float, atol: float, results: set[str] | None) -> None:
    """The bound replaces diff's default tolerance only: a tolerance the user gave (``--rtol 0 --atol 0``)
    is used as given, and nothing it calls different is accepted by a bound."""
    changed = found.changed
    if changed.empty or (rtol, atol) != (DEFAULT_RTOL, DEFAULT_ATOL):
        return
    inside = np.array(
        [
            bound is not None
            and (results is None or column in results)
            and (column in bound.varies or _close(a, b, max(rtol, bound.rtol), atol)[0])
            for bound, column, a, b in zip(bounds, changed["column"], changed["a"], changed["b"], strict=True)
        ],
        dtype=bool,
    )
    found.within, found.changed = changed[inside], changed[~inside].reset_index(drop=True)
    found.bound = max((b for b in bounds if b is not None), key=lambda b: b.rtol, default=None)


def key_text(row: pd.Series, keys: list[str]) -> str:
    """A row's values of ``keys`` as ``k=v;k=v``: how a sweep's job is named by its swept values, in the
    summary's rows, its job folders' run.json and diff's output alike."""
    return ";".join(f"{k}={row[k]}" for k in keys if k in row)


def _status_of(target: Path) -> dict:
    """run.json of a run folder, else of a sweep's first job (``{}`` for a CSV table): the metric names
    and each table's declared key columns (``table_keys``)."""
    if target.is_file():
        return {}
    for run_json in [target / "run.json", *sorted(target.glob("*/run.json"))[:1]]:
        if run_json.is_file():
            return read_status(run_json.parent)
    return {}


def sweep_keys(table: pd.DataFrame, metrics: set[str]) -> list[str]:
    """Config columns whose value changes across a sweep's rows: what the sweep varied."""
    skip = set(metrics) | set(IGNORED) | {"status"}
    return [c for c in table.columns if c not in skip and table[c].astype(str).nunique() > 1]


def _close(a: object, b: object, rtol: float, atol: float) -> tuple[bool, float]:
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer):  # seeds, counts: exact
        return int(a) == int(b), abs(int(a) - int(b)) / max(abs(int(a)), abs(int(b)), 1)
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        same = (pd.isna(a) and pd.isna(b)) if not isinstance(a, str | bool) else str(a) == str(b)
        return same or str(a) == str(b), math.nan
    if math.isnan(x) and math.isnan(y):
        return True, 0.0
    if math.isinf(x) or math.isinf(y):
        return x == y, math.inf if x != y else 0.0
    rel = abs(x - y) / max(abs(x), abs(y), 1e-300)
    return abs(x - y) <= atol + rtol * max(abs(x), abs(y)), rel


def _aligned_keys(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> None:
    """Key columns that are numbers in both tables stay numbers (round 10 sorts after round 2); any other
    key compares as text, so ``1`` and ``"1"`` still pair up."""
    for k in keys:
        if not (pd.api.types.is_numeric_dtype(a[k]) and pd.api.types.is_numeric_dtype(b[k])):
            a[k], b[k] = a[k].astype(str), b[k].astype(str)


def compare_tables(
    name: str, a: pd.DataFrame, b: pd.DataFrame, keys: list[str] | None, rtol: float, atol: float = 0.0
) -> TableDiff:
    # copies: a summary read from CSV is one block per column, and every write to it would warn
    a = a.drop(columns=[c for c in IGNORED if c in a]).copy()
    b = b.drop(columns=[c for c in IGNORED if c in b]).copy()
    if keys is None:
        keys = [k for k in ROW_KEYS if k in a.columns and k in b.columns]
    if not keys:
        a["row"], b["row"] = np.arange(len(a)), np.arange(len(b))
        keys = ["row"]
    _aligned_keys(a, b, keys)
    common = [c for c in a.columns if c in b.columns and c not in keys]
    merged = a.merge(b, on=keys, how="outer", suffixes=("@a", "@b"), indicator=True, sort=True)
    both = merged[merged["_merge"] == "both"]
    parts = []
    for column in common:
        x, y = both[f"{column}@a"], both[f"{column}@b"]
        found = [_close(p, q, rtol, atol) for p, q in zip(x, y, strict=True)]
        differ = np.array([not same for same, _ in found], dtype=bool)
        if differ.any():
            rows = both.loc[differ, keys].assign(column=column, a=x[differ], b=y[differ])
            parts.append(rows.assign(rel_diff=np.array([rel for _, rel in found])[differ]))
    columns = [*keys, "column", "a", "b", "rel_diff"]
    changed = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    return TableDiff(
        name,
        keys,
        changed,
        added=merged.loc[merged["_merge"] == "right_only", keys].reset_index(drop=True),
        removed=merged.loc[merged["_merge"] == "left_only", keys].reset_index(drop=True),
        added_columns=[c for c in b.columns if c not in a.columns],
        removed_columns=[c for c in a.columns if c not in b.columns],
    )


def _tables(target: Path) -> dict[str, pd.DataFrame]:
    if target.is_file():
        return {target.stem: read_table(target)}
    tables = {f.stem: read_table(f) for f in sorted(target.glob("*.csv"))}
    if has_plan(target):  # a sweep's table as its ledger and job folders have it now
        tables["summary"] = collect(target)
    return tables


def _comparable(target: Path) -> None:
    """A CSV file, a run folder (run.json) or a sweep folder (job folders with run.json); anything else
    would compare as "equal" for want of tables."""
    if target.is_file():
        if target.suffix != ".csv":
            raise bad_value(
                "diff", str(target), "is not a CSV table", "give two run folders, sweeps or CSV files"
            )
        return
    if not (target / "run.json").is_file() and not any(target.glob("*/run.json")):
        raise bad_value(
            "diff",
            str(target),
            "is not a run or sweep folder (no run.json, no job folders)",
            "give two run folders, two sweep folders or two CSV files",
        )


def diff_paths(a: Path | str, b: Path | str, rtol: float = 1e-9, atol: float = 0.0) -> list[TableDiff]:
    """Compare every table the two targets share (and report the ones only one has); two sweeps also
    compare every pair of jobs that ran the same swept values, table by table (``<job>/history``)."""
    a, b = Path(a), Path(b)
    for target in (a, b):
        if not target.exists():
            raise FileNotFoundError(f"{target}: no such run folder or CSV file")
        _comparable(target)
    if a.is_file() != b.is_file():
        table, folder = (a, b) if a.is_file() else (b, a)
        raise bad_value(
            "diff",
            f"{a} {b}",
            f"{table} is one CSV table and {folder} a folder, which have nothing to pair",
            f"compare two tables ({table} OTHER/{table.name}) or two folders",
        )
    diffs = _diff_folders(a, b, rtol, atol)
    if _is_sweep(a) and _is_sweep(b):
        keys = _aligning_keys(a, b, collect(a), collect(b), diffs[0].metrics if diffs else set())
        bounds = {}
        for label, key, job_a, job_b in _paired_jobs(a, b, keys):
            for found in _diff_folders(job_a, job_b, rtol, atol):
                found.name = f"{label}/{found.name}"
                diffs.append(found)
            if (bound := recorded_bound(read_status(job_a), read_status(job_b))) is not None:
                bounds[key] = bound
        for found in (d for d in diffs if d.name == "summary"):
            split_rows_by_bound(found, bounds, keys, rtol, atol)
    return diffs


def _is_sweep(target: Path) -> bool:
    return target.is_dir() and not (target / "run.json").is_file()


def _paired_jobs(a: Path, b: Path, keys: list[str] | None) -> list[tuple[str, str, Path, Path]]:
    """Jobs of two sweeps that ran the same swept values (the same job number without swept keys), as
    (label, key, job folder in A, job folder in B): each pair's tables are compared, not only the
    summaries."""

    def by_key(sweep: Path) -> dict[str, Path]:
        found = {}
        for job in job_folders(sweep):
            try:
                row = job_row(job).iloc[0]
            except ConfigError:
                continue  # unreadable run.json: the summary comparison already shows the job
            found[key_text(row, keys) if keys else job.name] = job
        return found

    jobs_a, jobs_b = by_key(a), by_key(b)
    pairs = []
    for key in [k for k in jobs_a if k in jobs_b]:
        ja, jb = jobs_a[key], jobs_b[key]
        pairs.append((ja.name if ja.name == jb.name else f"{ja.name}~{jb.name}", key, ja, jb))
    return pairs


def _diff_folders(a: Path, b: Path, rtol: float, atol: float) -> list[TableDiff]:
    """Every table of two run folders, two sweeps' top folders or two CSV files."""
    ta, tb = _tables(a), _tables(b)
    if a.is_file() and b.is_file():
        tb = {next(iter(ta)): next(iter(tb.values()))}
    status_a, status_b = _status_of(a), _status_of(b)
    metrics = set(status_a.get("metrics", [])) | set(status_b.get("metrics", []))
    declared = {**status_b.get("table_keys", {}), **status_a.get("table_keys", {})}
    runs = all((x / "run.json").is_file() for x in (a, b))  # a sweep's summary mixes jobs: no one bound
    bound = recorded_bound(status_a, status_b) if runs else None
    diffs = []
    for name in sorted(set(ta) | set(tb)):
        if name not in ta or name not in tb:
            whole = pd.DataFrame({"table": [name]})
            diffs.append(
                TableDiff(
                    name,
                    [],
                    pd.DataFrame(),
                    added=whole if name in tb else pd.DataFrame(),
                    removed=whole if name in ta else pd.DataFrame(),
                )
            )
            continue
        keys = [k for k in declared.get(name, []) if k in ta[name] and k in tb[name]] or None
        if name == "summary" and (len(ta[name]) > 1 or len(tb[name]) > 1):
            keys = _aligning_keys(a, b, ta[name], tb[name], metrics)
        found = compare_tables(name, ta[name], tb[name], keys, rtol, atol)
        found.metrics = metrics
        if bound is not None:
            split_by_bound(found, bound, rtol, atol, metrics if name == "summary" else None)
        diffs.append(found)
    return diffs


def _aligning_keys(
    a: Path, b: Path, ta: pd.DataFrame, tb: pd.DataFrame, metrics: set[str]
) -> list[str] | None:
    """Rows of two sweep summaries pair up on the keys either sweep swept (from multirun.yaml), else on
    the config columns that vary within either table."""
    swept = [*swept_overrides(a), *swept_overrides(b)] if a.is_dir() and b.is_dir() else []
    keys = list(dict.fromkeys(swept)) or sorted(set(sweep_keys(ta, metrics)) | set(sweep_keys(tb, metrics)))
    return [k for k in keys if k in ta and k in tb] or None


def diff_rows(diffs: list[TableDiff]) -> pd.DataFrame:
    """Every difference as one tidy row (table, change, key, column, a, b, rel_diff): for CSV and CI."""
    rows = []
    for d in diffs:
        for change, frame in (("removed", d.removed), ("added", d.added)):
            for _, row in frame.iterrows():
                rows.append({"table": d.name, "change": change, "key": key_text(row, list(frame.columns))})
        for change, columns in (("removed_column", d.removed_columns), ("added_column", d.added_columns)):
            rows += [{"table": d.name, "change": change, "column": c} for c in columns]
        for _, row in d.changed.iterrows():
            rows.append(
                {
                    "table": d.name,
                    "change": "changed",
                    "key": key_text(row, d.keys),
                    "column": row["column"],
                    "a": row["a"],
                    "b": row["b"],
                    "rel_diff": row["rel_diff"],
                }
            )
    return pd.DataFrame(rows, columns=["table", "change", "key", "column", "a", "b", "rel_diff"])
