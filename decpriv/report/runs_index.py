"""``decpriv runs``: an index of the run folders under a root, filtered by ``key=value``.

Every folder holding a run.json counts (single runs and sweep jobs alike). A filter matches a summary.csv
column (``topology=ring``, ``protocol.lr=0.1``) or a run.json field (``status=failed``); numbers compare as
numbers, so ``protocol.lr=0.10`` matches ``0.1``.
"""

import difflib
import warnings
from pathlib import Path

import pandas as pd

from decpriv.errors import ConfigError, bad_value
from decpriv.report import headline
from decpriv.report.run_folder import holds_orphan_run, read_status, read_summary, rerun_fix
from decpriv.report.text import GAP

COLUMNS = [  # the finding first (status, the headline's value beside its baseline): at 80 columns the rest is cut
    "run",
    "status",
    "value",
    "baseline",
    "better",
    "headline",
    "attack",
    "topology",
    "protocol",
    "seconds",
    "started",
    "config_digest",
]


def parse_filters(pairs: list[str]) -> dict[str, str]:
    filters = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise bad_value("filter", pair, "is not key=value", "write e.g. topology=ring status=completed")
        if key in filters and filters[key] != value:  # filters all hold at once: no run has two seeds
            raise bad_value(
                key,
                value,
                f"{key} is filtered twice ({key}={filters[key]} too), and a run has one {key}",
                "give one",
            )
        filters[key] = value
    return filters


def _same(found: object, wanted: str) -> bool:
    try:
        return float(found) == float(wanted)
    except (TypeError, ValueError):
        return str(found) == wanted


def _row(folder: Path) -> dict:
    """A run's index row: what ran (protocol, attack, topology) and the attack's first headline metric
    beside its baseline (decpriv/report/headline.py); a run without an attack, its first training metric."""
    meta = read_status(folder)
    summary = {}
    if meta.get("status") == "damaged":  # listed as damaged, with no headline: said under the table
        warnings.warn(f"{folder}: {meta['error']}; {rerun_fix(folder)}", stacklevel=1)
    elif (folder / "summary.csv").is_file():
        try:
            summary = read_summary(folder).to_dict()
        except ConfigError as error:  # cut or changed: listed, never as a result
            warnings.warn(str(error), stacklevel=1)
            meta = {**meta, "status": "corrupt"}
    first = None  # a run that did not complete has no finding: its status says why
    if meta.get("status") == "completed":
        first = next(iter(headline.of_run(meta, summary or None)), None)
    fields = {**summary, **{k: v for k, v in meta.items() if isinstance(v, str | int | float)}}
    return {
        "run": folder.as_posix(),  # as given to decpriv show: under the root as the user named it
        "protocol": summary.get("protocol", ""),
        "attack": meta.get("attack") or summary.get("attack", ""),  # the attack's name, not its option
        "topology": summary.get("topology", ""),
        "headline": first["metric"] if first else "",
        "value": summary.get(first["metric"]) if first else None,
        "baseline": headline.baseline_value(first, summary) if first else None,
        "better": first["better"] if first else "higher",
        "status": meta.get("status", "unknown"),
        "started": meta.get("started", ""),
        "seconds": (meta.get("wall_seconds") or {}).get("total"),
        "config_digest": meta.get("config_digest", ""),
        "_fields": fields,
    }


def _orphans(root: Path) -> list[Path]:
    """Run folders under ``root`` whose run.json is gone (a table of theirs is there)."""
    found = {f.parent for f in root.rglob("summary.csv")} | {f.parent for f in root.rglob(".hydra")}
    return sorted(folder for folder in found if holds_orphan_run(folder))


def _orphan_row(folder: Path) -> dict:
    """A run folder whose run.json is gone: listed as damaged (never left out without a word)."""
    warnings.warn(f"{folder}: damaged: its run.json is gone; {rerun_fix(folder)}", stacklevel=1)
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        run=folder.as_posix(), status="damaged", value=None, baseline=None, better="higher", seconds=None
    )
    return {**row, "_fields": {"status": "damaged"}}


def index(root: Path | str, filters: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per run folder under ``root`` (oldest first) that matches every filter."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder; point --root at the folder holding the runs")
    rows = []
    for file in root.rglob("run.json"):
        try:
            rows.append(_row(file.parent))
        except ConfigError as error:  # one corrupt folder must not hide the others
            warnings.warn(f"skipped {file.parent}: {error}", stacklevel=1)
    rows += [_orphan_row(folder) for folder in _orphans(root)]
    filters = filters or {}
    known = set().union(*(r["_fields"] for r in rows)) if rows else set()
    for key in filters:
        if rows and key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            fix = f"did you mean {near[0]}?" if near else "filter on a summary.csv column or run.json field"
            raise bad_value(key, filters[key], f"no run under {root} has this key", fix)
    kept = [
        r
        for r in rows
        if all(key in r["_fields"] and _same(r["_fields"][key], value) for key, value in filters.items())
    ]
    table = pd.DataFrame(kept, columns=[*COLUMNS, "_fields"]).drop(columns="_fields")
    return table.sort_values(["started", "run"], kind="stable").reset_index(drop=True)


def for_terminal(
    table: pd.DataFrame, root: Path | str | None = None, width: int | None = None
) -> pd.DataFrame:
    """The index for reading: the headline named beside its value and baseline in one cell
    (``mia_received_auc=0.5675 vs 0.5422 ✓``), third after the run and its status; the runs relative to
    ``root`` and, at ``width`` columns, cut from the left so that run, status and headline always fit."""
    cells = [
        f"{name}={headline.cell({'better': better}, value, base)}" if name else ""
        for name, value, base, better in zip(
            table["headline"], table["value"], table["baseline"], table["better"], strict=True
        )
    ]
    runs = [_relative(run, root) for run in table["run"]]
    if width is not None and runs:
        lead = max(map(len, ["status", *table["status"].astype(str)])) + max(map(len, ["headline", *cells]))
        runs = [_tail(run, max(width - lead - 2 * GAP, 12)) for run in runs]
    reading = table.assign(headline=cells, run=runs).drop(columns=["value", "baseline", "better"])
    return reading[
        ["run", "status", "headline", *[c for c in reading if c not in ("run", "status", "headline")]]
    ]


def _relative(run: str, root: Path | str | None) -> str:
    try:
        return Path(run).relative_to(Path(root)).as_posix() if root is not None else run
    except ValueError:
        return run


def _tail(text: str, room: int) -> str:
    """``text`` cut from the left to ``room`` characters (a run's own folder name is its end)."""
    return text if len(text) <= room else "…" + text[len(text) - room + 1 :]
