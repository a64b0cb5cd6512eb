"""Resuming a sweep: a job whose folder already holds a completed run of the same config is skipped.

``decpriv run -m ... hydra.sweep.dir=FOLDER resume=true`` reruns only what is missing, failed or changed:
"the same config" means the same config digest in run.json (``experiment.config_digest``), and the
``resume`` key itself is taken out of the config first, so it never changes a digest or a summary column.
"""

from datetime import datetime
from pathlib import Path

from omegaconf import DictConfig, open_dict

from decpriv.errors import ConfigError, bad_value
from decpriv.report.run_folder import completed_summary, read_status

KEY = "resume"


def take_resume(cfg: DictConfig) -> bool:
    """Remove ``resume`` from the job's config and return it (False when absent)."""
    value = cfg.get(KEY, False)
    if not isinstance(value, bool):
        raise bad_value(KEY, value, "is a switch", "use resume=true")
    if KEY in cfg:
        with open_dict(cfg):
            del cfg[KEY]
    return value


def check_fixed_folder(overrides: list[str], multirun: bool) -> None:
    """Resuming needs the folder of the earlier run: a timestamped default never exists twice."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if not any(o.lstrip("+").startswith(f"{key}=") for o in overrides):
        raise bad_value(
            KEY, True, f"needs the folder of the run to resume, and {key} is not set", f"add {key}=FOLDER"
        )


def _status(folder: Path) -> dict:
    """run.json, or ``{}`` when it is corrupt: such a job is rerun, like a missing one."""
    try:
        return read_status(folder)
    except ConfigError:
        return {}


def run_digest(folder: Path) -> str | None:
    """The config digest of the run a folder holds (None: no run.json, a corrupt or damaged one, whose
    digest may be another run's, or none recorded)."""
    meta = _status(folder)
    found = meta.get("config_digest") if meta.get("status") != "damaged" else None
    return str(found) if found else None


def already_completed(folder: Path, digest: str) -> bool:
    """A completed run of this config whose summary.csv is whole (a garbage one is rerun)."""
    meta = _status(folder)
    if meta.get("config_digest") != digest:
        return False
    return completed_summary(folder, meta) is not None


def kept_before(sweep: Path, began: datetime, jobs: int) -> int:
    """Jobs ``0 .. jobs-1`` of the sweep whose run started before ``began``: the ones resuming skipped."""
    starts = [_status(Path(sweep) / str(job)).get("started") for job in range(jobs)]
    return sum(1 for s in starts if s and datetime.fromisoformat(s) < began)
