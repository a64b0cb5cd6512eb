"""The run (sweep) folder of ``decpriv run``, claimed before Hydra starts: two runs never share one."""

from pathlib import Path

from omegaconf import DictConfig

from decpriv.errors import ConfigError, bad_value


def _named_folder(overrides: list[str], key: str) -> str | None:
    """The folder the command line names (``hydra.run.dir=out``), None when it names none."""
    given = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"{key}=")), None)
    if given is not None and not given.strip("'\" "):
        raise bad_value(
            key,
            given,
            "an empty folder name would write into the current folder",
            f"name a folder or drop {key}",
        )
    return given


def claim_output_folder(
    overrides: list[str], multirun: bool, hydra_cfg: DictConfig, resuming: bool
) -> tuple[str | None, Path]:
    """A new folder, made atomically with a ``-2``, ``-3`` ... suffix when the timestamped name exists. A
    folder the user names (hydra.run.dir=...) must be new or empty, and is claimed atomically (two runs
    started together into it: one is refused), unless ``resuming`` it. Returns the override to add (None
    for a folder the user named) and the folder. ``hydra_cfg``: the first job's ``hydra`` node."""
    from decpriv.report.run_folder import claim_folder, claim_named_folder

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = _named_folder(overrides, key)
    path = Path(str(hydra_cfg.sweep.dir if multirun else hydra_cfg.run.dir))
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
