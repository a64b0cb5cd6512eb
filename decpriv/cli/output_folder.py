"""The run (sweep) folder of ``decpriv run``, claimed before Hydra starts: two runs never share one."""

from pathlib import Path

from omegaconf import DictConfig

from decpriv.errors import ConfigError, bad_value


def _named_folder(overrides: list[str], key: str) -> str | None:
    """The folder the command line names (``hydra.run.dir=out``), None when it names none."""
    named = (o.split("=", 1)[1] for o in reversed(overrides) if o.lstrip("+").startswith(f"{key}="))
    given = next(named, None)  # hydra.run.dir=X, +hydra.run.dir=X or ++hydra.run.dir=X
    if given is not None and not given.strip("'\" "):
        raise bad_value(
            key,
            given,
            "an empty folder name would write into the current folder",
            f"name a folder or drop {key}",
        )
    return given


def claim_output_folder(
    overrides: list[str], multirun: bool, hydra_cfg: DictConfig, resuming: bool, digest: str | None = None
) -> tuple[str | None, Path]:
    """A new folder, made atomically with a ``-2``, ``-3`` ... suffix when the timestamped name exists. A
    folder the user names (hydra.run.dir=...) must be new or empty, and is claimed atomically (two runs
    started together into it: one is refused), unless ``resuming`` it. Returns the override to add (None
    for a folder the user named) and the folder. ``hydra_cfg``: the first job's ``hydra`` node; ``digest``:
    a resumed single run's config digest."""
    from decpriv.report.run_folder import claim_folder, claim_named_folder

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = _named_folder(overrides, key)
    path = Path(str(hydra_cfg.sweep.dir if multirun else hydra_cfg.run.dir))
    if given is not None and resuming:
        check_resumable(path, multirun, overrides, hydra_cfg, digest)
    try:
        if given is not None and resuming:
            path.mkdir(parents=True, exist_ok=True)  # resume: the earlier run's folder, by design
            return None, path
        if given is not None:
            return None, claim_named_folder(path)
        claimed = claim_folder(path)
        return f'{key}="{claimed}"', claimed
    except ConfigError as error:
        raise bad_value(
            key,
            str(path),
            f"a run folder holds one run, and {error}",
            f"choose a new folder{', or add resume=true to finish that sweep' if multirun else ''}",
        ) from None
    except OSError as error:
        raise bad_value(
            key,
            str(path),
            f"the output folder cannot be created ({error.strerror or error})",
            f"run from a writable folder or set {key}=A_WRITABLE_FOLDER",
        ) from None


def check_resumable(
    path: Path, multirun: bool, overrides: list[str], hydra_cfg: DictConfig, digest: str | None = None
) -> None:
    """``resume=true`` finishes the run or sweep a folder holds, never another: a sweep resumes into a
    sweep's folder with the same jobs (more may be appended), a run into a run's folder of the same config
    (``digest``; another config would replace its tables)."""
    from decpriv.report.run_folder import CLAIM, holds_orphan_run

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if not path.is_dir() or {p.name for p in path.iterdir()} <= {CLAIM}:
        return
    holds_run = (path / "run.json").is_file() or holds_orphan_run(path)  # a run whose run.json is gone
    holds_sweep = any((path / name).is_file() for name in ("multirun.yaml", "ledger.json")) or any(
        path.glob("*/run.json")
    )  # a sweep whose plan files are gone still holds its jobs
    if multirun and holds_run or not multirun and holds_sweep:
        what, wanted, fix = (
            ("a single run", "a sweep", "without -m") if multirun else ("a sweep", "a run", "with -m")
        )
        raise bad_value(
            key,
            str(path),
            f"resume=true finishes what a folder holds, and it holds {what}, not {wanted}",
            f"choose a new folder, or resume it {fix}",
        )
    if not holds_run and not holds_sweep:
        raise bad_value(
            key,
            str(path),
            "resume=true finishes a run or sweep, and this folder holds neither",
            "choose a new folder",
        )
    if multirun:
        _check_same_jobs(path, overrides, hydra_cfg)
    elif digest is not None:
        _check_same_run(path, overrides, digest)


def _check_same_run(folder: Path, overrides: list[str], digest: str) -> None:
    """The run a folder holds is this command's config (its digest in run.json), whatever its status:
    resuming finishes that run, so a run of another config is refused before its files are touched."""
    from decpriv.report.grid import comparable
    from decpriv.report.resume import run_digest

    ran = run_digest(folder)
    before = comparable(_earlier_overrides(folder))
    now = comparable(overrides)
    gone, new = [o for o in before if o not in now], [o for o in now if o not in before]
    if ran == digest or ran is None and not (gone or new):  # no digest (run.json gone): its overrides
        return
    said = (
        f"it ran {' '.join(gone) or 'without those overrides'} where this command runs "
        f"{' '.join(new) or 'without them'}"
        if gone or new
        else f"it ran another config (digest {ran}, this command's {digest})"
    )
    raise bad_value(
        "hydra.run.dir",
        str(folder),
        f"resume=true finishes the run this folder holds, and {said}",
        "repeat that run's command line with resume=true, or choose a new folder for this one",
    )


def _earlier_overrides(folder: Path) -> list[str]:
    """The command-line overrides of the run a folder holds (Hydra's ``.hydra/overrides.yaml``)."""
    import yaml

    try:
        found = yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    return [str(o) for o in found] if isinstance(found, list) else []


def _check_same_jobs(sweep: Path, overrides: list[str], hydra_cfg: DictConfig) -> None:
    """The resumed sweep's jobs are the earlier sweep's (compared job by job, Hydra's settings aside),
    with new jobs only after them: a job number never changes what it ran."""
    from decpriv.report.grid import comparable, earlier_jobs, expand, sweeper_params, with_params
    from decpriv.report.ledger import read_ledger

    before = (read_ledger(sweep) or {}).get("jobs") or earlier_jobs(sweep)
    now = [comparable(job) for job in expand(with_params(overrides, sweeper_params(hydra_cfg)))]
    changed = next(
        (n for n, job in enumerate(before) if n >= len(now) or sorted(job) != sorted(now[n])), None
    )
    if changed is None:
        return
    ran = " ".join(before[changed])
    would = f"would run {' '.join(now[changed])}" if changed < len(now) else "is not in this command"
    raise bad_value(
        "hydra.sweep.dir",
        str(sweep),
        f"resume=true finishes the sweep this folder holds, and its job {changed} ran {ran} but {would}",
        "repeat that sweep's command line with resume=true (new values may only add jobs at its end), "
        "or choose a new folder",
    )
