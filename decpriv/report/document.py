"""``decpriv report SWEEP|RUN``: the aggregated table, default pictures, and a Markdown + HTML page.

Everything lands in ``<folder>/report/``: ``aggregate.csv`` (tidy: configuration, metric, mean, std,
count, failed), ``plots/*.png``, ``report.md`` (pictures linked) and ``report.html`` (pictures embedded
as base64, so the one file opens in a browser without a server or the folder around it). When the config
states a preset's ``claim``, both pages open with it beside the measured numbers (decpriv/report/claims.py).
"""

import base64
import errno
import html
import numbers
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from decpriv.errors import ConfigError
from decpriv.report import headline
from decpriv.report.aggregate import (
    SEED,
    Sweep,
    aggregate,
    headline_cells,
    headline_over_seeds,
    load_sweep,
    varying_metrics,
    wide,
)
from decpriv.report.claims import ClaimSection, claim_html, claim_markdown, claim_section, section_images
from decpriv.report.convergence import convergence_note
from decpriv.report.ledger import refuse_untrusted_jobs
from decpriv.report.plots import TRAINING_PANELS
from decpriv.report.run_folder import (
    RunFolder,
    holds_orphan_run,
    read_intact,
    read_summary,
    read_table,
    write_atomic,
    write_csv,
)
from decpriv.report.sweep_plots import MAX_DEFAULT_PLOTS, plot
from decpriv.report.text import fmt, markdown_table

REPORT_DIR = "report"


@dataclass
class Document:
    title: str
    facts: list[str]
    tables: list[tuple[str, pd.DataFrame]]  # (caption, table shown on the page)
    data: dict[str, pd.DataFrame]  # CSV files written next to the page
    figures: dict[str, Figure] = field(default_factory=dict)  # new pictures, keyed plots/<name>.png
    pictures: list[Path] = field(default_factory=list)  # pictures the folder already holds
    claim: ClaimSection | None = None  # the paper's claim beside the measured numbers: opens the page


def sweep_document(path: Path) -> Document:
    sweep = load_sweep(path)
    refuse_untrusted_jobs(path, sweep.table)  # a damaged job is not counted as a failure quietly
    stats = aggregate(sweep)
    shown = varying_metrics(sweep) or sweep.metrics[:MAX_DEFAULT_PLOTS]
    counts = sweep.table["status"].value_counts()
    facts = [
        f"{len(sweep.table)} jobs: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
        "swept keys: " + (", ".join(sweep.keys) or "none"),
    ]
    from decpriv.report.sweep_plots import default_plots

    facts += constants_fact(sweep)
    failed = sweep.table[sweep.table["status"] != "completed"]
    caption = "mean ± std over seeds; a headline beside its baseline's mean: the jobs that beat it"
    tables = [(caption, headline_led(sweep, wide(stats, sweep.group_keys, shown, sweep.flags)))]
    if sweep.headline and SEED in sweep.keys:  # a claim over seeds: on how many it holds, and the median
        over_seeds = readable_over_seeds(headline_over_seeds(sweep))
        tables.insert(0, ("headline over seeds (beats: k of m seeds beat their baseline)", over_seeds))
    if not failed.empty:
        error = failed["error"].fillna("").astype(str).str.split("\n").str[0] if "error" in failed else ""
        tables.append(
            ("jobs that did not complete", failed[["job", "status", *sweep.keys]].assign(error=error))
        )
    return Document(
        title=f"decpriv sweep {path.name}",
        facts=facts,
        tables=tables,
        data={"aggregate": stats},
        figures=default_plots(sweep),
    )


def readable_over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """``beats`` as ``k of m``, the median baseline as ``baseline``, four significant digits: the whole
    finding fits 80 columns (aggregate.csv keeps every digit)."""
    numbers = ["median", "baseline_median", "min", "max"]
    table = table.assign(
        beats=[f"{k} of {m}" for k, m in zip(table["beats"], table["seeds"], strict=True)],
        **{c: [float(f"{v:.4g}") for v in table[c]] for c in numbers},
    )
    return table.drop(columns="seeds").rename(columns={"baseline_median": "baseline"})


def headline_led(sweep: Sweep, table: pd.DataFrame) -> pd.DataFrame:
    """The aggregated table led by the headline cells (value vs baseline: jobs that beat it), then the
    swept keys, the seed count and the other metrics; a headline's baseline has no column of its own."""
    cells = headline_cells(sweep)
    if cells.empty or not sweep.headline:
        return table
    keys = sweep.group_keys
    lead = [e["metric"] for e in sweep.headline]
    bases = {e["baseline"] for e in sweep.headline if isinstance(e["baseline"], str)}
    rest = table.drop(columns=[c for c in table.columns if c in lead or c in bases])
    merged = cells.merge(rest, on=keys, how="right") if keys else pd.concat([cells, rest], axis=1)
    front = [*lead, *keys, "n"]
    return merged[[*front, *[c for c in merged.columns if c not in front]]].fillna("")


def constants_fact(sweep: Sweep) -> list[str]:
    """The metrics that every completed job measured alike, stated once instead of a column each."""
    done = sweep.completed
    same = [m for m in sweep.metrics if len(done) > 1 and done[m].nunique(dropna=False) == 1]
    if not same:
        return []
    shown = ", ".join(f"{m} {fmt(done[m].iloc[0])}" for m in same[:4])
    more = f" and {len(same) - 4} more (aggregate.csv)" if len(same) > 4 else ""
    return [f"the same in every completed job: {shown}{more}"]


def run_document(path: Path) -> Document:
    meta = read_intact(path)
    if meta.get("status") == "running":  # its tables are written at its end
        raise ConfigError(
            f"{path}: the run is still running (process {meta.get('pid')} on {meta.get('host')}) and writes "
            "its tables when it ends; report it then"
        )
    if not (path / "summary.csv").is_file():
        raise ConfigError(
            f"{path}: the run is {meta.get('status')} ({meta.get('error') or 'no error recorded'}) and wrote "
            "no summary.csv; rerun it (with hydra.run.dir and resume=true to reuse the folder)"
        )
    summary = read_summary(path)
    metrics = [m for m in meta.get("metrics", []) if m in summary]
    values = [summary[m] for m in metrics]
    # numbers stay numbers in aggregate.csv; flags count as 0/1 and words (verdict, method) get their own column
    numeric = [
        int(v) if isinstance(v, bool | np.bool_) else v if isinstance(v, numbers.Real) else None
        for v in values
    ]
    words = [None if n is not None else v for v, n in zip(values, numeric, strict=True)]
    data = pd.DataFrame({"metric": metrics, "value": pd.array(numeric, dtype="Float64"), "text": words})
    facts = [
        f"status: {meta.get('status', '?')}",
        f"seed: {meta.get('seed')}, config digest: {meta.get('config_digest')}",
    ]
    if meta.get("error"):
        facts.append(f"error: {meta['error']}")
    if meta.get("attack_oracle"):
        facts.append(headline.ORACLE_NOTE)
    if meta.get("seal") == "process":
        facts.append(headline.PROCESS_SEAL_NOTE)
    if isinstance(summary.get("verdict"), str):
        facts.append(f"verdict: {summary['verdict']}")
    history_file = path / "history.csv"
    history = read_table(history_file) if history_file.is_file() else None
    note = convergence_note(history) if history is not None else None
    facts += [note] if note else []
    # the rest of the summary row is the flattened config (group choices, then dotted keys): what ran
    settings = [k for k in summary.index if k not in metrics and k not in ("status", "error")]
    config = pd.DataFrame({"key": settings, "value": [fmt(summary[k]) or "null" for k in settings]})
    pictures = sorted(p for p in path.rglob("*.png") if REPORT_DIR not in p.relative_to(path).parts)
    return Document(
        title=f"decpriv run {path.name}",
        facts=facts,
        tables=[
            ("headline", headline_table(meta, summary)),
            ("summary", _shown(metrics, values)),
            ("config", config),
        ],
        data={"aggregate": data},
        figures=_history_plots(history) if history is not None else {},
        pictures=pictures,
    )


def headline_table(meta: dict, summary: pd.Series) -> pd.DataFrame:
    """The attack's headline beside its baselines, then the training metrics (as decpriv run prints)."""
    from decpriv.report.show import headline_rows

    rows = headline_rows(meta, summary)
    cells = {c: [fmt(v) for v in rows[c]] for c in ("metric", "value", "baseline", "beats", "against")}
    return pd.DataFrame(cells)


def _shown(metrics: list[str], values: list) -> pd.DataFrame:
    """Every metric with its value as text, numbers and words alike (the verdict too: it is a value)."""
    return pd.DataFrame({"metric": metrics, "value": [fmt(v) for v in values]})


def _history_plots(history: pd.DataFrame) -> dict[str, Figure]:
    """``plots/history_<column>.png`` for the history columns that vary and that the run's own
    training.png does not already draw (loss, accuracy, consensus distance)."""
    drawn = {column for _, columns in TRAINING_PANELS for column in columns}
    columns = [
        c
        for c in history.columns
        if c not in ("round", "step", "node") and c not in drawn and pd.api.types.is_numeric_dtype(history[c])
    ]
    varying = [c for c in columns if history[c].nunique() > 1][:MAX_DEFAULT_PLOTS]
    return {f"plots/history_{c}.png": plot(history, "round", c, logx=False) for c in varying}


def _page_markdown(doc: Document, images: list[tuple[str, Path]], claim_images=()) -> str:
    parts = [f"# {doc.title}", ""]
    if doc.claim is not None:
        parts += [claim_markdown(doc.claim, list(claim_images), markdown_table), ""]
    parts += [*[f"- {fact}" for fact in doc.facts], ""]
    for caption, table in doc.tables:
        parts += [f"## {caption}", "", markdown_table(table), ""]
    if images:
        parts += ["## pictures", ""]
        parts += [f"![{name}]({link.as_posix()})" + "\n" for name, link in images]
    return "\n".join(parts)


def _figure_html(name: str, link: Path, out: Path) -> str:
    data = base64.b64encode((out / link).read_bytes()).decode()
    return (
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(name)}</figcaption></figure>"
    )


def _table_html(table: pd.DataFrame) -> str:
    return table.to_html(index=False, na_rep="", float_format=fmt, border=0)


def _page_html(doc: Document, images: list[tuple[str, Path]], out: Path, claim_images=()) -> str:
    body = [f"<h1>{html.escape(doc.title)}</h1>"]
    if doc.claim is not None:
        body.append(
            claim_html(doc.claim, list(claim_images), _table_html, lambda n, k: _figure_html(n, k, out))
        )
    body.append("<ul>")
    body += [f"<li>{html.escape(fact)}</li>" for fact in doc.facts]
    body.append("</ul>")
    for caption, table in doc.tables:
        body.append(f"<h2>{html.escape(caption)}</h2>")
        body.append(_table_html(table))
    if images:
        body.append("<h2>pictures</h2>")
    body += [_figure_html(name, link, out) for name, link in images]
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
        "img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(doc.title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def write_document(doc: Document, out: Path) -> Path:
    """Write CSVs, pictures, report.md and report.html under ``out``; returns ``out``."""
    folder = RunFolder(out)
    for name, table in doc.data.items():
        write_csv(out / f"{name}.csv", table)
    for relative, figure in doc.figures.items():
        folder.write_figure(relative, figure)
    images = [(Path(r).stem, Path(r)) for r in doc.figures]
    images += [(p.stem, Path("..") / p.relative_to(out.parent)) for p in doc.pictures]
    claim_images = []
    if doc.claim is not None:
        for relative, figure in doc.claim.figures.items():
            folder.write_figure(relative, figure)
        claim_images = section_images(doc.claim, out)
    write_atomic(out / "report.md", _page_markdown(doc, images, claim_images))
    write_atomic(out / "report.html", _page_html(doc, images, out, claim_images))
    return out


def report(target: Path) -> tuple[Document, Path]:
    """Build and write the report of a sweep folder (has job folders) or a run folder (has run.json)."""
    target = Path(target)
    claim = claim_section(target)  # before anything is written: a bad claim is refused in one sentence
    if (target / "run.json").is_file() or holds_orphan_run(target):
        doc = run_document(target)
    elif any(target.glob("*/run.json")):
        doc = sweep_document(target)
    else:
        raise FileNotFoundError(f"{target}: not a run folder (run.json) nor a sweep folder (*/run.json)")
    if claim is not None:
        doc.claim = claim
        doc.pictures = [p for p in doc.pictures if p not in claim.pictures]  # shown once, in the claim
    return doc, write_whole(doc, target / REPORT_DIR)


def write_whole(doc: Document, out: Path) -> Path:
    """:func:`write_document` into a staging folder beside ``out``, then put in place by renames: a write
    that fails (a full disk) leaves the earlier report, or none, never half of one."""
    if out.exists() and not out.is_dir():  # someone's file: never replaced
        raise NotADirectoryError(errno.ENOTDIR, "a file is where the report folder goes", str(out))
    staging, earlier = (out.with_name(f".{out.name}.{os.getpid()}.{end}") for end in ("tmp", "old"))
    try:
        write_document(doc, staging)
        if out.exists():
            os.replace(out, earlier)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if earlier.exists() and not out.exists():  # the new one never arrived: the earlier stays
            os.replace(earlier, out)
        shutil.rmtree(earlier, ignore_errors=True)
    return out
