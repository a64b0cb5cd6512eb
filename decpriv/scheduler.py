"""Sweeps on a scheduler (Hydra's submitit launchers: Slurm, or submitit's local executor).

Three things the launcher alone gets wrong, each handled here:

- a job stopped by the scheduler (``scancel``, the time limit: SIGTERM in the job's own process, which
  submitit's job environment ignores) marks itself failed (interrupted) in its run.json and summary.csv:
  :func:`stop_on_sigterm` wraps each job;
- the sweep's parent stopped (SIGTERM, Ctrl-C) cancels its submitted jobs instead of leaving them running
  as orphans, and waits for them to mark themselves interrupted (:func:`cancel_submitted`);
- ``resume=true`` submits only the jobs that must run: the others are answered from their folders
  without a scheduler round trip (:func:`submitit_sweep`), where each job used to be submitted only to
  skip itself (24 s to resume a complete 6-job sweep).
"""

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CANCEL_WAIT_S = 30.0  # how long a stopped parent waits for its cancelled jobs to write their status

_submitted: list[Any] = []  # submitit jobs of the sweep running in this process
_digests: dict[tuple[str, ...], str] = {}  # job overrides -> config digest, from the precheck


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does (run.json: failed, interrupted: SIGTERM), in whichever process
    runs the job; the previous handler (submitit's) is restored after."""
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _task(overrides: list[str]) -> tuple[str, ...]:
    """A job's overrides less Hydra's own (``hydra/launcher=...``, ``hydra.sweep.dir=...``), which the
    launcher receives stripped."""
    return tuple(o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/")))


def remember_digest(overrides: list[str], digest: str) -> None:
    """The precheck's config digest of one job, for :func:`submitit_sweep` to decide what must run."""
    _digests[_task(overrides)] = digest


class _Kept:
    """A job resume keeps: answers the launcher as a finished submitit job would, without running."""

    def __init__(self) -> None:
        from hydra.core.utils import JobReturn, JobStatus

        self._return = JobReturn(status=JobStatus.COMPLETED, _return_value=None)

    def results(self) -> list[Any]:
        return [self._return]

    def done(self) -> bool:
        return True

    def cancel(self, check: bool = True) -> None:
        return None


def _must_run(sweep: Path, overrides: list[str], num: int) -> bool:
    from decpriv.report.resume import already_completed

    digest = _digests.get(_task(overrides))
    return digest is None or not already_completed(sweep / str(num), digest)


@contextmanager
def submitit_sweep(sweep: Path | None, resume: bool) -> Iterator[None]:
    """While a sweep runs in this process: record what submitit submits (to cancel it), and with
    ``resume`` submit only the jobs whose folder holds no completed run of the same config."""
    try:
        import submitit
    except ImportError:  # no submitit launcher installed: nothing to watch
        yield
        return
    original: Callable = submitit.AutoExecutor.map_array

    def map_array(executor: Any, fn: Callable, *columns: Any) -> list[Any]:
        rows = list(zip(*columns, strict=True))  # (overrides, dir key, job number, job id, state)
        keep = resume and sweep is not None
        run = [k for k, row in enumerate(rows) if not keep or _must_run(sweep, row[0], row[2])]
        chosen = [rows[k] for k in run]
        jobs = iter(original(executor, fn, *zip(*chosen, strict=True)) if chosen else [])
        answered = [next(jobs) if k in set(run) else _Kept() for k in range(len(rows))]
        _submitted.extend(answered)
        return answered

    submitit.AutoExecutor.map_array = map_array
    try:
        yield
    except KeyboardInterrupt:
        cancel_submitted()  # a scheduler's jobs stop with their parent, and say so
        raise
    finally:
        submitit.AutoExecutor.map_array = original
        _submitted.clear()  # the jobs die with the sweep, not at interpreter exit (their __del__ fails)


def cancel_submitted() -> int:
    """Cancel the jobs this process submitted that are still running and wait (at most CANCEL_WAIT_S) for
    them to stop and mark themselves interrupted; returns how many were cancelled."""
    running = [job for job in _submitted if not job.done()]
    for job in running:
        job.cancel(check=False)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while any(not job.done() for job in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(running)
