"""Shared fixtures: run the real CLI in a subprocess, or the pipeline through the Python API."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECPRIV = Path(sys.executable).with_name("decpriv")


def run_cli(*args: str, cwd: Path | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """``decpriv ARGS`` in a subprocess; returns the completed process (stdout/stderr as text)."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "COLUMNS": "200"}
    proc = subprocess.run(
        [str(DECPRIV), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"decpriv {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def cli(tmp_path):
    """Call ``cli("run", "topology=ring", ...)``; runs inside a temporary working directory."""

    def call(*args: str, check: bool = False) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=tmp_path, check=check)

    return call
