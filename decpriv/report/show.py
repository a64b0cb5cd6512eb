"""Terminal output: the headline of a run, ``decpriv list``, ``decpriv show`` and ``decpriv diff``."""

from importlib import resources
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from decpriv.errors import ConfigError
from decpriv.report.diff import diff_paths, diff_rows
from decpriv.report.run_folder import read_status, read_table
from decpriv.report.text import fmt, headline_metrics, markdown_table, print_frame


def print_headline(run: Path, console: Console) -> None:
    """The run's headline metrics as a small table, the attack's one-line verdict, then the folder."""
    meta = read_status(run)
    summary = read_table(run / "summary.csv").iloc[0]
    table = Table(title=f"decpriv run: {meta.get('status', '?')}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    metrics = [key for key in meta.get("metrics", []) if key in summary]
    shown = headline_metrics(metrics)
    for key in shown:
        table.add_row(key, fmt(summary[key]))
    if len(shown) < len(metrics):
        table.caption = f"{len(metrics) - len(shown)} more in summary.csv (decpriv show)"
    console.print(table)
    if isinstance(summary.get("verdict"), str):
        console.print(f"verdict: {summary['verdict']}", highlight=False)
    console.print(f"run folder: [bold]{run}[/]", highlight=False)


def print_job_line(run: Path, line: str, console: Console) -> None:
    """One line per finished sweep job: its swept values, wall time and headline metric."""
    meta = read_status(run)
    summary = read_table(run / "summary.csv").iloc[0]
    metrics = [m for m in meta.get("metrics", []) if m in summary][:1]
    shown = "".join(f"  {m}={fmt(summary[m])}" for m in metrics)
    seconds = meta.get("wall_seconds", {}).get("total", "?")
    console.print(f"{line}[green]{meta.get('status')}[/] in {seconds}s{shown}", highlight=False)


def _first_comment(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").strip()
    return ""


def config_options() -> list[tuple[str, str, str]]:
    """(group, option, one-line description) for every yaml under decpriv/conf."""
    root = resources.files("decpriv") / "conf"
    found = []
    for path in sorted(Path(str(root)).rglob("*.yaml")):
        rel = path.relative_to(Path(str(root)))
        if rel.parent == Path("."):
            continue
        found.append((str(rel.parent), rel.stem, _first_comment(path.read_text())))
    return found


def print_groups(console: Console, only: list[str] | None = None) -> None:
    """Every config group and option (or those of the groups in ``only``), one line each."""
    table = Table(title="decpriv config groups (choose with group=option)")
    for column in ("group", "option", "description"):
        table.add_column(column)
    last = None
    for group, option, text in config_options():
        if only and group not in only:
            continue
        table.add_row(group if group != last else "", option, escape(text))  # [slurm] is text, not markup
        last = group
    console.print(table)


def _sweep_columns(run: Path, table: pd.DataFrame) -> pd.DataFrame:
    """A sweep's summary for reading: job, status, the swept keys, then the headline metrics (those that
    differ between jobs first), leaving out the config and the statistics' details.

    The swept keys come from multirun.yaml (else the config columns that vary), the metric names from the
    jobs' run.json files: the jobs' summary.csv files are not read again (the sweep's own holds them all)."""
    from decpriv.report.aggregate import metrics_and_keys

    names, keys = metrics_and_keys(run, table)
    headline = headline_metrics(names)
    varying = [m for m in headline if table[m].nunique(dropna=True) > 1]
    front = ["job", "status", *keys, *varying, *[m for m in headline if m not in varying]]
    return table[[c for c in dict.fromkeys(front) if c in table]]


def show_run(run: Path, console: Console, rows: int = 10) -> int:
    if not (run / "run.json").is_file() and not (run / "summary.csv").is_file():
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {run} is not a run or sweep folder (no run.json / summary.csv)."
        )
        return 2
    meta = read_status(run)
    if meta:
        console.print(
            f"[bold]{run}[/]  status={meta.get('status')}  seed={meta.get('seed')}  device={meta.get('device')}  "
            f"wall={meta.get('wall_seconds', {}).get('total', '?')}s",
            highlight=False,
        )
        if meta.get("error"):
            console.print(f"[red]{meta['error']}[/]", highlight=False)
    for file in sorted(run.glob("*.csv"), key=lambda f: (f.stem != "summary", f.stem)):
        frame = read_table(file)
        title = f"{file.name} ({len(frame)} rows)"
        if file.stem == "summary" and len(frame) == 1:
            keys = headline_metrics(meta.get("metrics") or list(frame.columns))
            verdict = frame["verdict"].iloc[0] if "verdict" in frame else None
            columns = len(frame.columns)
            frame = frame[[*[c for c in ("status",) if c in frame], *[k for k in keys if k in frame]]]
            frame = frame.T.reset_index()
            frame.columns = ["metric", "value"]
            title = f"{file.name} (headline; {columns} columns in the file)"
            print_frame(frame, title, console, len(frame))
            if isinstance(verdict, str):
                console.print(f"verdict: {verdict}", highlight=False)
            continue
        elif file.stem == "summary" and "job" in frame:
            frame = _sweep_columns(run, frame)
            title = f"{file.name} ({len(frame)} jobs; all columns: decpriv report {run})"
        print_frame(frame, title, console, rows, more=f"{file.name}")
    pictures = sorted(p.relative_to(run) for p in run.rglob("*.png"))
    if pictures:
        console.print("pictures: " + ", ".join(map(str, pictures)), highlight=False)
    return 0


def print_diff(a: Path, b: Path, rtol: float, atol: float, console: Console, form: str = "table") -> int:
    """Print the differences (``form``: rich ``table``, ``csv`` or ``markdown``); 0 equal, 1 differ, 2 bad path."""
    try:
        diffs = diff_paths(a, b, rtol, atol)
    except (FileNotFoundError, ConfigError) as error:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {error}", highlight=False)
        return 2
    differ = [d for d in diffs if not d.equal]
    if form != "table":
        rows = diff_rows(differ)
        if form == "csv":
            print(rows.to_csv(index=False, float_format="%.10g", lineterminator="\n"), end="")
        else:
            print(markdown_table(rows) if len(rows) else f"equal within rtol={rtol} atol={atol}")
        return 1 if differ else 0
    for d in differ:
        console.print(f"[bold]{d.name}[/]  (rows keyed on {', '.join(d.keys) or 'table'})", highlight=False)
        for label, frame, colour in (("only in A", d.removed, "red"), ("only in B", d.added, "green")):
            if not frame.empty:
                console.print(
                    f"  [{colour}]{label}:[/] "
                    + "; ".join(
                        ", ".join(f"{k}={v}" for k, v in zip(frame.columns, r, strict=True))
                        for r in frame.itertuples(index=False)
                    ),
                    highlight=False,
                )
        if d.removed_columns or d.added_columns:
            console.print(
                f"  columns only in A: {d.removed_columns}  only in B: {d.added_columns}", highlight=False
            )
        if not d.changed.empty:
            table = Table(show_header=True)
            for column in d.changed.columns:
                table.add_column(str(column))
            for _, row in d.changed.iterrows():
                # metric changes beyond tolerance are what a reader looks for; config changes explain them
                style = "bold yellow" if row["column"] in d.metrics else "cyan"
                table.add_row(*[fmt(v) for v in row], style=style)
            console.print(table)
    if not differ:
        console.print(f"equal within rtol={rtol} atol={atol}: {len(diffs)} table(s)", highlight=False)
        return 0
    return 1
