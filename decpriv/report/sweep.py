"""Sweep-level summary: one table with every job's summary.csv row (failed jobs included), swept keys first."""

from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from decpriv.report.run_folder import read_status, write_csv


def job_folders(sweep: Path) -> list[Path]:
    """Job folders of a sweep (those with a run.json), in job-number order."""
    found = [p.parent for p in Path(sweep).glob("*/run.json")]
    return sorted(found, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def collect(sweep: Path, jobs: int | None = None) -> pd.DataFrame:
    """Concatenate the jobs' summary rows (of jobs ``0 .. jobs-1`` when given); a job that died without
    one gets a row from its run.json."""
    rows = []
    wanted = None if jobs is None else {str(i) for i in range(jobs)}
    for job in job_folders(sweep):
        if wanted is not None and job.name not in wanted:
            continue
        file = job / "summary.csv"
        if file.is_file():
            row = pd.read_csv(file)
        else:
            meta = read_status(job)
            row = pd.DataFrame([{"status": meta.get("status", "unknown"), "error": meta.get("error")}])
        row.insert(0, "job", job.name)
        rows.append(row)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def swept_overrides(sweep: Path) -> list[str]:
    """Keys of the sweep overrides in ``multirun.yaml`` (``[]`` when the folder has none)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    file = Path(sweep) / "multirun.yaml"
    if not file.is_file():
        return []
    task = list(OmegaConf.load(file).hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(task)
    return [o.key_or_group.lstrip("+~") for o in parsed if o.is_sweep_override()]


class SweepSummary(Callback):
    """Hydra callback: after a multirun, write ``<sweep dir>/summary.csv`` with the swept keys up front."""

    failed = 0
    folder: Path | None = None
    jobs = 0

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        sweep = Path(config.hydra.sweep.dir)
        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        jobs = len(BasicSweeper.split_arguments(parsed, None)[0])
        # A reused sweep folder may hold job folders of an earlier, larger grid: they are not this sweep.
        table = collect(sweep, jobs)
        if table.empty:
            return
        front = ["job", "status", *[k for k in swept_overrides(sweep) if k in table.columns]]
        table = table[front + [c for c in table.columns if c not in front]]
        write_csv(sweep / "summary.csv", table)
        SweepSummary.failed = int((table["status"] != "completed").sum())
        SweepSummary.folder = sweep
        SweepSummary.jobs = jobs
