"""``decpriv plot SWEEP|RUN x=KEY y=METRIC ...``: a metric against a key, mean and std over seeds."""

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from decpriv.errors import ConfigError, bad_value

PLOT_ARGUMENTS = ("x", "y", "hue", "table", "logx", "logy", "out")


def plot_arguments(pairs: list[str]) -> dict[str, str]:
    """The ``x=KEY`` style arguments; an unknown or malformed one is refused in one sentence."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in PLOT_ARGUMENTS:
            raise bad_value(
                key or pair, value, "is not an argument of decpriv plot", f"use {', '.join(PLOT_ARGUMENTS)}"
            )
        found[key] = value
    return found


def switch(key: str, value: str | None) -> bool | None:
    """``logx=true``: a switch, None when not given."""
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise bad_value(key, value, "is a switch", f"use {key}=true or {key}=false")
    return value.lower() == "true"


def _plotted_table(target: Path, name: str | None, y: str) -> tuple[object, object, list[str]]:
    """The table to plot (a sweep's completed jobs, or a run's NAME.csv), the headline's baseline and the
    sweep's swept keys."""
    from decpriv.report.aggregate import headline_first, load_sweep
    from decpriv.report.ledger import has_plan, refuse_untrusted_jobs
    from decpriv.report.run_folder import holds_orphan_run, read_intact, read_table

    if name is None and not (target / "run.json").is_file() and not holds_orphan_run(target):
        sweep = load_sweep(target)
        refuse_untrusted_jobs(target, sweep.table)  # a damaged job is not dropped quietly
        done = sweep.completed
        # the headline among the first columns a refusal of an unknown y= lists
        order = dict.fromkeys(["job", *sweep.keys, *headline_first(list(done.columns), sweep.headline)])
        return done[list(order)], sweep.headline_of(y), list(sweep.keys)
    if (target / "run.json").is_file() or holds_orphan_run(target):
        read_intact(target)
    elif has_plan(target):  # a sweep's own table (table=summary): its jobs as they stand
        refuse_untrusted_jobs(target, load_sweep(target).table)
    file = target / f"{name or 'history'}.csv"
    if not file.is_file():
        raise ConfigError(f"table={name}: {file} does not exist; choose a CSV table of {target}")
    table = read_table(file)
    return (table[table["status"] == "completed"] if "status" in table else table), None, []


def _refuse_pooled(table: Any, swept: list[str], x: str, hue: list[str]) -> None:
    """A swept key (not the seed) that is neither x nor a hue would pool its values' jobs into one
    mean +- std point, drawn as if they were repeats (epsilon 1 and 4 as one point's spread)."""
    for key in swept:
        if key in (x, *hue) or key == "seed" or key not in table or table[key].astype(str).nunique() < 2:
            continue
        values = ", ".join(sorted(table[key].astype(str).unique())[:4])
        raise bad_value(
            "x",
            x,
            f"the sweep's {key} varies ({values}) and is neither x nor hue, so its jobs would pool into one "
            "mean +- std as if repeats",
            f"add hue={key}, or plot x={key}",
        )


def plot_command(ns: argparse.Namespace, console: Console) -> int:
    from decpriv.report.run_folder import RunFolder
    from decpriv.report.sweep_plots import plot

    if ns.target is None or "=" in ns.target:
        raise ConfigError("decpriv plot needs a sweep or run folder first: decpriv plot SWEEP x=KEY y=METRIC")
    target = Path(ns.target)
    args = plot_arguments(ns.arguments)
    for needed in ("x", "y"):
        if needed not in args:
            raise ConfigError(f"decpriv plot needs {needed}=COLUMN (e.g. x=protocol.lr y=test_accuracy)")
    table, baseline, swept = _plotted_table(target, args.get("table"), args["y"])
    hue = [h for h in args.get("hue", "").split(",") if h]
    logx, logy = switch("logx", args.get("logx")), bool(switch("logy", args.get("logy")))
    figure = plot(table, args["x"], args["y"], hue, logx, logy, baseline)  # its columns checked first
    _refuse_pooled(table, swept, args["x"], hue)
    # plots/, not report/plots/: decpriv report draws its own pictures there under the same names
    default = f"plots/{args['y']}_vs_{args['x']}" + (f"_by_{'_'.join(hue)}" if hue else "") + ".png"
    out = Path(args["out"]) if "out" in args else target / default
    RunFolder(out.parent).write_figure(out.name, figure)
    console.print(f"plot: [bold]{out}[/]", highlight=False, soft_wrap=True)  # a path whole, to copy
    return 0
