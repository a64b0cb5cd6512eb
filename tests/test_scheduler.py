"""Sweeps through submitit's local executor (``hydra/launcher=submitit_local``), the engine behind
``hydra/launcher=slurm`` without a cluster: jobs complete with the tables of a sequential sweep; a parent
stopped by SIGTERM cancels its jobs, which mark themselves interrupted; ``resume=true`` submits only
what must run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from decpriv import NO_USER_CONF
from decpriv.cli import main
from decpriv.errors import ConfigError
from decpriv.report.run_folder import read_status

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")
SWEEP = [
    "run",
    "-m",
    "seed=0,1",
    "topology.n=6",
    "protocol.rounds=300",
    "model=held",
    "~attack",
    "plots=false",
]
ENTRY = "import sys; from decpriv.cli import entry; sys.argv = ['decpriv', *sys.argv[1:]]; entry()"


HELD = "_target_: held_model.mlp\nhidden: [100]\nactivation: relu\nreduction: null\ninit_value: null\n"


def _decpriv(cwd: Path, *args: str) -> subprocess.Popen:
    """``decpriv`` in ``cwd``, whose model (tests/held_model.py) waits while ``cwd/hold`` exists."""
    (cwd / "conf" / "model").mkdir(parents=True, exist_ok=True)
    (cwd / "conf" / "model" / "held.yaml").write_text(HELD)
    tests = str(Path(__file__).parent)
    env = {**os.environ, "DECPRIV_TEST_HOLD": str(cwd / "hold")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tests, env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, *args], cwd=cwd, env=env, stderr=subprocess.PIPE, text=True
    )


def _statuses(sweep: Path) -> dict[str, str]:
    """Each job's status as decpriv reads it (a job killed before it could write says interrupted)."""
    found = {}
    for file in sweep.glob("*/run.json"):
        try:
            found[file.parent.name] = read_status(file.parent)["status"]
        except (ConfigError, KeyError):
            continue  # being written
    return found


def _submitted(sweep: Path) -> set[str]:
    return {p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit()}


def test_submitit_sweep_cancel_resume_and_tables_equal_to_sequential(tmp_path, monkeypatch, capsys):
    launcher = ["hydra/launcher=submitit_local", "hydra.sweep.dir=sub"]
    (tmp_path / "hold").touch()  # a job that starts stays running until stopped, on any machine
    parent = _decpriv(tmp_path, *SWEEP, *launcher)
    deadline = time.monotonic() + 240
    while "running" not in _statuses(tmp_path / "sub").values():
        assert parent.poll() is None, parent.stderr.read()
        assert time.monotonic() < deadline, "no job of the sweep was running after 240 s"
        time.sleep(0.1)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=120) == 128 + signal.SIGTERM
    assert "interrupted" in parent.stderr.read()
    after = _statuses(tmp_path / "sub")
    stopped = [job for job, status in after.items() if status in ("failed", "interrupted")]
    assert "running" not in after.values() and "completed" not in after.values() and stopped, after
    meta = read_status(tmp_path / "sub" / stopped[0])
    # marked by the job itself in its own process ("failed", interrupted: SIGINT/SIGTERM), or, when the
    # local executor killed it outright after its grace period on a loaded machine, read as interrupted
    assert meta["error"].startswith("interrupted")
    summary = pd.read_csv(tmp_path / "sub" / "summary.csv")  # the ledger: every planned job, how it ended
    assert list(summary.job) == [0, 1] and list(summary.seed) == [0, 1]
    ended = {"completed", "interrupted", "cancelled", "never started"}
    assert set(summary.status) <= ended and "interrupted" in set(summary.status), summary.status

    (tmp_path / "hold").unlink()
    before = _submitted(tmp_path / "sub")
    resumed = _decpriv(tmp_path, *SWEEP, *launcher, "resume=true")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert set(_statuses(tmp_path / "sub").values()) == {"completed"}
    assert len(_submitted(tmp_path / "sub") - before) == 2  # both held: stopped, or cancelled before start
    complete = _submitted(tmp_path / "sub")
    again = _decpriv(tmp_path, *SWEEP, *launcher, "resume=true")
    assert again.wait(timeout=300) == 0
    assert _submitted(tmp_path / "sub") == complete  # a complete sweep submits nothing

    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, "hydra.sweep.dir=seq"]) == 0
    capsys.readouterr()
    assert main(["diff", "sub", "seq"]) == 0, capsys.readouterr().out
