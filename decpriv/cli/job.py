"""The Hydra task function of ``decpriv run``: one job (one run, or one job of a sweep) in its folder."""

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape

from decpriv.errors import ConfigError
from decpriv.stderr import print_error, print_stderr


def job_line(num: int, task: list[str], sweeper: Any) -> str:
    """``job 2 of 8  topology=ring seed=1  ``: the job's swept values, as the sweeper named them in the job's
    ``hydra.sweeper`` node (``job_count``, ``swept_keys``; another sweeper: every override, ``of ?``).

    Jobs are numbered from 0, as Hydra numbers them and names their folders (``<sweep>/2``)."""
    swept = list(sweeper.get("swept_keys") or [])
    shown = [o for o in task if o.split("=", 1)[0].lstrip("+~") in swept] or task
    return f"job {num} of {sweeper.get('job_count') or '?'}  {' '.join(shown)}  "


@dataclass
class HydraJob:
    """The task function Hydra calls with each job's config. ``prebuilt``: the precheck's build of a single
    run's config (``experiment.Prebuilt``), used when the job's config is that very one.

    Parallel launchers pickle it with the job: it holds no lock, no open file, and in a sweep no setup."""

    prebuilt: Any = None

    def __call__(self, cfg: DictConfig) -> None:
        # The pipeline (torch) is imported here, not at the top, so report/plot/runs/diff start quickly.
        from decpriv import experiment
        from decpriv.report.ledger import keep_job, record_end, update_job
        from decpriv.report.resume import already_completed, take_resume

        runtime = HydraConfig.get()
        out = Path(runtime.runtime.output_dir)
        choices = {k: v for k, v in runtime.runtime.choices.items() if not k.startswith("hydra")}
        multirun = runtime.mode == RunMode.MULTIRUN
        line = job_line(runtime.job.num, list(runtime.overrides.task), runtime.sweeper) if multirun else ""
        resume = take_resume(cfg)
        digest = experiment.config_digest(experiment.flatten_config(cfg, choices))
        if resume and already_completed(out, digest):
            if multirun:
                keep_job(Path(runtime.sweep.dir), runtime.job.num)
            if sys.stdout.isatty() or not multirun:
                Console().print(f"{line}[dim]skipped: already completed in {out}[/]", highlight=False)
            return
        sweep = Path(runtime.sweep.dir) if multirun else None
        if sweep is not None and runtime.sweeper.get("job_count") and not (sweep / "ledger.json").is_file():
            # decpriv's sweeper wrote the ledger before any job: its folder was removed under the sweep
            print_stderr(f"[red]{line}not run:[/] the sweep folder {sweep} was removed while the sweep ran")
            return
        if sweep is not None:
            update_job(sweep, runtime.job.num, running=True)
        try:
            ended = self._run(cfg, out, choices, multirun)
        finally:
            if sweep is not None:
                update_job(sweep, runtime.job.num)
        if sweep is not None and ended is not None and not out.is_dir():  # its folder removed under it
            record_end(sweep, runtime.job.num, "failed", ended)
        if ended == "interrupted: SIGINT":  # Ctrl-C reached the whole group: the sweep's own line says it
            return
        if ended is not None:  # the job failed in a sweep: said on one line, the sweep goes on
            print_stderr(f"[red]job {runtime.job.num} ({out}) failed:[/] {escape(ended)}")
            return
        from decpriv.report.show import print_headline, print_job_line

        if not multirun:
            print_headline(out, Console())
        else:  # one line per job, in a terminal or a log
            print_job_line(out, line, Console())

    def _run(self, cfg: DictConfig, out: Path, choices: dict, multirun: bool) -> str | None:
        """The pipeline into ``out``; its end said in the job's log. Returns None when it completed, else
        the error of a sweep's job (a single run exits on it). A signal stops a single run or a sweep run
        in this process (the basic launcher); a job in its own process (a scheduler's, a parallel
        launcher's worker) ends on it like any failure, so its sweep goes on."""
        from decpriv import experiment
        from decpriv.report.ledger import is_sweep_process, job_log_line
        from decpriv.report.run_folder import error_text
        from decpriv.scheduler import stop_on_sigterm

        if _IGNORING_CTRL_C and not _off_main_thread():  # this worker's last job was Ctrl-C'd, alone
            signal.signal(signal.SIGINT, _IGNORING_CTRL_C.pop())
        try:
            with stop_on_sigterm():  # a job a scheduler cancels (scancel: SIGTERM in its own process)
                experiment.run(
                    cfg, out, choices, sys.stderr.isatty() and not multirun, self._prebuilt_of(cfg)
                )
        except KeyboardInterrupt as stop:
            job_log_line(out, f"ended: {ending(stop)}")
            if not multirun or is_sweep_process(Path(HydraConfig.get().sweep.dir)):
                raise
            ignore_more_ctrl_c(stop)
            return error_text(stop)
        except Exception as error:
            job_log_line(out, f"ended: failed: {error_text(error)}")
            if not multirun:
                exit_on(error, bool(cfg.get("debug")))
            return error_text(error)
        job_log_line(out, "ended: completed")
        if multirun and not is_sweep_process(Path(HydraConfig.get().sweep.dir)):
            idle_until_next_job()
        return None

    def _prebuilt_of(self, cfg: DictConfig) -> Any:
        """The kept build when it was made from this very config (then dropped), else None."""
        prebuilt, self.prebuilt = self.prebuilt, None
        same = prebuilt is not None and prebuilt.config == OmegaConf.to_container(cfg)
        return prebuilt if same else None


# the handler a worker had before ignore_more_ctrl_c (one at most): restored when its next job starts,
# never one the worker was started with (a backgrounded sweep's workers ignore SIGINT from birth)
_IGNORING_CTRL_C: list[Any] = []


def _off_main_thread() -> bool:
    """Where signal handlers cannot, or must not, change: a thread other than the main one."""
    import threading

    return threading.current_thread() is not threading.main_thread()


def ignore_more_ctrl_c(stop: KeyboardInterrupt) -> None:
    """A parallel launcher's worker whose job Ctrl-C stopped: the terminal signals the whole process
    group, so its sweep is stopping too and ends this worker; the presses that follow are ignored, or one
    landing in loky's worker loop or the interpreter's exit would print a traceback. The worker's next
    job, if the sweep goes on (one worker signalled alone), takes Ctrl-C again."""
    from decpriv.scheduler import stopping_signal

    if stopping_signal(stop) == "SIGINT":
        idle_until_next_job()


def idle_until_next_job() -> None:
    """A parallel launcher's worker between jobs ignores Ctrl-C: the sweep's own process takes it and ends
    the workers, and one landing in loky's worker loop would print its traceback. Its next job takes
    Ctrl-C again."""
    if not _off_main_thread() and not _IGNORING_CTRL_C:
        _IGNORING_CTRL_C.append(signal.signal(signal.SIGINT, signal.SIG_IGN))


def exit_on(error: BaseException, debug: bool) -> None:
    """A single run's failure in one line, then exit: status 2 for bad input, 1 for a failure during the
    run (``debug``: the traceback instead)."""
    if debug:
        raise error
    if isinstance(error, ConfigError):
        print_error(str(error))
        sys.exit(2)
    print_stderr(
        f"[bold red]run failed:[/] {type(error).__name__}: {escape(str(error))} (debug=true shows the traceback)"
    )
    sys.exit(1)


def ending(stop: KeyboardInterrupt) -> str:
    """How a signal ended a run, for its log: ``interrupted: SIGTERM (a scheduler's cancel or time limit,
    or kill)``."""
    from decpriv.scheduler import stopping_signal

    name = stopping_signal(stop)
    why = {
        "SIGTERM": "scancel, a scheduler's time limit, the sweep's cancellation or kill",
        "SIGINT": "Ctrl-C, or the sweep's cancellation",
    }
    return f"interrupted: {name} ({why.get(name, 'a signal')})"
