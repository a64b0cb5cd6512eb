"""Sweeps on a scheduler (Hydra's submitit launchers: Slurm, or submitit's local executor).

Two things the launcher alone gets wrong, each handled here:

- a job stopped by the scheduler (``scancel``, the time limit: SIGTERM in the job's own process, which
  submitit's job environment ignores) marks itself failed (interrupted) in its run.json and summary.csv:
  :func:`stop_on_sigterm` wraps each job;
- the sweep's parent stopped (SIGTERM, Ctrl-C) cancels its submitted jobs instead of leaving them running
  as orphans, and waits for them to mark themselves interrupted (:func:`cancel_jobs`, called by the
  checked sweeper's stand-ins for the submitit launchers).

``resume=true`` submits only the jobs that must run: the checked sweeper does not launch the jobs
``decpriv run`` found completed, on any launcher.
"""

import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

CANCEL_WAIT_S = 30.0  # how long a stopped parent waits for its cancelled jobs to write their status


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
