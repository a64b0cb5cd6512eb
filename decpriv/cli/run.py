"""``decpriv run``: Hydra's command line (overrides, ``-m`` sweeps, ``--cfg``, ``--info``), every job
checked first, so bad input fails in one sentence with exit status 2 before any job starts or any folder
exists; then Hydra runs the jobs (decpriv's checked sweeper, the chosen launcher) into a claimed folder."""

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from decpriv.cli.precheck import Plan, start_up_done
from decpriv.errors import ConfigError
from decpriv.stderr import print_error, print_stderr

CHECKED_SWEEPER = "CheckedSweeper"


@contextmanager
def hydra_command_line(args: list[str]) -> Iterator[None]:
    """``hydra.main`` reads its command line from ``sys.argv`` and nowhere else (its other entry,
    ``run_hydra``, is private): set it for the call alone, then put back what was there."""
    saved = sys.argv
    sys.argv = ["decpriv run", *args]
    try:
        yield
    finally:
        sys.argv = saved


def stop_exit_status(stop: KeyboardInterrupt) -> tuple[str, int]:
    """The signal that stopped the run (SIGINT unless named) and the shell's exit status for it."""
    from decpriv.scheduler import stopping_signal

    name = stopping_signal(stop)
    return name, 128 + int(getattr(signal, name, signal.SIGINT))


def _sweeper_overrides(plan: Plan, sweep: Path | None) -> list[str]:
    """What decpriv's sweeper is told: the jobs were all checked (no second composition), and which jobs a
    resumed sweep keeps. Another sweeper (hydra/sweeper=basic) is told nothing."""
    if not str(plan.hydra.sweeper.get("_target_", "")).endswith(CHECKED_SWEEPER):
        return []
    told = ["hydra.sweeper.prechecked=true"] if plan.every_job_checked else []
    kept = plan.kept_jobs(sweep) if plan.resuming and sweep is not None else []
    return told + ([f"hydra.sweeper.kept_jobs=[{','.join(map(str, kept))}]"] if kept else [])


def _run_hydra(args: list[str], prebuilt: object) -> None:
    import hydra

    from decpriv.cli.job import HydraJob

    job = hydra.main(config_path="pkg://decpriv.conf", config_name="config", version_base="1.3")(
        HydraJob(prebuilt)
    )
    with hydra_command_line(args):
        job()


def _ledger_table(sweep: Path, count: int):
    """The sweep's table as its ledger has it (a sweep of another sweeper: its folders'), None without."""
    from decpriv.report.ledger import read_ledger, render
    from decpriv.report.sweep import write_summary

    ledger = read_ledger(sweep)
    if ledger is not None:
        return render(sweep, ledger)
    return write_summary(sweep, count) if sweep.is_dir() else None


def _not_completed(sweep: Path, table) -> str:
    """``2 of 4 jobs did not complete: job 1 (seed=1) cancelled, job 3 (seed=3) never started``."""
    from decpriv.report.ledger import read_ledger, unfinished

    jobs = unfinished(table, read_ledger(sweep))
    shown = ", ".join(jobs[:8]) + (f" and {len(jobs) - 8} more" if len(jobs) > 8 else "")
    return f"{len(jobs)} of {len(table)} jobs did not complete: {shown}"


def _sweep_outcome(sweep: Path, plan: Plan, began: datetime, console: Console) -> int:
    """The sweep's folder and the jobs that did not complete, from its ledger: 1 when any did not."""
    from decpriv.report.aggregate import across_jobs
    from decpriv.report.ledger import read_ledger
    from decpriv.report.resume import kept_before
    from decpriv.report.text import shown_path

    table = _ledger_table(sweep, plan.count)
    if table is None or table.empty:
        return 0
    kept = kept_before(sweep, began, plan.count)
    note = f" ({kept} job(s) kept from earlier runs: resume=true)" if kept else ""
    console.print(f"sweep folder: [bold]{shown_path(sweep)}[/]{note}", highlight=False)
    line = across_jobs(sweep, table)  # the finding over the jobs, not only where it lies
    if line:
        console.print(line, highlight=False)
    failed = (read_ledger(sweep) or {}).get("failed")
    if failed:
        print_stderr(
            f"[bold red]error:[/] the sweep stopped: {escape(failed)}; free space or make {sweep} writable, "
            "then resume=true reruns the jobs that did not complete."
        )
    if (table["status"] != "completed").any():
        print_stderr(
            f"[red]{escape(_not_completed(sweep, table))}[/] (summary.csv, decpriv show {sweep}); "
            f"resume=true reruns them."
        )
        return 1
    return 1 if failed else 0


def _interrupted(stop: KeyboardInterrupt, multirun: bool, folder: Path | None, count: int) -> int:
    """A stopped run says so; a stopped sweep names the jobs it did not complete (its ledger has them)."""
    name, status = stop_exit_status(stop)
    if not multirun or folder is None:
        where = f" in {folder}" if folder else ""
        print_stderr(f"[bold red]interrupted[/] by {name}: the run is marked failed (interrupted){where}.")
        return status
    table = _ledger_table(folder, count)
    if table is not None and not table.empty and (table["status"] == "completed").all():
        print_stderr(
            f"[bold red]interrupted[/] by {name} after every job had ended: all {len(table)} jobs of the sweep "
            f"in {folder} completed; nothing to rerun (decpriv show {folder})."
        )
        return status
    said = _not_completed(folder, table) if table is not None and not table.empty else "no job ran"
    print_stderr(
        f"[bold red]interrupted[/] by {name}: the sweep in {folder} stopped; {escape(said)}; "
        "resume=true reruns them."
    )
    return status


def _per_job(args: list[str], overrides: list[str]) -> list[str]:
    """``args`` with each override replaced by the form Hydra's sweep base config composes with."""
    from decpriv.report.grid import per_job_keys

    replaced = dict(zip(overrides, per_job_keys(overrides), strict=True))
    return [replaced.get(arg, arg) for arg in args]


def _note_unswept(plan: Plan) -> None:
    """A preset that declares a sweep (``hydra.sweeper.params``), run without -m: said in one line."""
    from decpriv.report.grid import sweep_plan, sweeper_params

    params = sweeper_params(plan.hydra)
    if params:
        count, keys = sweep_plan([], params)
        print_stderr(
            f"note: this config declares a sweep of {count} jobs over {', '.join(keys)} "
            "(hydra.sweeper.params); without -m it runs once, with none of those values; add -m to sweep."
        )


def _already_completed(plan: Plan, folder: Path) -> bool:
    """A resumed run whose folder holds a completed run of this config: said, and Hydra is not called,
    since Hydra writes the job's ``.hydra`` files (config, overrides) before any task runs; a skip touches
    nothing."""
    from decpriv.report.resume import already_completed

    digest = (plan.digests or [None])[0]
    if not plan.resuming or digest is None or not already_completed(folder, digest):
        return False
    Console().print(f"[dim]skipped: already completed in {folder}[/]", highlight=False)
    return True


def run_command(ns: argparse.Namespace, args: list[str], console: Console) -> int:
    """``args``: the command line after ``run``, handed to Hydra as typed (``ns``: the same, parsed)."""
    from decpriv.scheduler import stop_on_sigterm, stop_once_on_sigint

    # Slurm's scancel and time limit send SIGTERM: stop as Ctrl-C does, so run.json says failed (interrupted).
    with stop_on_sigterm():
        if not ns.multirun:
            return _checked_run(ns, args, console)
        with stop_once_on_sigint():  # a second Ctrl-C would break the shutdown
            return _checked_run(ns, args, console)


def _checked_run(ns: argparse.Namespace, args: list[str], console: Console) -> int:
    from decpriv.cli.output_folder import claim_output_folder
    from decpriv.cli.precheck import precheck

    if ns.cfg or ns.info or ns.help or ns.hydra_help or ns.shell_completion or ns.version:
        _run_hydra(args, None)  # Hydra prints the config, its search path or the help; nothing runs
        return 0
    overrides, multirun = list(ns.overrides), bool(ns.multirun)
    try:
        plan = precheck(overrides, multirun)
        start_up_done()
        folder_override, folder = claim_output_folder(
            overrides, multirun, plan.hydra, plan.resuming, None if multirun else (plan.digests or [None])[0]
        )
        added = [
            *(_sweeper_overrides(plan, folder) if multirun else []),
            *([folder_override] if folder_override else []),
        ]
    except ConfigError as error:
        print_error(str(error))
        return 2
    if not multirun and _already_completed(plan, folder):
        return 0
    if not multirun:
        _note_unswept(plan)
    began = datetime.now().replace(microsecond=0)
    if multirun:
        args = _per_job(args, overrides)
    try:
        _run_hydra([*args, *added], plan.prebuilt)
    except KeyboardInterrupt as stop:
        return _interrupted(stop, multirun, folder, plan.count)
    except SystemExit as ended:  # Hydra said why the sweep stopped (a full disk): then what it left
        if not multirun or ended.code in (0, None):
            raise
        return max(_sweep_outcome(folder, plan, began, console), 1)
    return _sweep_outcome(folder, plan, began, console) if multirun else 0
