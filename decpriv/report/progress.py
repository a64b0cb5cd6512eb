"""What a run says while it works: on a terminal, a live status for the attack phase (the simulation has
its own bar); otherwise one line per phase with its time on stderr. Every phase, its time and every
warning also land in the run folder's job log, ``decpriv.log``, in the format of Hydra's job logs.

The log is a handler on the ``decpriv`` logger for the run's duration, not Hydra's job logging: that
reconfigures the whole process's logging (``logging.config.dictConfig`` closes every existing handler),
which a notebook or test calling decpriv in-process would lose."""

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from decpriv.report.run_folder import RunFolder

log = logging.getLogger("decpriv")
# What a long attack says as it goes (an optimiser's loss, an elimination's block, an audit's trials): shown
# in the attack's live status on a terminal, nowhere else (the job log keeps phases, not iterations).
updates = logging.getLogger("decpriv.progress")
updates.propagate = False
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job log format


@contextmanager
def job_log(folder: Path):
    """Records of the ``decpriv`` logger go to ``folder/decpriv.log`` while the block runs."""
    handler = logging.FileHandler(folder / "decpriv.log", delay=True)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    try:
        with _attached(log, handler, logging.INFO):
            yield
    finally:
        handler.close()


@contextmanager
def _attached(logger: logging.Logger, handler: logging.Handler, level: int):
    """``handler`` on ``logger`` at ``level`` while the block runs; both restored after it."""
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


@contextmanager
def phase(folder: RunFolder, name: str, terminal: bool, label: str = ""):
    """Time one pipeline step into run.json (``RunFolder.phase``) and report it: a spinner with the
    elapsed time on a terminal for the attack, a line ``decpriv: <phase> <seconds> s`` on stderr when
    the output is not a terminal, and a log record either way."""
    begin = time.perf_counter()
    log.info("%s: started%s", name, f" ({label})" if label else "")
    status = Console(stderr=True).status(f"{name} {label}".strip()) if terminal and name == "attack" else None
    with folder.phase(name), status if status is not None else _nothing(), _shown(status, f"{name} {label}"):
        yield
    seconds = time.perf_counter() - begin
    log.info("%s: %.2f s", name, seconds)
    if not terminal and not sys.stderr.isatty() and not _sweep_job():  # a sweep job prints its own line
        print(f"decpriv: {name} {seconds:.2f} s", file=sys.stderr, flush=True)


def _sweep_job() -> bool:
    """Whether this run is one job of a Hydra multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


@contextmanager
def _nothing():
    yield


class _StatusLine(logging.Handler):
    """Each progress record becomes the live status's text."""

    def __init__(self, status, prefix: str):
        super().__init__(logging.DEBUG)
        self.status, self.prefix = status, prefix.strip()

    def emit(self, record: logging.LogRecord) -> None:
        self.status.update(f"{self.prefix}: {record.getMessage()}")


@contextmanager
def _shown(status, prefix: str):
    """While the block runs, ``updates`` records reach the terminal's status (when there is one)."""
    if status is None:
        yield
        return
    with _attached(updates, _StatusLine(status, prefix), logging.DEBUG):
        yield
