"""Hydra's submitit launchers (Slurm, or submitit's local executor), whose sweep cancels its jobs when it is
stopped: the checked sweeper launches through these in place of the plugin's own two classes.

Hydra's submitit launcher submits the jobs, then waits for their results in order: one job cancelled
(``scancel``) or lost raises in the sweep's process and stops it, leaving the other jobs running with no
sweep; stopped while it waits (Ctrl-C, or SIGTERM, which ``decpriv run`` turns into KeyboardInterrupt) it
leaves the jobs running as orphans. Here each job is awaited on its own and one that ends without a
result is recorded in the sweep's ledger (``decpriv.scheduler.wait_for``); when the sweep is stopped the
submitted jobs are cancelled and the sweep waits for them to mark themselves interrupted in their run.json
(``decpriv.scheduler.cancel_jobs``). The rest is the plugin's own ``launch``.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from omegaconf import OmegaConf


class CancelOnStop:
    """``launch`` of Hydra's submitit launcher, cancelling the submitted jobs when the sweep is stopped."""

    _EXECUTOR: str
    params: dict[str, Any]
    config: Any

    def _executor(self) -> Any:
        """submitit's executor for this launcher's options, made as the plugin makes it."""
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        init_keys = {"submitit_folder", "max_num_timeout"}
        init = {"folder": self.params["submitit_folder"]}
        if "max_num_timeout" in self.params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = self.params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())  # unprefixed, for every executor
        executor.update_parameters(
            **{
                k if k in shared else f"{self._EXECUTOR}_{k}": v
                for k, v in self.params.items()
                if k not in init_keys
            }
        )
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from decpriv.scheduler import cancel_jobs, wait_for

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        numbers = range(initial_job_idx, initial_job_idx + len(job_overrides))
        columns = (
            [list(overrides) for overrides in job_overrides],
            ["hydra.sweep.dir"] * len(numbers),
            list(numbers),
            [f"job_id_for_{num}" for num in numbers],
            [Singleton.get_state()] * len(numbers),
        )
        jobs = self._executor().map_array(self, *columns)
        try:
            return wait_for(jobs, list(numbers), columns[0], sweep_dir)  # a cancelled job: recorded
        except KeyboardInterrupt:
            cancel_jobs(jobs)  # a scheduler's jobs stop with their sweep, and say so
            raise


try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:  # without the slurm extra (make slurm) there is no submitit launcher to stand in for
    STAND_INS: dict[str, type] = {}
else:

    class CancellingLocalLauncher(CancelOnStop, LocalLauncher):
        """``hydra/launcher=submitit_local``: submitit's local executor."""

    class CancellingSlurmLauncher(CancelOnStop, SlurmLauncher):
        """``hydra/launcher=slurm`` (or ``submitit_slurm``): a Slurm job array."""

    STAND_INS = {
        f"{LocalLauncher.__module__}.LocalLauncher": CancellingLocalLauncher,
        f"{SlurmLauncher.__module__}.SlurmLauncher": CancellingSlurmLauncher,
    }
