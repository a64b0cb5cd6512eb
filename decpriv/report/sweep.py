"""Sweep-level summary: one table with every job's row (from the sweep's ledger; failed jobs included),
swept keys first, written by a Hydra callback after a multirun."""

import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from decpriv.errors import ConfigError
from decpriv.report.grid import sweep_plan, sweeper_params, swept_overrides
from decpriv.report.ledger import job_folders, job_row, ledger_of, render
from decpriv.report.run_folder import write_csv


def collect(sweep: Path, jobs: int | None = None) -> pd.DataFrame:
    """The sweep's table: from its ledger, one row per planned job (``decpriv.report.ledger``); a sweep
    without one (another sweeper's, or an older decpriv's) concatenates the rows of its job folders (of
    jobs ``0 .. jobs-1`` when given), a job that died without a summary getting one from its run.json."""
    ledger = ledger_of(sweep)
    if ledger is not None:
        return render(Path(sweep), ledger)
    rows = []
    wanted = None if jobs is None else {str(i) for i in range(jobs)}
    for job in job_folders(sweep):
        if wanted is not None and job.name not in wanted:
            continue
        try:
            row = job_row(job)
        except ConfigError as error:  # one corrupt job must not hide the others
            warnings.warn(f"skipped job {job.name}: {error}", stacklevel=1)
            continue
        row.insert(0, "job", job.name)
        rows.append(row)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def write_summary(sweep: Path, jobs: int) -> pd.DataFrame:
    """``<sweep>/summary.csv``: jobs ``0 .. jobs-1`` (a resumed folder may hold job folders of an earlier,
    larger grid: they are not this sweep), job, status and the swept keys first; returns the table."""
    table = collect(sweep, jobs)
    if table.empty:
        return table
    front = ["job", "status", *[k for k in swept_overrides(sweep) if k in table.columns]]
    table = table[front + [c for c in table.columns if c not in front]]
    write_csv(sweep / "summary.csv", table)
    return table


class SweepSummary(Callback):
    """Hydra callback: after a multirun, write ``<sweep dir>/summary.csv`` with the swept keys up front
    (``decpriv run`` reads it to count the failed jobs)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        write_summary(sweep, sweep_plan(list(config.hydra.overrides.task), sweeper_params(config.hydra))[0])
