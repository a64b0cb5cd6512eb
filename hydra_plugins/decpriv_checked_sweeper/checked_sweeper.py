"""decpriv's sweeper (``hydra/sweeper=checked``, decpriv's default): Hydra's grid sweep over
``hydra.sweeper.params`` and the command line, for jobs ``decpriv run`` has already checked.

Hydra's basic sweeper composes every job once more before it launches them (a quarter second a job, one
after another in the parent); ``decpriv run`` has just composed and built each of them, and says so with
``hydra.sweeper.prechecked=true``. It also names the jobs a resumed sweep keeps (``kept_jobs``: their
folders hold a completed run of the same config): those are not launched at all, on any launcher. Each
launched job's config carries the sweep's job count and swept keys (``hydra.sweeper.job_count``,
``swept_keys``), from which the job prints ``job 2 of 8  seed=1 topology=ring``.
"""

import copy
import io
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hydra_plugins.decpriv_checked_sweeper.cancelling_launchers import STAND_INS


@dataclass
class CheckedSweeperConf:
    _target_: str = "hydra_plugins.decpriv_checked_sweeper.checked_sweeper.CheckedSweeper"
    max_batch_size: int | None = None  # jobs handed to the launcher at once (None: all)
    params: dict[str, str] | None = None  # swept keys of a preset: {key: "a,b" or "range(10)"}
    prechecked: bool = False  # every job was composed and built before the sweep (decpriv run)
    kept_jobs: list[int] = field(default_factory=list)  # job numbers a resumed sweep does not launch
    job_count: int | None = None  # set by the sweeper in each job's config
    swept_keys: list[str] = field(default_factory=list)  # set by the sweeper in each job's config


ConfigStore.instance().store(
    group="hydra/sweeper", name="checked", node=CheckedSweeperConf, provider="decpriv"
)


class SweepStopped(CompactHydraException):
    """An error that stopped the sweep (its ledger says so): Hydra prints its one sentence, no traceback."""


def launch_blocks(count: int, kept: set[int], size: int | None) -> list[range]:
    """Runs of consecutive job numbers to launch, ``kept`` ones left out, each at most ``size`` long: a
    launcher numbers the jobs of one launch consecutively from the first (their folders' names)."""
    blocks: list[range] = []
    start = 0
    for num in range(count + 1):
        full = size is not None and num - start == size
        if num == count or num in kept or full:
            if num > start:
                blocks.append(range(start, num))
            start = num + 1 if num in kept else num
    return blocks


def with_stand_in_launcher(config: DictConfig) -> DictConfig:
    """The config with decpriv's stand-in for a submitit launcher (its jobs cancelled when the sweep is
    stopped) as ``hydra.launcher._target_``; the config itself for any other launcher."""
    stand_in = STAND_INS.get(str(config.hydra.launcher.get("_target_")))
    if stand_in is None:
        return config
    swapped = copy.deepcopy(config)
    with read_write(swapped), open_dict(swapped):
        swapped.hydra.launcher._target_ = f"{stand_in.__module__}.{stand_in.__qualname__}"
    return swapped


def _same_run(config: DictConfig, folder: Path) -> bool:
    """Whether ``config`` (a job's, composed) resumes and ``folder`` holds its completed run, as the job
    itself would decide (``decpriv.cli.job``)."""
    from decpriv.experiment import config_digest, flatten_config
    from decpriv.report.resume import already_completed, take_resume

    choices = {k: v for k, v in config.hydra.runtime.choices.items() if not k.startswith("hydra")}
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
        if not take_resume(task):
            return False
    return already_completed(folder, config_digest(flatten_config(task, choices)))


class CheckedSweeper(Sweeper):
    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        prechecked: bool = False,
        kept_jobs: list[int] | None = None,
        job_count: int | None = None,
        swept_keys: list[str] | None = None,
    ) -> None:
        if max_batch_size is not None and max_batch_size <= 0:
            raise ValueError(f"hydra.sweeper.max_batch_size={max_batch_size}: give a positive count or null")
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.prechecked = prechecked
        self.kept_jobs = set(kept_jobs or ())
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None
        self._folder: tuple[int, int] | None = None  # the sweep folder (device, inode) the ledger is in

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=with_stand_in_launcher(config)
        )

    def sweep(self, arguments: list[str]) -> list[Any]:
        """Launch the jobs block by block into the sweep's ledger (``decpriv.report.ledger``): a job that
        fails, or that its launcher loses, is recorded and the other jobs go on; a stopped sweep records
        that it was stopped (the launcher cancels its jobs) and is stopped."""
        from decpriv.report.grid import job_overrides, swept_keys, with_params
        from decpriv.report.ledger import close_ledger, finished_as_planned
        from decpriv.scheduler import folded_scheduler_warnings, stopping_signal

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides(with_params(arguments, self.params))
        jobs, swept = job_overrides(parsed), swept_keys(parsed)
        facts = [f"hydra.sweeper.job_count={len(jobs)}", f"hydra.sweeper.swept_keys=[{','.join(swept)}]"]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        if not self.prechecked:  # a preset's own sweep: decpriv run could not name the jobs it keeps
            self.kept_jobs |= self._completed(sweep_dir, jobs)
        if finished_as_planned(sweep_dir, jobs, self.kept_jobs):  # a resume with nothing to do: no write
            return []
        self._open(sweep_dir, jobs, swept)
        returns = []
        try:
            with folded_scheduler_warnings(sweep_dir):
                for block in launch_blocks(len(jobs), self.kept_jobs, self.max_batch_size):
                    returns.append(self._launch(sweep_dir, block, [[*jobs[num], *facts] for num in block]))
                    self._still_there(sweep_dir)
            close_ledger(sweep_dir)
        except KeyboardInterrupt as stop:
            close_ledger(sweep_dir, stopped_by=stopping_signal(stop))
            raise
        except OSError as error:  # a full disk, a removed folder: the ledger says so, decpriv run too
            self._stopped_by(sweep_dir, error)
        return returns

    def _open(self, sweep_dir: Path, jobs: list[list[str]], swept: list[str]) -> None:
        """multirun.yaml and the ledger, before any job; a folder that cannot be written (read-only, a full
        disk) stops the sweep in one sentence, no job started."""
        from decpriv.report.ledger import open_ledger

        assert self.config is not None
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            open_ledger(
                sweep_dir, jobs, swept, self.kept_jobs, str(self.config.hydra.launcher.get("_target_"))
            )
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")  # after the ledger: no plan without it
            self._folder = (sweep_dir.stat().st_dev, sweep_dir.stat().st_ino)
        except OSError as error:
            raise SweepStopped(
                f"error: the sweep folder {sweep_dir} cannot be written ({error.strerror or error}), and "
                f"{len(jobs) - len(self.kept_jobs)} of its jobs must run; make it writable (chmod -R u+w "
                f"{sweep_dir}) or free space, then run the same command again."
            ) from None

    def _still_there(self, sweep_dir: Path) -> None:
        """Stop the sweep when its folder was removed (a launcher may have made it again for a later job):
        its ledger is gone, so no job of it could be recorded."""
        try:
            found = (sweep_dir.stat().st_dev, sweep_dir.stat().st_ino)
        except OSError:
            found = None
        if found != self._folder or not (sweep_dir / "ledger.json").is_file():
            raise SweepStopped(
                f"error: the sweep folder {sweep_dir} was removed while the sweep ran, so its ledger and the "
                "jobs it held are gone; run the sweep again."
            )

    @staticmethod
    def _stopped_by(sweep_dir: Path, error: OSError) -> None:
        """Close the ledger with the error that stopped the sweep (``decpriv run`` says it in one
        sentence); when even that cannot be written, Hydra prints the sentence (a compact error)."""
        from decpriv.report.ledger import close_ledger, read_ledger
        from decpriv.report.run_folder import error_text

        if not sweep_dir.is_dir():
            raise SweepStopped(
                f"error: the sweep folder {sweep_dir} was removed while the sweep ran, so nothing of it is "
                "kept (it is not made again); run the sweep again."
            ) from None
        try:
            close_ledger(sweep_dir, failed=error_text(error))
        except OSError:
            if (read_ledger(sweep_dir) or {}).get("failed"):
                return  # ledger.json says it; only its rendering, summary.csv, could not be written
            raise SweepStopped(
                f"error: the sweep in {sweep_dir} stopped: {error_text(error)}, and its ledger could not "
                "record it; free space or make the folder writable, then resume=true reruns the jobs that "
                "did not complete."
            ) from None

    def _completed(self, sweep_dir: Path, jobs: list[list[str]]) -> set[int]:
        """The jobs of a resumed sweep whose folder holds a completed run of the job's config (each
        composed here, as Hydra's basic sweeper checks its jobs): they are not launched, since Hydra writes
        a launched job's ``.hydra`` files before the job could say it has nothing to do."""
        from decpriv.errors import ConfigError
        from decpriv.report.run_folder import read_status

        assert self.config is not None and self.hydra_context is not None
        found = set()
        for num, job in enumerate(jobs):
            try:
                done = read_status(sweep_dir / str(num)).get("status") == "completed"
            except ConfigError:  # a corrupt run.json: the job runs again
                done = False
            if done and _same_run(
                self.hydra_context.config_loader.load_sweep_config(self.config, job), sweep_dir / str(num)
            ):
                found.add(num)
        return found

    def _launch(self, sweep_dir: Path, block: range, batch: list[list[str]]) -> list[Any]:
        """One block of jobs; what the launcher reports as failed (or the whole block, when the launcher
        itself fails: a joblib worker killed) is recorded in the ledger, and the sweep goes on."""
        from decpriv.report.ledger import record_end
        from decpriv.report.run_folder import error_text

        if not self.prechecked:
            self.validate_batch_is_legal(batch)  # Hydra's composition check of each job
        try:
            results = self.launcher.launch(batch, initial_job_idx=block.start)
        except Exception as error:  # the launcher lost the block: each job not ended is marked failed
            for num in block:
                record_end(sweep_dir, num, "failed", f"the launcher failed: {error_text(error)}")
            return []
        for num, result in zip(block, results, strict=False):
            if result.status == JobStatus.FAILED:
                with redirect_stderr(io.StringIO()):  # Hydra's return_value prints before it raises
                    try:
                        _ = result.return_value
                    except Exception as error:
                        record_end(sweep_dir, num, "failed", error_text(error))
        return list(results)
