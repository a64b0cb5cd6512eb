"""Python entry point for notebooks: the same pipeline as ``decpriv run``, from a list of overrides.

>>> from decpriv.api import run
>>> result = run(["topology=torus", "protocol.rounds=20"])
>>> result.summary, result.history
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf, open_dict

if TYPE_CHECKING:  # pandas loads when tables are read: composing a config (a refusal) does without it
    import pandas as pd


@dataclass(eq=False)
class RunResult:
    path: Path
    status: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def summary(self) -> pd.Series:
        return self.tables["summary"].iloc[0]

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)


def load(path: Path | str) -> RunResult:
    """Read a run folder's status and every CSV table in it."""
    path = Path(path)
    from decpriv.report.run_folder import read_status, read_table

    tables = {file.stem: read_table(file) for file in sorted(path.glob("*.csv"))}
    return RunResult(path, read_status(path).get("status", "unknown"), tables)


def compose_job(overrides: list[str] | tuple[str, ...] = ()) -> tuple[DictConfig, dict, DictConfig]:
    """Compose decpriv's config with Hydra overrides once; returns (config without ``hydra``, group
    choices, the ``hydra`` node: run and sweep folders, launcher, sweeper params)."""
    with initialize_config_module("decpriv.conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    hydra = cfg.hydra
    choices = {
        k: v for k, v in OmegaConf.to_container(hydra.runtime.choices).items() if not k.startswith("hydra")
    }
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices, hydra


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> tuple[DictConfig, dict]:
    """Compose decpriv's config with Hydra overrides; returns (config without ``hydra``, group choices)."""
    cfg, choices, _ = compose_job(overrides)
    return cfg, choices


def run(overrides: list[str] | tuple[str, ...] = (), out_dir: Path | str | None = None) -> RunResult:
    """Run one experiment and load its tables.

    The config is checked in full (every plugin, cross-plugin checks) before any folder is created; the
    folder is ``out_dir`` when given, else a new ``runs/<date>/<time>`` (``-2``, ``-3`` ... when taken)."""
    from decpriv import experiment  # torch: imported by running, not by composing

    cfg, choices = compose_config(overrides)
    prebuilt = experiment.precheck(cfg, choices)
    from decpriv.report.run_folder import claim_folder

    if out_dir is None:
        out = claim_folder(Path("runs") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S"))
    else:
        out = Path(out_dir)
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    (out / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (out / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(list(overrides)))
    experiment.run(cfg, out, choices, prebuilt=prebuilt)
    return load(out)
