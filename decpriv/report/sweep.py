"""Sweep-level summary: one table with every job's summary.csv row (failed jobs included), swept keys first;
the jobs of a sweep, expanded from its overrides."""

import itertools
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from decpriv.errors import ConfigError
from decpriv.report.run_folder import completed_summary, read_status, read_table, write_csv


def job_folders(sweep: Path) -> list[Path]:
    """Job folders of a sweep (those with a run.json), in job-number order."""
    found = [p.parent for p in Path(sweep).glob("*/run.json")]
    return sorted(found, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def job_row(job: Path) -> pd.DataFrame:
    """A job's summary row: its summary.csv when that agrees with run.json (a completed run's one
    completed row, or a failed run's row), else a row from run.json; a completed run.json beside a
    missing or garbage summary.csv is a ``corrupt`` job, never a completed one."""
    meta = read_status(job)
    status = meta.get("status", "unknown")
    if status == "completed":
        table = completed_summary(job, meta)
        if table is not None:
            return table.copy()  # one block per dtype: a wide row would warn on insert
        error = "summary.csv is missing, unreadable or not a completed run's; rerun the job (resume=true)"
        return pd.DataFrame([{"status": "corrupt", "error": error, **_job_overrides(job)}])
    file = job / "summary.csv"
    with suppress(OSError, ConfigError):
        table = read_table(file)
        if len(table) == 1 and "status" in table and table["status"].iloc[0] == status:
            return table.copy()
    return pd.DataFrame([{"status": status, "error": meta.get("error"), **_job_overrides(job)}])


def _job_overrides(job: Path) -> dict[str, Any]:
    """The job's own overrides (``seed=1``) from Hydra's ``.hydra/overrides.yaml``: a job stopped before it
    wrote its summary still names its swept values."""
    file = job / ".hydra" / "overrides.yaml"
    with suppress(OSError, ValueError, TypeError, yaml.YAMLError):
        pairs = [str(o).split("=", 1) for o in yaml.safe_load(file.read_text()) or []]
        return {key.lstrip("+~"): yaml.safe_load(value) for key, value in (p for p in pairs if len(p) == 2)}
    return {}


def collect(sweep: Path, jobs: int | None = None) -> pd.DataFrame:
    """The sweep's table: from its ledger, one row per planned job (``decpriv.report.ledger``); a sweep
    without one (another sweeper's, or an older decpriv's) concatenates the rows of its job folders (of
    jobs ``0 .. jobs-1`` when given), a job that died without a summary getting one from its run.json."""
    from decpriv.report.ledger import ledger_of, render

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


def expand(overrides: list[str]) -> list[list[str]]:
    """The jobs of a command line (``a=1,2 b=x,y`` -> four override lists), as decpriv's sweeper runs them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return job_overrides(OverridesParser.create().parse_overrides(overrides))


def job_overrides(parsed: list) -> list[list[str]]:
    """The jobs of overrides parsed by Hydra's ``OverridesParser``: the cartesian product of each key's
    values (``range(3)``, ``a,b``, ``[0],[1]``), the first key varying slowest, as Hydra's basic sweeper
    forms it. A key given twice keeps its first place and its last values (``seed=0`` after a preset's
    ``seed: range(10)`` fixes the seed)."""
    values: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise ConfigError(
                f"{key}: an interval() is a search space for an optimising sweeper; "
                "decpriv sweeps lists of values (a=1,2,3 or a=range(1,4))"
            )
        if override.is_sweep_override():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*values.values())]


def sweep_plan(task: list[str], params: Any = None) -> tuple[int, list[str]]:
    """Number of jobs and swept keys of a multirun, as decpriv's sweeper expands it.

    A sweep is the sweeper's ``params`` (``hydra.sweeper.params`` of an experiment preset, such as
    ``adversary.nodes: "[0],[1],..."`` and ``seed: range(10)``) followed by the command line overrides
    (``task``); a command line override of the same key replaces that parameter (``seed=0`` fixes a swept
    seed). Counting the command line alone misses every parameter the preset sweeps.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(with_params(task, params))
    return len(job_overrides(parsed)), swept_keys(parsed)


def swept_keys(parsed: list) -> list[str]:
    """The keys a parsed sweep varies; the last override of a key wins, in its first place."""
    final = {o.get_key_element(): o for o in parsed}
    return [o.key_or_group.lstrip("+~") for o in final.values() if o.is_sweep_override()]


def with_params(task: list[str], params: Any) -> list[str]:
    """The sweeper's ``params`` as overrides, before the command line's (which replace them)."""
    return [f"{k}={v}" for k, v in (params or {}).items()] + list(task)


def sweeper_params(hydra: Any) -> Any:
    """``hydra.sweeper.params`` of a composed ``hydra`` node (or of multirun.yaml's): the sweep an
    experiment preset declares, ``{}`` without one."""
    sweeper = hydra.get("sweeper") or {}
    return sweeper.get("params") or {}


def swept_overrides(sweep: Path) -> list[str]:
    """Swept keys of the sweep in ``multirun.yaml``, the sweeper's params included (``[]`` without one)."""
    file = Path(sweep) / "multirun.yaml"
    if not file.is_file():
        return []
    hydra = OmegaConf.load(file).hydra
    return sweep_plan(list(hydra.overrides.task), sweeper_params(hydra))[1]


def earlier_jobs(sweep: Path) -> list[list[str]]:
    """The jobs of the sweep a folder's ``multirun.yaml`` describes (a sweep made before the ledger), each
    without Hydra's own settings; ``[]`` without one."""
    from decpriv.report.ledger import comparable

    file = Path(sweep) / "multirun.yaml"
    if not file.is_file():
        return []
    hydra = OmegaConf.load(file).hydra
    return [comparable(job) for job in expand(with_params(list(hydra.overrides.task), sweeper_params(hydra)))]


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
