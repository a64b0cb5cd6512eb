"""The ``decpriv`` command: run | list | show | diff | report | plot | runs.

``decpriv run`` hands its arguments to Hydra (overrides, ``-m`` sweeps, ``--cfg``, ``--info``,
``hydra.run.dir=...``) after checking every job's config, so bad input fails in one sentence with exit
status 2 before any job starts.
"""

import argparse
import difflib
import gc
import os
import re
import signal
import sys
import warnings
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape

from decpriv.errors import ConfigError

console = Console()
JOBS_ENV = "DECPRIV_SWEEP_JOBS"
SWEPT_ENV = "DECPRIV_SWEPT_KEYS"
USAGE = """usage: decpriv COMMAND [...]

  run [OVERRIDES] [-m]     run the pipeline (Hydra overrides; -m sweeps: a=1,2 b=x,y)
  list                     config groups and their options
  show RUN                 a run's status, summary and tables
  diff A B [--rtol R]      compare two runs, sweeps or CSV tables (exit 1 when they differ)
       [--format csv|markdown]
  report SWEEP|RUN         aggregated table (mean, std, count over seeds), plots, report.md/.html
  plot SWEEP x=KEY y=METRIC [hue=KEY[,KEY]] [table=NAME] [logx=true] [logy=true] [out=FILE]
  runs [key=value ...]     index of the runs under ./runs (--root DIR, --format csv|markdown);
                           also `decpriv list runs`

Examples:  decpriv run topology=torus protocol.rounds=50
           decpriv run -m topology=ring,complete seed=0,1 hydra/launcher=parallel
           decpriv run -m topology=ring,complete seed=0,1 hydra.sweep.dir=sw resume=true
           decpriv report sw && decpriv plot sw x=protocol.lr y=test_accuracy hue=topology"""


PLOT_HELP = """usage: decpriv plot SWEEP|RUN x=KEY y=METRIC [hue=KEY[,KEY]] [table=NAME] [logx=true|false]
                    [logy=true|false] [out=FILE]

A metric against a key, mean and std over seeds. A sweep's attack headline metric is drawn with its
baseline (the 95% band of a shuffled null, or the baseline's line); text x (topology) as categories,
integer x (seed) with integer ticks. table=NAME plots a run's NAME.csv (default history).

  x, y      columns of the sweep's summary (or of the table)
  hue       one line per value (several keys: one per combination)
  logx/logy log axes (logx defaults to true for positive x spanning two decades)
  out       the PNG to write (default SWEEP/report/plots/<y>_vs_<x>.png)

Example: decpriv plot runs/multirun/sw x=topology y=mia_received_auc hue=seed"""


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def _hydra_job(cfg: DictConfig) -> None:
    # Parallel launchers pickle this function by value: it must not close over module state (locks).
    # The pipeline (torch) is imported here, not at the top, so report/plot/runs/diff start quickly.
    from decpriv import experiment
    from decpriv.report.resume import already_completed, take_resume
    from decpriv.scheduler import stop_on_sigterm

    runtime = HydraConfig.get()
    out = Path(runtime.runtime.output_dir)
    choices = {k: v for k, v in runtime.runtime.choices.items() if not k.startswith("hydra")}
    multirun = runtime.mode == RunMode.MULTIRUN
    line = job_line(runtime.job.num, list(runtime.overrides.task)) if multirun else ""
    terminal = sys.stdout.isatty()
    resume = take_resume(cfg)
    digest = experiment.config_digest(experiment.flatten_config(cfg, choices))
    if resume and already_completed(out, digest):
        if terminal or not multirun:
            Console().print(f"{line}[dim]skipped: already completed in {out}[/]", highlight=False)
        return
    prebuilt = None if multirun else experiment.take_prebuilt(cfg)  # the precheck's build of this config
    try:
        with stop_on_sigterm():  # a job a scheduler cancels (scancel: SIGTERM in its own process)
            experiment.run(cfg, out, choices, sys.stderr.isatty() and not multirun, prebuilt)
    except Exception as error:
        if not multirun:
            experiment.error_exit(error, bool(cfg.get("debug")))
        Console(stderr=True, soft_wrap=True).print(
            f"[red]job {runtime.job.num} ({out}) failed:[/] {type(error).__name__}: {escape(str(error))}",
            highlight=False,
        )
        return
    from decpriv.report.show import print_headline, print_job_line

    if not multirun:
        print_headline(out, Console())
    else:  # one line per job, in a terminal or a log
        print_job_line(out, line, Console())


def job_line(num: int, task: list[str]) -> str:
    """``job 2 of 8  topology=ring seed=1  ``: the job's swept values (the sweep names them in the environment).

    Jobs are numbered from 0, as Hydra numbers them and names their folders (``<sweep>/2``)."""
    swept = [k for k in os.environ.get(SWEPT_ENV, "").split(",") if k]
    shown = [o for o in task if o.split("=", 1)[0].lstrip("+~") in swept] or task
    total = os.environ.get(JOBS_ENV, "?")
    return f"job {num} of {total}  {' '.join(shown)}  "


def _did_you_mean(word: str, known: list[str]) -> str:
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"did you mean {near[0]}?" if near else ""


def _explain_composition(error: Exception, overrides: list[str]) -> str:
    """Hydra's first line, with a did-you-mean from the known keys or options when one is close."""
    from decpriv.api import compose_config

    text = str(error).strip()
    first = text.splitlines()[0]
    hint = ""
    missing = re.search(r"Could not find '(.+)/([^/']+)'", text)
    override = re.search(r"Could not override '([^']+)'", text)
    nulled = [o.split("=", 1)[0] for o in overrides if re.fullmatch(r"[\w/]+=null", o)]
    if "Got NoneType" in first and nulled:
        hint = f"to drop a config group write ~{nulled[0]}, not {nulled[0]}=null"
    elif "submitit" in first:
        hint = "the slurm launcher needs Hydra's submitit plugin: make slurm, or pip install -e '.[slurm]'"
    elif missing:
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.M)
        hint = _did_you_mean(missing.group(2), options)
    elif override:
        key = override.group(1)
        parent, _, leaf = key.rpartition(".")
        others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
        try:
            cfg = compose_config(others)[0]
            node = OmegaConf.select(cfg, parent) if parent else cfg
            known = [str(k) for k in node] if node is not None and hasattr(node, "keys") else []
        except Exception:
            known = []
        found = _did_you_mean(leaf, known)
        hint = found.replace("mean ", f"mean {parent}.") if parent and found else found
    return f"{first} ({hint or '`decpriv list` shows the groups and options'})"


def _compose_or_refuse(overrides: list[str]) -> tuple[DictConfig, dict, DictConfig]:
    from decpriv.api import compose_job

    try:
        return compose_job(overrides)
    except Exception as error:  # Hydra's composition errors: unknown option, bad override syntax
        raise ConfigError(_explain_composition(error, overrides)) from None


def _check(
    cfg: DictConfig,
    choices: dict,
    overrides: list[str],
    multirun: bool,
    keep: bool = False,
    job: list[str] = (),
) -> None:
    """One job's whole build, no training (``keep``: for the run of a single job to reuse; ``job``: the
    job's own overrides, whose config digest a resumed sweep reads to submit only what must run)."""
    from decpriv.experiment import config_digest, flatten_config, precheck
    from decpriv.report.resume import check_fixed_folder, take_resume
    from decpriv.scheduler import remember_digest
    from decpriv.validation import check_choices, check_unread

    if take_resume(cfg):
        check_fixed_folder(overrides, multirun)
        remember_digest(list(job), config_digest(flatten_config(cfg, choices)))
    check_choices(cfg, choices)
    check_unread(cfg, overrides)
    precheck(cfg, choices, keep=keep)


def _check_in_worker(job: list[str], overrides: list[str]) -> str | None:
    """A sweep job's refusal as one sentence, or None: composed and built in a launcher worker."""
    try:
        cfg, choices, _ = _compose_or_refuse(job)
        _check(cfg, choices, overrides, True)
    except ConfigError as error:
        return str(error)
    finally:
        _freeze_imports()
    return None


def _freeze_imports() -> None:
    """Move the objects alive now (torch's, pandas', matplotlib's modules, once imported) out of the
    garbage collector's reach: its full collections, and the last one at exit, stop walking them
    (a process that imported torch takes 0.9 s less to exit; a joblib worker, to be shut down)."""
    if not gc.get_freeze_count():
        gc.collect()  # the garbage of the build just checked is not kept alive
        gc.freeze()


def _check_in_workers(jobs: list[list[str]], overrides: list[str], launcher: DictConfig) -> None:
    """Check every job in the joblib launcher's own worker processes, with its own options: joblib then
    reuses those workers for the jobs, which start with torch imported, and the parent neither imports
    torch nor composes and builds the jobs one after another. Still all before any job starts."""
    from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg
    from joblib import Parallel, delayed

    options = {k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items() if k != "_target_"}
    options["backend"] = "loky"  # as the launcher sets it
    process_joblib_cfg(options)
    refusals = Parallel(**options)(delayed(_check_in_worker)(job, overrides) for job in jobs)
    first = next((refusal for refusal in refusals if refusal is not None), None)
    if first is not None:
        raise ConfigError(first)


def _precheck(overrides: list[str], multirun: bool) -> tuple[int, list[str], DictConfig, bool, bool]:
    """Compose and check every job of the (possibly swept) command line before any job runs.

    Returns the number of jobs, the swept keys (for the per-job progress line), the first job's ``hydra``
    node (its output folder), whether every job was checked (not so for a preset's own sweep) and whether
    it resumes (``resume=true``). The job count is in the environment before any worker starts."""
    from decpriv.report.sweep import expand

    jobs = [overrides]
    if multirun:
        try:
            jobs = expand(overrides)
        except Exception as error:  # Hydra's override grammar
            raise ConfigError(str(error).strip().splitlines()[0]) from None
    cfg, choices, hydra = _compose_or_refuse(jobs[0])
    resuming = cfg.get("resume") is True
    count, swept, params = 1, [], {}
    if multirun:
        _check_launcher(hydra.launcher)
        # a preset's own sweep (hydra.sweeper.params) is counted, not prechecked: Fig. 2 alone has 1200 jobs
        from decpriv.report.sweep import sweep_plan, sweeper_params

        params = sweeper_params(hydra)
        count, swept = sweep_plan(overrides, params)
    # Environment variables reach the jobs of every launcher (joblib workers, Slurm via submitit).
    os.environ[JOBS_ENV] = str(count)
    os.environ[SWEPT_ENV] = ",".join(swept)
    if len(jobs) > 1 and str(hydra.launcher.get("_target_", "")).endswith(".JoblibLauncher"):
        _check_in_workers(jobs, overrides, hydra.launcher)
    else:
        _check(cfg, choices, overrides, multirun, keep=not multirun, job=jobs[0])
        for job in jobs[1:]:
            _check(*_compose_or_refuse(job)[:2], overrides, multirun, job=job)
    return count, swept, hydra, not params, resuming


def _check_launcher(launcher: DictConfig) -> None:
    """The launcher's own options that would fail only once the sweep started, with an exception's text."""
    from decpriv.errors import bad

    target = str(launcher.get("_target_", ""))
    if target.endswith("submitit_launcher.LocalLauncher") and "partition" in launcher:
        raise bad(
            "hydra.launcher._target_",
            target,
            "the slurm launcher's options (partition, array_parallelism ...) are Slurm's, not the local "
            "executor's",
            "use hydra/launcher=submitit_local for submitit's local executor (no cluster needed)",
        )
    n_jobs = launcher.get("n_jobs")
    if str(launcher.get("_target_", "")).endswith(".JoblibLauncher") and (
        not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0
    ):
        raise bad(
            "hydra.launcher.n_jobs",
            n_jobs,
            "is the number of parallel jobs: -1 for one a core, or a positive count",
            "use hydra.launcher.n_jobs=-1 or e.g. 2",
        )


def _on_submitit(hydra_cfg: DictConfig) -> bool:
    """Whether the sweep runs through a submitit launcher: only then is submitit imported (its logger
    binds a handler to the stdout of the moment at import)."""
    return "submitit" in str(hydra_cfg.launcher.get("_target_", ""))


@contextmanager
def _sweep_checked():
    """Hydra's basic sweeper composes every job once more before launching the batch
    (``validate_batch_is_legal``: a quarter second a job, one after another in the parent); the precheck
    has just composed and built each of them, so the sweep skips that second composition."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    BasicSweeper.validate_batch_is_legal = lambda self, batch: None
    try:
        yield
    finally:
        del BasicSweeper.validate_batch_is_legal


def _output_folder(
    overrides: list[str], multirun: bool, hydra_cfg: DictConfig, resuming: bool
) -> tuple[str | None, Path]:
    """The run (sweep) folder, created before Hydra starts: a new one, made atomically with a ``-2``,
    ``-3`` ... suffix when the timestamped name exists, so two runs never share a folder. A folder the user
    names (hydra.run.dir=...) must be new or empty, and is claimed atomically (two runs started together
    into it: one is refused), unless ``resuming`` it. Returns the override to add (None for a folder the
    user named) and the folder. ``hydra_cfg``: the first job's ``hydra`` node."""
    from decpriv.errors import bad
    from decpriv.report.run_folder import claim_folder, claim_named_folder

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"{key}=")), None)
    if given is not None and not given.strip("'\" "):
        raise bad(
            key,
            given,
            "an empty folder name would write into the current folder",
            f"name a folder or drop {key}",
        )
    path = Path(str(hydra_cfg.sweep.dir if multirun else hydra_cfg.run.dir))
    try:
        if given is not None and resuming:
            path.mkdir(parents=True, exist_ok=True)  # resume: the earlier run's folder, by design
            return None, path
        if given is not None:
            return None, claim_named_folder(path)
        claimed = claim_folder(path)
        return f'{key}="{claimed}"', claimed
    except ConfigError as error:
        raise bad(
            key,
            str(path),
            f"a run folder holds one run, and {error}",
            f"choose a new folder{', or add resume=true to finish that sweep' if multirun else ''}",
        ) from None
    except OSError as error:
        raise bad(
            key,
            str(path),
            f"the output folder cannot be created ({error.strerror or error})",
            f"run from a writable folder or set {key}=A_WRITABLE_FOLDER",
        ) from None


def _sweep_summary(sweep: Path, jobs: int) -> None:
    """An interrupted sweep still gets its summary.csv: finished jobs, and the one that was stopped."""
    from decpriv.report.sweep import write_summary

    write_summary(sweep, jobs)


def _run(args: list[str]) -> int:
    # Slurm's scancel and time limit send SIGTERM: stop as Ctrl-C does, so run.json says failed (interrupted).
    from decpriv.scheduler import stop_on_sigterm

    with stop_on_sigterm():
        return _run_command(args)


def _stop_code(stop: KeyboardInterrupt) -> tuple[str, int]:
    name = stop.args[0] if stop.args and isinstance(stop.args[0], str) else "SIGINT"
    return name, 128 + int(getattr(signal, name, signal.SIGINT))


def _run_command(args: list[str]) -> int:
    from hydra._internal.utils import get_args_parser

    parsed = get_args_parser().parse_args(args)
    inspecting = parsed.cfg or parsed.info or parsed.help or parsed.hydra_help or parsed.shell_completion
    folder, path, checked, resuming, hydra_cfg = None, None, False, False, None
    if not inspecting:
        try:
            multirun = bool(parsed.multirun)
            count, swept, hydra_cfg, checked, resuming = _precheck(list(parsed.overrides), multirun)
            folder, path = _output_folder(list(parsed.overrides), multirun, hydra_cfg, resuming)
        except ConfigError as error:
            Console(stderr=True, soft_wrap=True).print(
                f"[bold red]error:[/] {escape(str(error))}", highlight=False
            )
            return 2
    sys.argv = ["decpriv run", *args, *([folder] if folder else [])]
    from decpriv.report.sweep import SweepSummary
    from decpriv.scheduler import submitit_sweep

    SweepSummary.failed = 0
    SweepSummary.folder = None
    began = datetime.now().replace(microsecond=0)
    try:
        with (
            _sweep_checked() if parsed.multirun and checked else nullcontext(),
            submitit_sweep(path, resuming)
            if hydra_cfg is not None and _on_submitit(hydra_cfg)
            else nullcontext(),
        ):
            _hydra_job()
    except KeyboardInterrupt as stop:
        name, code = _stop_code(stop)
        where = f" in {path}" if path else ""
        if parsed.multirun and path is not None:
            _sweep_summary(path, count)
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]interrupted[/] by {name}: the run is marked failed (interrupted){where}.",
            highlight=False,
        )
        return code
    if parsed.multirun and SweepSummary.folder is not None:
        from decpriv.report.resume import kept_before

        kept = kept_before(SweepSummary.folder, began, SweepSummary.jobs)
        note = f" ({kept} job(s) kept from earlier runs: resume=true)" if kept else ""
        console.print(f"sweep folder: [bold]{SweepSummary.folder}[/]{note}", highlight=False)
    if parsed.multirun and SweepSummary.failed:
        Console(stderr=True, soft_wrap=True).print(
            f"[red]{SweepSummary.failed} job(s) failed[/] (see the sweep's summary.csv)"
        )
        return 1
    return 0


def _key_values(pairs: list[str], allowed: dict[str, str]) -> dict[str, str]:
    """``x=KEY`` style arguments; unknown keys are refused in one sentence."""
    from decpriv.errors import bad

    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in allowed:
            raise bad(key or pair, value, "is not an argument of decpriv plot", f"use {', '.join(allowed)}")
        found[key] = value
    return found


def _switch(key: str, value: str | None) -> bool | None:
    from decpriv.errors import bad

    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise bad(key, value, "is a switch", f"use {key}=true or {key}=false")
    return value.lower() == "true"


def _plot(rest: list[str]) -> int:

    from decpriv.report.aggregate import load_sweep
    from decpriv.report.run_folder import RunFolder, read_table
    from decpriv.report.sweep_plots import plot

    if rest[:1] in (["-h"], ["--help"]):
        print(PLOT_HELP)
        return 0
    if not rest or "=" in rest[0]:
        raise ConfigError("decpriv plot needs a sweep or run folder first: decpriv plot SWEEP x=KEY y=METRIC")
    target = Path(rest[0])
    args = _key_values(
        rest[1:],
        {"x": "", "y": "", "hue": "", "table": "", "logx": "", "logy": "", "out": ""},
    )
    for needed in ("x", "y"):
        if needed not in args:
            raise ConfigError(f"decpriv plot needs {needed}=COLUMN (e.g. x=protocol.lr y=test_accuracy)")
    name, baseline = args.get("table"), None
    if name is None and not (target / "run.json").is_file():
        sweep = load_sweep(target)
        table, baseline = sweep.completed, sweep.headline_of(args["y"])
    else:
        file = target / f"{name or 'history'}.csv"
        if not file.is_file():
            raise ConfigError(f"table={name}: {file} does not exist; choose a CSV table of {target}")
        table = read_table(file)
        if "status" in table:
            table = table[table["status"] == "completed"]
    hue = [h for h in args.get("hue", "").split(",") if h]
    figure = plot(
        table,
        args["x"],
        args["y"],
        hue,
        _switch("logx", args.get("logx")),
        bool(_switch("logy", args.get("logy"))),
        baseline,
    )
    default = f"report/plots/{args['y']}_vs_{args['x']}" + (f"_by_{'_'.join(hue)}" if hue else "") + ".png"
    out = Path(args["out"]) if "out" in args else target / default
    RunFolder(out.parent).write_figure(out.name, figure)
    console.print(f"plot: [bold]{out}[/]", highlight=False)
    return 0


def _report(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="decpriv report", description="aggregate, plot and write a report")
    parser.add_argument("target", type=Path, help="a sweep folder (job folders inside) or a run folder")
    ns = parser.parse_args(rest)
    from decpriv.report.document import report
    from decpriv.report.text import print_frame

    doc, out = report(ns.target)
    console.print(f"[bold]{doc.title}[/]", highlight=False)
    for fact in doc.facts:
        console.print(fact, highlight=False)
    for caption, table in doc.tables:
        print_frame(table, caption, console, more="report.md")
    if doc.claim is not None:
        from decpriv.report.claims import print_claim

        print_claim(doc.claim, console, out)
    console.print(
        f"report: [bold]{out / 'report.html'}[/] (also report.md, aggregate.csv, {len(doc.figures)} plot(s))",
        highlight=False,
    )
    return 0


def _runs(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="decpriv runs", description="index of past runs, filtered by key=value"
    )
    parser.add_argument("filters", nargs="*", help="key=value: a summary column or run.json field")
    parser.add_argument("--root", type=Path, default=Path("runs"), help="folder to search (default ./runs)")
    parser.add_argument("--format", choices=("table", "csv", "markdown"), default="table")
    ns = parser.parse_args(rest)
    from decpriv.report.runs_index import for_terminal, index, parse_filters
    from decpriv.report.text import markdown_table, print_frame

    table = index(ns.root, parse_filters(ns.filters))
    if ns.format == "csv":
        print(table.to_csv(index=False, float_format="%.10g", lineterminator="\n"), end="")
    elif ns.format == "markdown":
        print(markdown_table(table))
    else:
        print_frame(for_terminal(table), f"{len(table)} run(s) under {ns.root}", console, rows=len(table))
    return 0


def _list(rest: list[str]) -> int:
    from decpriv.report.show import config_options, print_groups

    if rest[:1] in (["-h"], ["--help"]):
        print(
            "usage: decpriv list [GROUP ...]   config groups and their options; decpriv list runs: past runs"
        )
        return 0
    groups = sorted({group for group, _, _ in config_options()})
    unknown = [g for g in rest if g not in groups]
    if unknown:
        hint = _did_you_mean(unknown[0], [*groups, "runs"]) or "groups: " + ", ".join(groups)
        raise ConfigError(f"{unknown[0]}: no such config group; {hint}")
    print_groups(console, rest)
    return 0


def _show(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="decpriv show")
    parser.add_argument("run", type=Path)
    parser.add_argument("--rows", type=int, default=10, help="rows shown per table")
    ns = parser.parse_args(rest)
    if ns.rows < 0:
        from decpriv.errors import bad

        raise bad("--rows", ns.rows, "is a number of rows", "give 0 or more (0: the titles alone)")
    from decpriv.report.show import show_run

    return show_run(ns.run, console, ns.rows)


def _diff(rest: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="decpriv diff", description="exit 0 when equal within tolerance, 1 when not"
    )
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument(
        "--rtol", type=float, default=1e-9, help="relative tolerance for numbers (default 1e-9)"
    )
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance for numbers (default 0)")
    parser.add_argument(
        "--format", choices=("table", "csv", "markdown"), default="table", help="csv/markdown for CI"
    )
    parser.add_argument("--brief", action="store_true", help="print only the one-line verdict")
    ns = parser.parse_args(rest)
    for key in ("rtol", "atol"):
        if not getattr(ns, key) >= 0:  # a negative tolerance would call equal numbers different
            from decpriv.errors import bad

            raise bad(f"--{key}", getattr(ns, key), "is a tolerance", "give 0 or more")
    from decpriv.report.show import print_diff

    return print_diff(ns.a, ns.b, ns.rtol, ns.atol, console, ns.format, ns.brief)


COMMANDS = {"list": _list, "show": _show, "diff": _diff, "report": _report, "plot": _plot, "runs": _runs}


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _one_line_warnings() -> None:
    """Warnings print as ``warning: <message>`` on stderr, each distinct message once."""
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message).strip()
        if text not in seen:
            seen.add(text)
            Console(stderr=True, soft_wrap=True).print(
                f"[yellow]warning:[/] {escape(text)}", highlight=False, markup=True
            )

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "list" and rest[:1] == ["runs"]:
        command, rest = "runs", rest[1:]
    if command != "run" and command not in COMMANDS:
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] unknown command {command!r}; use run, list, show, diff, report, plot or runs.",
            highlight=False,
        )
        return 2
    shown = warnings.showwarning
    _one_line_warnings()
    try:
        return _run(rest) if command == "run" else COMMANDS[command](rest)
    except ConfigError as error:
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(str(error))}", highlight=False
        )
        return 2
    except BrokenPipeError:
        raise  # output piped into `head`: entry() stops quietly
    except OSError as error:
        if error.errno is None:  # decpriv's own "no such run folder"
            Console(stderr=True, soft_wrap=True).print(
                f"[bold red]error:[/] {escape(str(error))}", highlight=False
            )
            return 2
        # a folder that cannot be written: read-only file system, a path under a file, full disk
        where = f"{error.filename}: " if error.filename else ""
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {where}{error.strerror or error}; "
            "check that the folder is writable and the disk not full.",
            highlight=False,
        )
        return 1
    except KeyboardInterrupt as stop:
        name, code = _stop_code(stop)
        Console(stderr=True, soft_wrap=True).print(f"[bold red]interrupted[/] by {name}.", highlight=False)
        return code
    except Exception as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {type(error).__name__}: {escape(_first_line(error))} "
            "(HYDRA_FULL_ERROR=1 shows the traceback)",
            highlight=False,
        )
        return 1
    finally:
        warnings.showwarning = shown


def entry() -> None:
    try:
        code = main()
        gc.freeze()  # exit without a last collection over every object of torch & co. (1 s)
        sys.exit(code)
    except BrokenPipeError:
        # Output piped into `head`: stop quietly, as the Python docs advise for this signal.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
