"""The run folder (DESIGN.md, "Run folder"): run.json status, tidy CSV tables, PNG pictures.

Tables are written atomically (temporary file + rename) and only after every computation has finished;
run.json says ``running`` until the end, then ``completed`` or ``failed`` with the error.
"""

import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd

PACKAGES = (
    "decpriv",
    "torch",
    "numpy",
    "pandas",
    "networkx",
    "hydra-core",
    "omegaconf",
    "scipy",
    "scikit-learn",
)


def package_versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_csv(path: Path, table: pd.DataFrame) -> None:
    write_atomic(path, table.to_csv(index=False, float_format="%.10g", lineterminator="\n"))


class RunFolder:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.meta: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    def start(self, seed: int, device: str, config_digest: str) -> None:
        self.meta = {
            "status": "running",
            "config_digest": config_digest,
            "started": datetime.now().isoformat(timespec="seconds"),
            "seed": seed,
            "device": device,
            "versions": package_versions(),
            "argv": sys.argv,
        }
        self._write_meta()

    @contextmanager
    def phase(self, name: str):
        """Time one pipeline step; the wall time lands in run.json under ``wall_seconds``."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - begin, 4)

    def write_table(self, name: str, table: pd.DataFrame) -> None:
        write_csv(self.path / f"{name}.csv", table)

    def write_figure(self, relative: str, figure) -> None:
        import matplotlib.pyplot as plt

        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.stem}.tmp.png")
        figure.savefig(tmp, dpi=110, bbox_inches="tight")
        plt.close(figure)
        os.replace(tmp, target)

    def complete(self, extra: dict[str, Any] | None = None) -> None:
        self.meta.update(status="completed", **(extra or {}))
        self._finish()

    def fail(self, error: BaseException) -> None:
        message = str(error) or type(error).__name__
        self.meta.update(status="failed", error=f"{type(error).__name__}: {message}")
        self._finish()

    def _finish(self) -> None:
        self.meta["finished"] = datetime.now().isoformat(timespec="seconds")
        self.meta["wall_seconds"] = {**self.timings, "total": round(sum(self.timings.values()), 4)}
        self._write_meta()

    def _write_meta(self) -> None:
        write_atomic(self.path / "run.json", json.dumps(self.meta, indent=2, default=str) + "\n")


def read_status(path: Path) -> dict[str, Any]:
    file = Path(path) / "run.json"
    return json.loads(file.read_text()) if file.is_file() else {}
