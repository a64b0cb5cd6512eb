"""A sweep's ledger: ``<sweep>/summary.csv`` names every planned job from the start, and how each ended.

Before the first job starts, decpriv's sweeper writes ``<sweep>/ledger.json`` (each job's number and
overrides, the jobs a resumed sweep keeps, the launcher, the sweep's own process) and renders
summary.csv from it: one row per planned job, ``planned`` until the job says otherwise. Each job rewrites
its own row when it starts (``running``) and when it ends (under a file lock, since a parallel launcher's
jobs end together). The sweep's process records what only it learns (a job the scheduler cancelled or
lost before the job could write a word) and the sweep's end: then a job that never ran reads
``never started``, and a job folder deleted afterwards reads ``missing``. Readers (``show``, ``report``,
``diff``, ``resume``) render the ledger again from the job folders, so a sweep whose process was killed
outright (SIGKILL) still reads truthfully.

A job's status is one of :data:`STATUSES`; every one but ``completed`` is a job that resume reruns.
"""

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from decpriv.errors import ConfigError
from decpriv.report.grid import comparable, earlier_jobs, swept_overrides
from decpriv.report.run_folder import (
    completed_summary,
    holds_orphan_run,
    read_status,
    read_table,
    write_atomic,
    write_csv,
)

LEDGER = "ledger.json"
STATUSES = (
    "planned",  # the sweep runs and this job has not started
    "running",
    "completed",
    "failed",  # the job raised (its error), or its launcher lost it
    "cancelled",  # the scheduler cancelled it (scancel), or the stopped sweep did
    "interrupted",  # a signal stopped it (SIGTERM, SIGINT), or its process vanished (SIGKILL)
    "never started",  # the sweep ended (stopped, or its process killed) before this job began
    "missing",  # it ended, and its folder is gone since
    "corrupt",  # run.json says completed beside a garbage summary.csv (a run from before the marks)
    "damaged",  # a table its run marked is cut, changed or gone, its run.json edited or gone
)
UNTRUSTED = ("damaged", "corrupt", "missing")  # a job that ran and whose result is no longer there whole


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


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
        return _values([str(o) for o in yaml.safe_load(file.read_text()) or [] if "=" in str(o)])
    return {}


def read_ledger(sweep: Path | str) -> dict[str, Any] | None:
    """``<sweep>/ledger.json``, None for a folder without one (a sweep made before the ledger, a run)."""
    file = Path(sweep) / LEDGER
    if not file.is_file():
        return None
    try:
        ledger = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"{file}: unreadable or corrupt ({error}); restore it, or delete ledger.json alone (the job "
            "folders keep every run)"
        ) from None
    if not isinstance(ledger, dict) or not isinstance(ledger.get("jobs"), list):
        raise ConfigError(
            f"{file}: not a decpriv sweep ledger; restore it, or delete ledger.json alone (the job folders "
            "keep every run)"
        )
    return ledger


def ledger_of(sweep: Path | str) -> dict[str, Any] | None:
    """The sweep's ledger; for a sweep without one (Hydra's basic sweeper, an older decpriv) the plan its
    ``multirun.yaml`` describes, every job taken as ended (a job without a folder reads ``missing``)."""
    ledger = read_ledger(sweep)
    if ledger is not None or not (Path(sweep) / "multirun.yaml").is_file():
        return ledger
    jobs = earlier_jobs(sweep)
    final = {str(num): "ended" for num in range(len(jobs))}
    return {"jobs": jobs, "swept": swept_overrides(sweep), "finished": "before the ledger", "final": final}


def swept_keys_of(sweep: Path | str) -> list[str]:
    """The keys the sweep varied, as its plan names them (its ledger, else Hydra's multirun.yaml)."""
    return list((ledger_of(sweep) or {}).get("swept") or [])


def has_plan(folder: Path | str) -> bool:
    """Whether a folder holds a sweep whose plan is known (its ledger, or Hydra's multirun.yaml)."""
    return (Path(folder) / LEDGER).is_file() or (Path(folder) / "multirun.yaml").is_file()


def _write_ledger(sweep: Path, ledger: dict[str, Any]) -> None:
    write_atomic(sweep / LEDGER, json.dumps(ledger, indent=1) + "\n")


def open_ledger(sweep: Path, jobs: list[list[str]], swept: list[str], kept: set[int], launcher: str) -> None:
    """The sweep's plan, before any job starts: ``ledger.json`` and a summary.csv of planned rows."""
    ledger = {
        "jobs": [comparable(job) for job in jobs],
        "swept": list(swept),
        "kept": sorted(kept),
        "launcher": launcher,
        "began": _now(),
        "parent": {"host": socket.gethostname(), "pid": os.getpid()},
        "ended": {},
        "finished": None,
        "stopped_by": None,
    }
    sweep.mkdir(parents=True, exist_ok=True)  # the sweep's folder is made here, at its opening, only
    with _locked(sweep):
        _write_ledger(sweep, ledger)
        write_csv(sweep / "summary.csv", render(sweep, ledger))


def finished_as_planned(sweep: Path, jobs: list[list[str]], kept: set[int]) -> bool:
    """A resumed sweep with nothing to do: its ledger planned these very jobs and closed without a stop,
    and every job is kept (its folder holds its completed run, intact). Then nothing is written: not the
    ledger, not multirun.yaml, not summary.csv."""
    if set(range(len(jobs))) - set(kept):
        return False
    try:
        ledger = read_ledger(sweep)
    except ConfigError:
        return False
    return (
        ledger is not None
        and ledger["jobs"] == [comparable(job) for job in jobs]
        and bool(ledger.get("finished"))
        and not ledger.get("failed")
        and not ledger.get("stopped_by")
    )


def is_sweep_process(sweep: Path) -> bool:
    """Whether this process is the sweep's own (the basic launcher runs the jobs in it)."""
    with suppress(ConfigError):
        parent = (read_ledger(sweep) or {}).get("parent") or {}
        return parent.get("pid") == os.getpid() and parent.get("host") == socket.gethostname()
    return False


def _sweep_alive(ledger: dict[str, Any]) -> bool:
    """The sweep's process still runs: not finished, and (on this host) its process exists."""
    if ledger.get("finished"):
        return False
    parent = ledger.get("parent") or {}
    if parent.get("host") != socket.gethostname() or not isinstance(parent.get("pid"), int):
        return True  # another machine's process: taken for alive until it records its end
    try:
        os.kill(parent["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pid exists, owned by another user: not known dead
        pass
    return True


def _values(overrides: list[str]) -> dict[str, Any]:
    """``seed=1`` -> ``{"seed": 1}``: the job's values as summary.csv columns."""
    found = {}
    for key, _, value in (o.partition("=") for o in overrides):
        if key.lstrip("+~") == "claim":  # the paper's words, not a setting (as experiment.flatten_config)
            continue
        with suppress(yaml.YAMLError):
            found[key.lstrip("+~")] = yaml.safe_load(value)
    return found


def _own_row(folder: Path) -> pd.DataFrame:
    """The row a job folder gives (its summary.csv, else its run.json); a signal reads ``interrupted``."""
    row = job_row(folder)
    error = str(row["error"].iloc[0]) if "error" in row else ""
    if row["status"].iloc[0] == "failed" and error.startswith("interrupted"):
        row["status"] = "interrupted"
    return row


def _this_sweeps(meta: dict[str, Any], num: int, ledger: dict[str, Any]) -> bool:
    """run.json of a job this sweep ran or kept (a resumed sweep's earlier failure is not this sweep's)."""
    if not meta:
        return False
    if num in ledger.get("kept", []):
        return True
    return str(meta.get("started", "")) >= str(ledger.get("began", ""))


def job_status_row(sweep: Path, ledger: dict[str, Any], num: int, running: bool = False) -> pd.DataFrame:
    """Job ``num``'s row: its own (from its folder), or what the sweep knows of it (see :data:`STATUSES`)."""
    folder = sweep / str(num)
    values = _values(ledger["jobs"][num])
    ended = (ledger.get("ended") or {}).get(str(num))
    try:
        meta = read_status(folder)
    except ConfigError as error:
        meta, corrupt = {}, str(error)
    else:
        corrupt = ""
    if _this_sweeps(meta, num, ledger) and not running:
        row = _own_row(folder)
        if ended and ended["status"] == "cancelled" and row["status"].iloc[0] in ("interrupted", "failed"):
            row["status"], row["error"] = "cancelled", f"{ended['error']} ({row['error'].iloc[0]})"
        return row.assign(**{k: v for k, v in values.items() if k not in row})
    if running:
        status, error = "running", ""
    elif holds_orphan_run(folder):
        status, error = "damaged", "damaged: its run.json is gone"
    elif ended:
        status, error = ended["status"], ended["error"]
    elif seen := (ledger.get("seen") or {}).get(str(num)):  # it ended here, and its folder is gone since
        status, error = "missing", f"it {seen}, and its folder {folder} is gone since; resume=true reruns it"
    elif corrupt:
        status, error = "corrupt", corrupt
    elif _sweep_alive(ledger):
        status, error = "planned", ""
    elif (ledger.get("final") or {}).get(str(num), "never started") not in ("never started", "planned"):
        status, error = "missing", f"no job folder {folder} (removed, or never run); resume=true reruns it"
    else:
        status, error = "never started", _never_started(ledger)
    return pd.DataFrame([{"status": status, "error": error or None, **values}])


def _never_started(ledger: dict[str, Any]) -> str:
    if ledger.get("failed"):
        return f"the sweep stopped ({ledger['failed']}) before this job began"
    if ledger.get("stopped_by"):
        return f"the sweep was stopped ({ledger['stopped_by']}) before this job began"
    if ledger.get("finished"):
        return "the sweep ended before this job began"
    return "the sweep's process stopped (killed) before this job began"


def render(sweep: Path, ledger: dict[str, Any]) -> pd.DataFrame:
    """The sweep's table: one row per planned job, job, status and the swept keys first."""
    rows = [job_status_row(sweep, ledger, num).assign(job=num) for num in range(len(ledger["jobs"]))]
    return _ordered(pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(), ledger)


def _ordered(table: pd.DataFrame, ledger: dict[str, Any]) -> pd.DataFrame:
    if table.empty:
        return table
    front = ["job", "status", *[k for k in ledger.get("swept", []) if k in table.columns]]
    table = table.sort_values("job", kind="stable").reset_index(drop=True)
    return table[front + [c for c in table.columns if c not in front]]


@contextmanager
def _locked(sweep: Path) -> Iterator[None]:
    """One writer of the ledger at a time, across the sweep's processes (the jobs of a parallel launcher).
    The sweep's folder is not made here: one removed under a running sweep is not made again (the lock
    cannot be opened: FileNotFoundError)."""
    with open(sweep / ".ledger.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_job(sweep: Path, num: int, running: bool = False) -> None:
    """Rewrite job ``num``'s row of summary.csv (a job, as it starts and as it ends): the other rows are
    kept as written, so a job's update reads one table, not every job folder."""
    with _locked(sweep):
        ledger = read_ledger(sweep)
        if ledger is None or not 0 <= num < len(ledger["jobs"]):
            return
        try:
            table = read_table(sweep / "summary.csv")
        except (OSError, ConfigError):
            table = render(sweep, ledger)
        row = job_status_row(sweep, ledger, num, running).assign(job=num)
        ending = str(row["status"].iloc[0])
        if not running and ending in ("completed", "failed", "interrupted", "cancelled", "damaged"):
            with suppress(OSError):  # how the job ended, kept: its folder removed later reads missing
                _write_ledger(sweep, {**ledger, "seen": {**(ledger.get("seen") or {}), str(num): ending}})
        others = table[table["job"] != num] if "job" in table else table.iloc[0:0]
        # a rendering of the ledger, which readers render again: a full disk must not fail the job here
        with suppress(OSError):
            write_csv(sweep / "summary.csv", _ordered(pd.concat([others, row], ignore_index=True), ledger))


def keep_job(sweep: Path, num: int) -> None:
    """A launched job that found its folder already holding a completed run of its config (a resumed
    preset's sweep, whose jobs the precheck did not build): kept, as the precheck's kept jobs are."""
    with _locked(sweep):
        ledger = read_ledger(sweep)
        if ledger is None or num in ledger["kept"]:
            return
        ledger["kept"] = sorted({*ledger["kept"], num})
        _write_ledger(sweep, ledger)
    update_job(sweep, num)


def record_end(sweep: Path, num: int, status: str, error: str) -> None:
    """What the sweep's process learned of a job's end from its launcher or scheduler (a cancellation,
    a lost job): kept in the ledger, said in the job's log, and the job's row rewritten."""
    with _locked(sweep):
        ledger = read_ledger(sweep)
        if ledger is None or str(num) in ledger["ended"]:
            return  # the first word on a job (the scheduler's) is kept
        error = error.strip().splitlines()[0] if error.strip() else status
        ledger["ended"][str(num)] = {"status": status, "error": error}
        _write_ledger(sweep, ledger)
    with suppress(ConfigError):
        if read_status(sweep / str(num)).get("status") != "completed":
            job_log_line(sweep / str(num), f"ended: {status} ({error}), as the sweep's process learned it")
    update_job(sweep, num)


def close_ledger(sweep: Path, stopped_by: str | None = None, failed: str | None = None) -> pd.DataFrame:
    """The sweep's end (``stopped_by``: the signal that stopped it; ``failed``: the error that did):
    every row final; returns the table."""
    with _locked(sweep):
        ledger = read_ledger(sweep)
        if ledger is None:
            return pd.DataFrame()
        ledger.update(finished=_now(), stopped_by=stopped_by, failed=failed)
        table = render(sweep, ledger)
        ledger["final"] = {str(j): s for j, s in zip(table["job"], table["status"], strict=True)}
        _write_ledger(sweep, ledger)
        write_csv(sweep / "summary.csv", table)
    for _, row in table[table["status"].isin(["interrupted", "cancelled", "failed"])].iterrows():
        _say_unsaid_end(sweep / str(row["job"]), f"{row['status']} ({row.get('error')})")
    return table


def _say_unsaid_end(folder: Path, ending: str) -> None:
    """A job killed outright (SIGKILL, its worker terminated) could not write how it ended: the sweep's
    process writes it at the sweep's end, so every job's log ends with its end."""
    log = folder / "decpriv.log"
    with suppress(OSError):
        lines = log.read_text().splitlines() if log.is_file() else []
        if lines and "ended: " not in lines[-1]:
            job_log_line(folder, f"ended: {ending}, as the sweep's process found it at the sweep's end")


def job_log_line(folder: Path, text: str) -> None:
    """One line at the end of a job's ``decpriv.log`` (Hydra's job-log format), when its folder exists."""
    if not folder.is_dir():
        return
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    with suppress(OSError), open(folder / "decpriv.log", "a") as log:
        log.write(f"[{stamp}][decpriv][INFO] - {text}\n")


def refuse_untrusted_jobs(sweep: Path, table: pd.DataFrame) -> None:
    """A sweep shown as a result (``report``, ``plot``, ``diff``) whose jobs include a damaged or corrupt
    one is refused in one sentence naming the first and the resume that reruns them, never shown without
    it."""
    bad = table[table["status"].isin(UNTRUSTED)] if "status" in table else table.iloc[0:0]
    if bad.empty:
        return
    first = bad.iloc[0]
    error = first.get("error")
    why = str(error) if isinstance(error, str) and error else str(first["status"])
    raise ConfigError(
        f"{sweep}: {len(bad)} of its {len(table)} jobs no longer hold the result they wrote (job "
        f"{first['job']}, {why}), so the sweep is not shown as a result; rerun them in place with the sweep's "
        f"command line and hydra.sweep.dir={sweep} resume=true (or restore what was changed)."
    )


def unfinished(table: pd.DataFrame, ledger: dict[str, Any] | None) -> list[str]:
    """``job 1 (seed=1) cancelled``, one for each job of the sweep's table that did not complete, named
    by its swept values as the command line wrote them."""
    jobs, swept = (ledger or {}).get("jobs", []), (ledger or {}).get("swept", [])
    found = []
    for _, row in table[table["status"] != "completed"].iterrows():
        num = int(row["job"])
        values = [
            o for o in (jobs[num] if num < len(jobs) else []) if o.split("=", 1)[0].lstrip("+~") in swept
        ]
        named = f" ({' '.join(values)})" if values else ""
        found.append(f"job {num}{named} {row['status']}")
    return found
