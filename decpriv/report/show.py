"""Terminal output: the headline of a run, ``decpriv list``, ``decpriv show`` and ``decpriv diff``."""

import inspect
import json
import math
import textwrap
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from decpriv.errors import ConfigError
from decpriv.report import headline
from decpriv.report.convergence import convergence_note
from decpriv.report.diff import diff_paths, diff_rows
from decpriv.report.guarantee import guarantee_line
from decpriv.report.ledger import has_plan
from decpriv.report.run_folder import holds_orphan_run, read_intact, read_status, read_summary, read_table
from decpriv.report.sweep import collect
from decpriv.report.text import fmt, markdown_table, print_frame, shown_path, without_details
from decpriv.stderr import print_error


def headline_rows(meta: dict, summary: pd.Series) -> pd.DataFrame:
    """metric | value | baseline | beats | against: the attack's declared headline (each beside its
    no-attack baseline and whether it beats it), then the training metrics the run measured."""
    rows = []
    for entry in headline.of_run(meta, summary.to_dict()):
        base = headline.baseline_value(entry, summary)
        won = headline.beats(entry, summary.get(entry["metric"]), base)
        mark = {True: "yes", False: "no"}.get(won, "")
        row = [entry["metric"], summary.get(entry["metric"]), base, mark, entry.get("against", "")]
        if not rows or row[1:3] != rows[-1][1:3]:  # one image: its median PSNR is its mean, said once
            rows.append(row)
    named = {r[0] for r in rows}
    # training read after one round (an inversion of the first gradient) says nothing: left to the summary
    trained = not meta.get("headline") or summary.get("protocol.rounds", 2) != 1
    # an accountant's guarantee beside an attack's finding (an audit's is in its own currency already);
    # accounting: exact or bound
    guarantee = () if any("epsilon" in name for name in named) else ("epsilon",)
    extra = (*guarantee, "accounting", *(headline.TRAINING if trained else ()))
    rows += [[m, summary[m], None, "", ""] for m in extra if m in summary and m not in named]
    return pd.DataFrame(rows, columns=["metric", "value", "baseline", "beats", "against"])


def verb_of(meta: dict, summary: pd.Series) -> str:
    """How the headline stands to its baseline when better: "beats", an audit's "within", "below"."""
    return next(iter(headline.of_run(meta, summary.to_dict())), {}).get("verb", "beats")


def baselines_line(rows: pd.DataFrame) -> str | None:
    """``baseline: 97.5% of shuffled membership (higher is better)``: what the baseline column holds."""
    said = dict.fromkeys(
        a for a, b in zip(rows["against"], rows["baseline"], strict=True) if a and b is not None
    )
    return "baseline: " + "; ".join(said) if said else None


def print_headline(run: Path, console: Console) -> None:
    """The attack's headline beside its baselines, the training metrics, the verdict, a line when the
    model has not converged, the pictures, then the folder."""
    meta = read_status(run)
    summary = read_summary(run)
    rows = headline_rows(meta, summary)
    table = Table(title=f"decpriv run: {meta.get('status', '?')}", show_header=True)
    for column in ("metric", "value", "baseline", verb_of(meta, summary)):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in rows.itertuples(index=False):
        colour = {"yes": "green", "no": "red"}.get(row.beats, "default")
        table.add_row(row.metric, fmt(row.value), fmt(row.baseline), f"[{colour}]{row.beats}[/]")
    metrics = [m for m in meta.get("metrics", []) if m in summary]
    more = (
        f"{len(metrics) - len(rows)} more in summary.csv (decpriv show)" if len(metrics) > len(rows) else None
    )
    console.print(table)
    for line in [more, baselines_line(rows), *run_notes(run, summary)]:
        if line:
            console.print(line, highlight=False)
    console.print(f"run folder: [bold]{shown_path(run)}[/]", highlight=False)


def run_notes(run: Path, summary: pd.Series, pictures: bool = True) -> list[str]:
    """The declared oracle's mark, the formal guarantee, the verdict, a line when the model has not
    converged, and (``pictures``) the pictures, at most four named, the attack's first."""
    lines = [line for line in [guarantee_line(summary)] if line]
    lines += [f"verdict: {summary['verdict']}"] if isinstance(summary.get("verdict"), str) else []
    if summary.get("attack_oracle") in (True, "True", "true"):  # decpriv run and show say it
        lines.insert(0, f"[yellow]{headline.ORACLE_NOTE}[/]")
    if summary.get("attack_seal") == "process":
        lines.insert(0, f"[yellow]{headline.PROCESS_SEAL_NOTE}[/]")
    history = run / "history.csv"
    note = convergence_note(read_table(history)) if history.is_file() else None
    lines += [f"[yellow]{note}[/]"] if note else []
    found = [str(p) for p in _pictures(run)] if pictures else []
    attack_first = sorted(found, key=lambda p: p.endswith("training.png"))
    if found:
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        lines.append("pictures: " + ", ".join(attack_first[:4]) + more)
    return lines


def _pictures(run: Path) -> list[Path]:
    """The PNGs under ``run`` (relative), not those of ``decpriv report``."""
    return sorted(p.relative_to(run) for p in run.rglob("*.png") if "report" not in p.relative_to(run).parts)


def print_job_line(run: Path, line: str, console: Console) -> None:
    """One line per finished sweep job: its swept values, wall time and the attack's headline."""
    meta = read_status(run)
    summary = read_summary(run)
    first = headline.of_run(meta, summary.to_dict())[:1]
    shown = "".join(f"  {h['metric']}={headline.label(h, summary)}" for h in first)
    seconds = meta.get("wall_seconds", {}).get("total")
    took = f"{seconds:.1f}" if isinstance(seconds, int | float) else "?"
    console.print(f"{line}[green]{meta.get('status')}[/] in {took} s{shown}", highlight=False, soft_wrap=True)


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
        if rel.parent == Path(".") or rel.parent == Path("hydra/job_logging"):  # not a user's choice
            continue
        found.append((str(rel.parent), rel.stem, _first_comment(path.read_text())))
    return [*found, SUBMITIT_LOCAL]


# Hydra's submitit plugin ships this launcher config itself (decpriv's slurm.yaml extends its sibling)
SUBMITIT_LOCAL = (
    "hydra/launcher",
    "submitit_local",
    "Sweep jobs as local processes through submitit, the Slurm launcher's engine without a cluster "
    "(make slurm, or pip install -e '.[slurm]')",
)


def default_options() -> dict[str, str]:
    """The option each group starts from (config.yaml's defaults list; the attack D-SGD runs)."""
    base = OmegaConf.load(resources.files("decpriv") / "conf" / "config.yaml")
    found = {}
    for entry in OmegaConf.to_container(base, resolve=False).get("defaults", []):
        if isinstance(entry, dict):
            for key, option in entry.items():
                found[str(key).split()[-1]] = option
    protocol = found.get("protocol")
    return {
        group: str(option).replace("${protocol}", str(protocol))
        for group, option in found.items()
        if isinstance(option, str) and not group.startswith("hydra")
    }


def _overview(rows: list[tuple[str, str, str]], width: int) -> list[str]:
    """Each group on a line of its own with its options packed after it (wrapped under a hanging indent),
    ``*`` marking the option the default run uses: every choice on a screen or two. The descriptions are
    ``decpriv list GROUP``'s."""
    defaults = default_options()
    groups = list(dict.fromkeys(g for g, _, _ in rows))
    pad = max(map(len, groups)) + 2
    lines = ["decpriv config groups (group=option; * the default run's)"]
    for group in groups:
        names = [("*" if defaults.get(group) == o else "") + o for g, o, _ in rows if g == group]
        wrapped = textwrap.wrap("  ".join(names), max(width - pad, 20), break_on_hyphens=False)
        lines += [(group if i == 0 else "").ljust(pad) + part for i, part in enumerate(wrapped)]
    return [*lines, "each option's description and keys: decpriv list GROUP [GROUP ...]"]


def group_table(only: list[str] | None = None) -> str:
    """The README's table of config groups, generated from the yamls: each group's options, the default
    run's marked ``*``; the presets counted (their own table says what each reproduces)."""
    rows = [row for row in config_options() if not only or row[0] in only]
    defaults = default_options()
    lines = ["| group | options (`*`: the default run's) |", "|---|---|"]
    for group in dict.fromkeys(g for g, _, _ in rows):
        names = [("*" if defaults.get(group) == o else "") + o for g, o, _ in rows if g == group]
        if group == "experiment":
            cell = f"{len(names)} presets (`decpriv list experiment`; the papers' table below)"
        else:
            cell = ", ".join(names)
        lines.append(f"| `{group}` | {cell} |")
    return "\n".join(lines)


def _option_node(root: Path, group: str, option: str) -> DictConfig:
    """An option's yaml with the same-group options its ``defaults`` list extends (admm extends pdmm)."""
    own = OmegaConf.load(root / group / f"{option}.yaml")
    bases = [d for d in own.pop("defaults", []) if isinstance(d, str) and d != "_self_"]
    return OmegaConf.merge(*(_option_node(root, group, b) for b in bases), own)


def _yaml(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def option_keys(group: str, option: str) -> list[str]:
    """``key=value  declaration`` for each key an option's yaml sets: the value it starts from and what the
    key accepts, read from its ``_target_``'s signature (``float > 0``, ``'sum' | 'mean'``)."""
    from hydra.utils import get_object

    from decpriv.config.types import declared, describe

    node = _option_node(Path(str(resources.files("decpriv") / "conf")), group, option)
    try:
        target = get_object(node["_target_"])
    except Exception:  # an option without a _target_ of its own, or one that does not import here
        return []
    params = inspect.signature(target).parameters
    hints = declared(target.__init__ if inspect.isclass(target) else target)
    values = OmegaConf.to_container(node)
    return [
        f"{key}={_yaml(values[key])}  {describe(hints.get(key, params[key].annotation))}"
        for key in values
        if key in params and not str(key).startswith("_")
    ]


def print_groups(console: Console, only: list[str] | None = None) -> None:
    """Every config group with its options (the default marked); with ``only`` (``decpriv list GROUP``),
    those groups' options with their whole descriptions and their keys, each with its value and what it
    accepts."""
    rows = [row for row in config_options() if not only or row[0] in only]
    if not rows:
        return
    if not only:
        for line in _overview(rows, console.width):
            console.print(escape(line), highlight=False, soft_wrap=True)
        return
    defaults = default_options()
    rows = [(g, ("*" if defaults.get(g) == o else "") + o, t) for g, o, t in rows]
    widths = [max(len(row[i]) for row in rows) for i in (0, 1)]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for name, width in zip(("group", "option"), widths, strict=True):
        table.add_column(name, no_wrap=True, min_width=width)
    table.add_column("description", overflow="fold")
    last = None
    from decpriv.config.validation import PLUGIN_GROUPS  # hydra's import, for `decpriv list GROUP` only

    for group, option, text in rows:
        keys = option_keys(group, option.lstrip("*")) if group in PLUGIN_GROUPS else []
        text = "\n".join([text, *(f"  {k}" for k in keys)])
        table.add_row(group if group != last else "", option, escape(text))  # [slurm] is text, not markup
        last = group
    console.print(table)


def _sweep_columns(run: Path, table: pd.DataFrame) -> pd.DataFrame:
    """A sweep's summary for reading: job, status, the attack's headline (each cell beside its baseline:
    ``0.5675 vs 0.5422 ✓``), the swept keys, the training metrics, then the other metrics that differ
    between jobs; no config columns.

    The swept keys come from multirun.yaml (else the config columns that vary), the metric names and the
    headline from the jobs' run.json files: the jobs' summary.csv files are not read again."""
    from decpriv.report.aggregate import metrics_and_keys, sweep_headline

    names, keys = metrics_and_keys(run, table)
    table = table.copy()
    lead = []
    for entry in sweep_headline(run, table):
        table[entry["metric"]] = [headline.label(entry, row) for _, row in table.iterrows()]
        lead.append(entry["metric"])
    training = [m for m in headline.TRAINING if m in names]
    rest = [m for m in without_details(names) if table[m].nunique(dropna=True) > 1]
    front = ["job", "status", *lead, *keys, *training, *rest]
    return table[[c for c in dict.fromkeys(front) if c in table]]


def failed_lines(table: pd.DataFrame, most: int = 5) -> list[str]:
    """``job 2 failed: <first line of its error>`` for the jobs that did not complete (the first few)."""
    failed = table[table["status"] != "completed"]
    errors = failed["error"] if "error" in failed else pd.Series("", index=failed.index)
    lines = [
        f"job {job} {status}: {_first_line(error, status)}"
        for job, status, error in zip(failed["job"], failed["status"], errors, strict=True)
    ]
    return lines[:most] + ([f"... and {len(lines) - most} more (summary.csv)"] if len(lines) > most else [])


def _first_line(error: object, status: str) -> str:
    """An error's first line, without the status it repeats (``damaged: ...``)."""
    if not isinstance(error, str) or not error:
        return "no error recorded"
    return error.splitlines()[0].removeprefix(f"{status}: ")


def _pictures_line(run: Path, sweep: bool) -> str | None:
    """The run's pictures; for a sweep, each picture name once with the number of jobs that drew it."""
    found = _pictures(run)
    if not found:
        return None
    if not sweep:
        return "pictures: " + ", ".join(map(str, found))
    counts: dict[str, int] = {}
    for path in found:
        name = str(Path(*path.parts[1:])) if len(path.parts) > 1 else str(path)
        counts[name] = counts.get(name, 0) + 1
    return "pictures in the job folders (<job>/...): " + ", ".join(f"{n} ({c})" for n, c in counts.items())


def show_run(run: Path, console: Console, rows: int = 10) -> int:
    if (
        not any(p.is_file() for p in (run / "run.json", run / "summary.csv"))
        and not has_plan(run)
        and not holds_orphan_run(run)
    ):
        print_error(f"{run} is not a run or sweep folder (no run.json / summary.csv).")
        return 2
    meta = read_intact(run) if not has_plan(run) else read_status(run)
    if meta:
        console.print(
            f"[bold]{run}[/]  status={meta.get('status')}  seed={meta.get('seed')}  device={meta.get('device')}  "
            f"wall={meta.get('wall_seconds', {}).get('total', '?')}s"
            + "".join(
                f"  {k.rsplit('.', 1)[-1]}={v['ran']} ({v['requested']})"
                for k, v in meta.get("settled", {}).items()
            ),
            highlight=False,
        )
        if meta.get("error"):
            console.print(f"[red]{meta['error']}[/]", highlight=False)
    sweep = False
    files = set(run.glob("*.csv")) | (
        {run / "summary.csv"} if has_plan(run) else set()
    )  # a sweep's: its ledger
    for file in sorted(files, key=lambda f: (f.stem != "summary", f.stem)):
        ledger = file.stem == "summary" and has_plan(run)
        frame = collect(run) if ledger else read_table(file)  # a sweep: its ledger, read now
        title = f"{file.name} ({len(frame)} rows)"
        if file.stem == "summary" and meta and "job" not in frame:  # a run's: its one row, or refused
            summary = read_summary(run)
            shown = headline_rows(meta, summary)
            title = f"{file.name} (headline; {len(frame.columns)} columns in the file)"
            shown = shown.rename(columns={"beats": verb_of(meta, summary)})
            print_frame(shown.drop(columns="against"), title, console, len(shown))
            line = baselines_line(shown)
            if line:
                console.print(line, highlight=False)
            for line in run_notes(run, summary, pictures=False):
                console.print(line, highlight=False)
            continue
        elif file.stem == "summary" and "job" in frame:
            sweep = True
            errors = failed_lines(frame)
            frame = _sweep_columns(run, frame)
            # the folder alone on the first line: a title never breaks inside its path
            console.print(f"sweep: [bold]{run}[/]", highlight=False, soft_wrap=True)
            title = f"{file.name} ({len(frame)} jobs; every column: decpriv report SWEEP)"
            print_frame(frame, title, console, rows, more=f"{file.name}")
            for line in errors:
                console.print(line, highlight=False)
            continue
        print_frame(frame, title, console, rows, more=f"{file.name}")
    pictures = _pictures_line(run, sweep)
    if pictures:
        console.print(pictures, highlight=False)
    return 0


def print_diff(
    a: Path, b: Path, rtol: float, atol: float, console: Console, form: str = "table", brief: bool = False
) -> int:
    """Print the differences (``form``: ``table`` for reading, ``csv`` or ``markdown`` for CI); 0 equal,
    1 differ, 2 bad path. A table opens with the config that differs, then the metrics (the attack's
    headline first), then one line per other table, then a one-line verdict (``brief``: only that)."""
    try:
        for target in (a, b):
            intact(target)
        diffs = diff_paths(a, b, rtol, atol)
    except (FileNotFoundError, ConfigError) as error:
        print_error(str(error))
        return 2
    differ = [d for d in diffs if not d.equal]
    if form != "table":
        rows = diff_rows(differ)
        if form == "csv":
            print(rows.to_csv(index=False, float_format="%.10g", lineterminator="\n"), end="")
        else:
            bound = bound_line(diffs, False) if not len(rows) else None
            print(markdown_table(rows) if len(rows) else bound or f"equal within rtol={rtol} atol={atol}")
        return 1 if differ else 0
    summary = next((d for d in differ if d.name == "summary"), None)
    config, metrics = _summary_parts(summary, _headline_names(a)) if summary is not None else ({}, {})
    if not brief:
        console.print(f"A: [bold]{a}[/]\nB: [bold]{b}[/]", highlight=False)
        lead = headline_pair(a, b)
        if len(lead):
            print_frame(lead, "headline (value vs its baseline)", console, rows=len(lead))
        for title, frame in (("config that differs", config), ("metrics that differ", metrics)):
            if len(frame):
                print_frame(frame, f"{title} ({len(frame)})", console, rows=20, more="--format csv")
        for d in differ:
            line = _table_line(d, cells=d.name != "summary")
            if not line.endswith(": "):
                # one part a line when the whole does not fit: a row's keys are never cut mid-word
                parts = [line] if len(line) <= console.width else line.split("; ")
                console.print("\n  ".join(parts), highlight=False)
    note = bound_line(diffs, bool(differ))  # the verdict itself when only the bound took cells in
    if differ or note is None:
        console.print(_verdict(differ, config, metrics, rtol, atol, len(diffs)), highlight=False)
    if note:
        console.print(note, highlight=False)
    return 1 if differ else 0


def intact(target: Path) -> None:
    """Refuse (ConfigError) a run folder that is damaged or lost its run.json, or a sweep holding a
    damaged job: what is compared or shown is what the runs wrote."""
    from decpriv.report.ledger import refuse_untrusted_jobs

    if target.is_dir() and has_plan(target):
        refuse_untrusted_jobs(target, collect(target))
    elif target.is_dir() and ((target / "run.json").is_file() or holds_orphan_run(target)):
        read_intact(target)


def bound_line(diffs: list, differ: bool) -> str | None:
    """Two runs whose noise is not the seed's (CKKS: SEAL draws it) compare within the bound they
    recorded: said under the verdict, with the bound and how many cells it took in."""
    bounds = [d.bound for d in diffs if d.bound is not None]
    if not bounds:
        return None
    bound, within = bounds[0], sum(len(d.within) for d in diffs)
    cells = f"{within} cell(s) differ by less ({bound.why}; times and the measured noise always vary)"
    if differ:
        return (
            f"differs beyond the {bound.name} bound {bound.rtol:.2g} (relative) in the cells above; {cells}"
        )
    return f"same within the {bound.name} bound {bound.rtol:.2g} (relative, run.json's repeatable_within): {cells}"


def headline_pair(a: Path, b: Path) -> pd.DataFrame:
    """Two runs' headlines side by side, each value beside its own baseline (``0.8287 vs 0.63 ✓``):
    whether the finding changed, before the cells that differ. Empty for sweeps."""
    if not ((a / "run.json").is_file() and (b / "run.json").is_file()):
        return pd.DataFrame()
    rows = []
    summary_a, summary_b = (read_summary(x) for x in (a, b))
    for entry in headline.of_run(read_status(a), summary_a.to_dict()):
        cells = [headline.label(entry, s) if entry["metric"] in s else "" for s in (summary_a, summary_b)]
        rows.append({"metric": entry["metric"], "A": cells[0], "B": cells[1]})
    return pd.DataFrame(rows)


def _headline_names(target: Path) -> list[str]:
    """The attack's headline metrics of a run (or of a sweep's first job): shown first among metrics."""
    folder = (
        target if (target / "run.json").is_file() else next(iter(sorted(target.glob("*/run.json"))), None)
    )
    if folder is None or target.is_file():
        return []
    folder = folder if folder.is_dir() else folder.parent
    return [entry["metric"] for entry in headline.of_run(read_status(folder))]


def _summary_parts(d, first: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summary's changed cells split in two tables: config keys and metrics (headline first), each
    ``[job key,] name, A, B`` (metrics with their relative difference)."""
    changed = d.changed.copy()
    if changed.empty:  # nothing paired (a live run has no summary yet): no columns to split either
        changed = pd.DataFrame(columns=[*d.keys, "column", "a", "b", "rel_diff"])
    keyed = d.keys != ["row"]
    if keyed:
        changed.insert(0, "jobs", [";".join(f"{k}={r[k]}" for k in d.keys) for _, r in changed.iterrows()])
    lead = ["jobs"] if keyed else []
    is_metric = changed["column"].isin(d.metrics)
    config = changed[~is_metric].rename(columns={"column": "key", "a": "A", "b": "B"})
    config = config.assign(A=config["A"].map(_exact), B=config["B"].map(_exact))
    metrics = changed[is_metric].rename(columns={"column": "metric", "a": "A", "b": "B"})
    rank = {name: i for i, name in enumerate(first)}
    metrics = metrics.sort_values("metric", key=lambda c: c.map(rank).fillna(len(rank)), kind="stable")
    return config[[*lead, "key", "A", "B"]], metrics[[*lead, "metric", "A", "B", "rel_diff"]]


def _exact(value: object) -> str:
    """A config value as typed, every digit kept: seed 4294967296 against 4294967297, lr 0.5 against
    0.5000001 (six significant digits showed each pair as one value)."""
    if isinstance(value, float | np.floating) and math.isfinite(value):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return fmt(value)


def _table_line(d, cells: bool = True) -> str:
    """One line for a table: how much differs (``cells``: the changed cells too; details: --format
    csv), the rows only one side has named by their keys (up to five)."""
    parts = []
    if cells and not d.changed.empty:
        columns = list(dict.fromkeys(d.changed["column"]))
        named = ", ".join(columns[:3]) + (f" and {len(columns) - 3} more" if len(columns) > 3 else "")
        parts.append(f"{len(d.changed)} cell(s) differ in {named}")
    for what, frame in (("only in A", d.removed), ("only in B", d.added)):
        if "table" in frame:
            parts.append(f"the table is {what}")
        elif 0 < len(frame) <= 5:
            named = [
                ", ".join(f"{k}={v}" for k, v in zip(frame.columns, r, strict=True))
                for r in frame.itertuples(index=False)
            ]
            parts.append(f"{what}: " + "; ".join(named))
        elif len(frame):
            parts.append(f"{len(frame)} row(s) {what}")
    for what, columns in (("only in A", d.removed_columns), ("only in B", d.added_columns)):
        if columns:
            parts.append(f"column(s) {what}: {', '.join(columns)}")
    return f"{d.name}.csv: " + "; ".join(parts)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _verdict(
    differ: list, config: pd.DataFrame, metrics: pd.DataFrame, rtol: float, atol: float, n: int
) -> str:
    """``differ: 2 config key(s), 31 metric(s), 4 other table(s)`` or ``equal within ...``."""
    if not differ:
        return f"equal within rtol={rtol} atol={atol}: {n} table(s)"
    others = [d for d in differ if d.name != "summary"]
    summary = next((d for d in differ if d.name == "summary"), None)
    parts = [_count(len(config), "config key")] if len(config) else []
    if summary is not None and (len(summary.added) or len(summary.removed)):
        parts.append(f"{_count(len(summary.removed), 'job')} only in A, {len(summary.added)} only in B")
    if len(metrics):
        first = metrics.iloc[0]  # the attack's headline when it changed
        a, b = (f"{v:.4g}" if isinstance(v, float) else fmt(v) for v in (first["A"], first["B"]))
        parts.append(f"{_count(len(metrics), 'metric')} ({first['metric']} {a} -> {b})")
    parts += [_count(len(others), "table")] if others else []  # besides summary.csv
    return "differ: " + ", ".join(parts or ["the tables"])
