"""Sweeps on a scheduler (Hydra's submitit launchers: Slurm, or submitit's local executor).

What the launcher alone gets wrong, each handled here:

- a job stopped by the scheduler (``scancel``, the time limit: SIGTERM in the job's own process, which
  submitit's job environment ignores) marks itself interrupted in its run.json, its log and its row of
  the sweep's ledger: :func:`stop_on_sigterm` wraps each job;
- a job the scheduler cancels or loses does not stop the sweep (submitit's ``results()`` raises for it):
  :func:`wait_for` waits for each job, records the ones that did not finish in the ledger with the
  scheduler's word (``CANCELLED by 0``), and hands Hydra a failed ``JobReturn`` for them;
- the sweep's process stopped (SIGTERM, Ctrl-C) cancels its submitted jobs instead of leaving them running
  as orphans, and waits for them to mark themselves interrupted (:func:`cancel_jobs`);
- submitit's "Bypassing sacct error" warning (Slurm without accounting: every status poll, each line
  twice) is folded into one line of the sweep's log (:func:`folded_scheduler_warnings`).

``resume=true`` submits only the jobs that must run: the checked sweeper does not launch the jobs
``decpriv run`` found completed, on any launcher.
"""

import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

CANCEL_WAIT_S = 30.0  # how long a stopped parent waits for its cancelled jobs to write their status
POLL_S = 1.0  # how often the sweep looks at its submitted jobs
SWEEP_LOG = "sweep.log"

# True in the command line's own process (decpriv.cli.entry), which exits after main: a stopped sweep there
# keeps ignoring Ctrl-C through the exit
ENDING = [False]


_deferred: list[str] = []  # a signal that came during an import, delivered when the import is done
RETRY_S = 0.05


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside Python's import machinery."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _interrupted(signum: int, frame: Any) -> None:
    """Stop the run, but never in the middle of an import: a module left half imported (torch imports
    sympy lazily) would break the next job a parallel launcher's worker runs. Inside an import the stop
    is retried every RETRY_S seconds (SIGALRM) until the import is done."""
    name = _deferred.pop() if signum == signal.SIGALRM and _deferred else signal.Signals(signum).name
    if _importing(frame):
        _deferred.append(name)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise KeyboardInterrupt(name)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does (run.json: failed, interrupted: SIGTERM), in whichever process
    runs the job; the previous handlers (submitit's) are restored after."""
    previous = signal.signal(signal.SIGTERM, _interrupted)
    alarm = signal.signal(signal.SIGALRM, _interrupted)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _deferred.clear()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGALRM, alarm)


def _stop_once(signum: int, frame: Any) -> None:
    """The first Ctrl-C stops the sweep; the ones a user presses while it shuts down are ignored, at the
    system's level, so that what the shutdown starts inherits it too: joblib's loky kills its workers
    through ``pgrep`` (without psutil), which a second Ctrl-C to the terminal's process group would
    otherwise kill mid-shutdown, and the interpreter's exit joins those workers (a KeyboardInterrupt
    there is a traceback). SIGTERM (kill) still stops the process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt("SIGINT")


@contextmanager
def stop_once_on_sigint() -> Iterator[None]:
    """Ctrl-C stops a sweep once (:func:`_stop_once`). The command line's own process (:data:`ENDING`),
    which exits after the sweep, keeps ignoring SIGINT once stopped (its exit joins the workers);
    otherwise the previous handler is restored."""
    previous = signal.signal(signal.SIGINT, _stop_once)
    try:
        yield
    finally:
        stopped = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        if not (stopped and ENDING[0]):
            signal.signal(signal.SIGINT, previous)


def stopping_signal(stop: KeyboardInterrupt) -> str:
    """The signal a KeyboardInterrupt stands for: SIGINT (Ctrl-C) unless :func:`stop_on_sigterm` named it."""
    return stop.args[0] if stop.args and isinstance(stop.args[0], str) else "SIGINT"


def sweep_log(sweep: Path, text: str) -> None:
    """One line of the sweep's own log, ``<sweep>/sweep.log``."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    with open(Path(sweep) / SWEEP_LOG, "a") as log:
        log.write(f"[{stamp}] {text}\n")


class _Fold(logging.Filter):
    """Drops the records (and lines) of a repeated scheduler warning, counting them, keeping the first."""

    def __init__(self, *markers: str) -> None:
        super().__init__()
        self.markers, self.counts, self.first = markers, dict.fromkeys(markers, 0), {}

    def folds(self, message: str) -> bool:
        marker = next((m for m in self.markers if m in message), None)
        if marker is None:
            return False
        self.counts[marker] += 1
        self.first.setdefault(marker, message.strip())
        return True

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.folds(record.getMessage())


_folds: list[_Fold] = []  # the fold of the sweep now waiting, for :func:`_scheduler_output`


@contextmanager
def folded_scheduler_warnings(sweep: Path) -> Iterator[None]:
    """submitit's "Bypassing sacct error", and sacct's own "Slurm accounting storage is disabled" on its
    stderr (Slurm without accounting: at each status poll), kept off the terminal and written once each,
    with its count, to the sweep's log: the ledger reads each job's state from its folder and from
    ``scontrol``, so the warnings change nothing the sweep reports."""
    fold = _Fold("Bypassing sacct error", "accounting storage is disabled")
    logger = logging.getLogger("submitit")
    logger.addFilter(fold)
    for handler in logger.handlers:
        handler.addFilter(fold)
    _folds.append(fold)
    try:
        yield
    finally:
        _folds.remove(fold)
        logger.removeFilter(fold)
        for handler in logger.handlers:
            handler.removeFilter(fold)
        for marker, count in fold.counts.items():
            if count:
                sweep_log(sweep, f"said {count} time(s), folded here: {fold.first[marker]}")


@contextmanager
def _scheduler_output() -> Iterator[None]:
    """The scheduler's commands (sacct, run by submitit with this process's stderr) write into a file
    for the block; its lines are then passed on to stderr, but those the sweep's fold counts."""
    if not _folds:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines():
                if not _folds[-1].folds(line):
                    print(line, file=sys.stderr)


FINAL_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY")
FINAL_STATES += ("PREEMPTED", "TIMEOUT", "FINISHED", "INTERRUPTED")  # the last two: submitit's local jobs
LIVE_STATES = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "RESIZING",
    "SUSPENDED",
    "READY",
)


def scheduler_state(job: Any) -> str:
    """A submitit job's state: submitit's own (sacct on Slurm), else, on a Slurm without accounting
    (sacct fails and submitit says UNKNOWN), what ``scontrol show job`` still knows of it."""
    from submitit import SlurmJob

    state = str(job.state)
    if state.upper() != "UNKNOWN" or not isinstance(job, SlurmJob):
        return state
    return _scontrol_states().get(str(job.job_id), state)


_scontrol: dict[str, Any] = {"at": float("-inf"), "states": {}}


def _scontrol_states() -> dict[str, str]:
    """Every job ``scontrol show job`` knows, ``{"12_3": "RUNNING", "12_4": "PENDING"}``, read at most once
    a poll: one call for the whole array, not one a job."""
    if time.monotonic() - _scontrol["at"] < POLL_S:
        return _scontrol["states"]
    shown = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True)
    states = {}
    for line in shown.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        state = fields.get("JobState", "UNKNOWN")
        states[fields.get("JobId", "")] = state
        for task in _task_ids(fields.get("ArrayTaskId", "")):  # a pending array's tasks share one line
            states[f"{fields.get('ArrayJobId')}_{task}"] = state
    _scontrol.update(at=time.monotonic(), states=states)
    return states


def _task_ids(tasks: str) -> list[str]:
    """Slurm's task list, ``3``, ``2-5`` or ``1,4-6%2`` (``%``: a throttle), as task numbers."""
    found = []
    for part in tasks.split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found += [str(task) for task in range(int(first), int(last or first) + 1)]
    return found


def _finished(job: Any) -> bool:
    """The scheduler says the job is over (it may have ended without a result), or, where the scheduler
    no longer knows it, its result is there. A job with a result whose state is still COMPLETING (the
    moment after scancel) is not over yet: its final state says whether it was cancelled."""
    state = scheduler_state(job).split()[0].upper()
    if state in FINAL_STATES:
        return True
    return state not in LIVE_STATES and job.done()


def _ended(job: Any, overrides: list[str]) -> tuple[Any, tuple[str, str] | None]:
    """A done submitit job's JobReturn, and its status and reason for the ledger when it did not finish
    (None when it did): ``cancelled`` when the scheduler says CANCELLED, else ``failed``."""
    from hydra.core.utils import JobReturn, JobStatus
    from submitit.core.utils import FailedJobError, UncompletedJobError

    try:
        result = job.results()[0]
    except (UncompletedJobError, FailedJobError) as error:
        state = scheduler_state(job)
        status = "cancelled" if state.upper().startswith("CANCELLED") else "failed"
        returned = JobReturn(overrides=overrides, status=JobStatus.FAILED)
        returned.return_value = error
        return returned, (status, f"no result; the scheduler's state: {state}")
    state = scheduler_state(job)  # scancel's SIGTERM handled: a result, and the scheduler's word on it
    cancelled = state.upper().startswith("CANCELLED")
    return result, ("cancelled", f"the scheduler's state: {state}") if cancelled else None


def wait_for(
    jobs: Sequence[Any], numbers: Sequence[int], overrides: Sequence[list[str]], sweep: Path
) -> list:
    """Wait for every submitted job, in any order; a job that ends without a result (cancelled, killed,
    lost) is recorded in the sweep's ledger and the others are still awaited. Returns the JobReturns."""
    from decpriv.report.ledger import record_end

    returns: dict[int, Any] = {}
    while len(returns) < len(jobs):
        for index, job in enumerate(jobs):
            if index in returns:  # before the stderr capture: a poll redirects only for jobs still awaited
                continue
            with _scheduler_output():
                if not _finished(job):
                    continue
                returns[index], ended = _ended(job, overrides[index])
            if ended is not None:
                record_end(sweep, numbers[index], *ended)
        if len(returns) < len(jobs):
            time.sleep(POLL_S)
    return [returns[index] for index in range(len(jobs))]


def cancel_jobs(jobs: Sequence[Any]) -> int:
    """Cancel the submitit jobs still running and wait (at most CANCEL_WAIT_S) for them to stop and mark
    themselves interrupted; returns how many were cancelled."""
    running = [job for job in jobs if not job.done()]
    for job in running:
        job.cancel(check=False)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while any(not job.done() for job in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(running)
