"""A real single-node Slurm (slurmctld, slurmd, munge on this machine, no accounting): a 3-job sweep whose
job is cancelled with scancel, whose process is stopped (SIGTERM) or killed (SIGKILL), and one whose job
raises; each leaves a ledger naming every planned job and how it ended, and ``resume=true`` reruns exactly
the unfinished ones. Slow (each Slurm job starts its own Python): ``make test-slow``."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import slurm_cluster

from decpriv.report.sweep import collect

pytestmark = pytest.mark.slow
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
ENTRY = "import sys; from decpriv.cli import entry; sys.argv = ['decpriv', *sys.argv[1:]]; entry()"
SLURM = ["hydra/launcher=slurm", "hydra.launcher.mem_gb=1", "hydra.launcher.cpus_per_task=1"]
SWEEP = ["-m", "protocol.rounds=5,6000,6", "topology.n=6", "~attack", "plots=false", *SLURM]
ENDED = {"completed", "cancelled", "interrupted", "never started"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = slurm_cluster.unavailable()
    if reason:
        pytest.skip(reason)
    env = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield {**env, "OMP_NUM_THREADS": "1"}
    slurm_cluster.stop(env)


def _decpriv(cwd: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, "run", *args], cwd=cwd, env=env, stderr=subprocess.PIPE, text=True
    )


def _simulating(job: Path, deadline: float = 300) -> None:
    """Wait until the job simulates (so a signal stops its run, not its start)."""
    end = time.monotonic() + deadline
    while not ((job / "decpriv.log").is_file() and "simulate: started" in (job / "decpriv.log").read_text()):
        assert time.monotonic() < end, f"{job} did not start"
        time.sleep(0.1)


def _queue(env: dict) -> list[str]:
    shown = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=True)
    return shown.stdout.split()


def _empty_queue(env: dict, deadline: float = 300) -> None:
    end = time.monotonic() + deadline
    while _queue(env):
        assert time.monotonic() < end, _queue(env)
        time.sleep(0.5)


def _resume_reruns_exactly(sweep: Path, env: dict, args: list[str], unfinished: set[int]) -> None:
    kept = {n: (sweep / str(n) / "run.json").read_bytes() for n in range(3) if n not in unfinished}
    resumed = _decpriv(sweep.parent, env, *args, f"hydra.sweep.dir={sweep.name}", "resume=true")
    assert resumed.wait(timeout=400) == 0, resumed.stderr.read()
    assert {n: (sweep / str(n) / "run.json").read_bytes() for n in kept} == kept
    assert set(pd.read_csv(sweep / "summary.csv").status) == {"completed"}
    assert json.loads((sweep / "ledger.json").read_text())["kept"] == sorted(kept)


def test_scancel_of_one_job_is_recorded_the_others_complete(slurm, tmp_path):
    parent = _decpriv(tmp_path, slurm, *SWEEP, "hydra.sweep.dir=sw")
    _simulating(tmp_path / "sw" / "1")
    job = next(i for i in _queue(slurm) if i.endswith("_1"))
    subprocess.run(["scancel", job], env=slurm, check=True)
    assert parent.wait(timeout=400) == 1
    said = " ".join(parent.stderr.read().split())
    assert "1 of 3 jobs did not complete: job 1 (protocol.rounds=6000) cancelled" in said, said
    assert "accounting storage is disabled" not in said and "sacct" not in said  # folded into sweep.log
    log = (tmp_path / "sw" / "sweep.log").read_text().splitlines()
    assert len(log) == 2 and all("folded here" in line for line in log)
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(table.status) == ["completed", "cancelled", "completed"], table.error
    assert "CANCELLED" in table.error[1] and "interrupted: SIGTERM" in table.error[1]
    assert "ended: interrupted: SIGTERM" in (tmp_path / "sw" / "1" / "decpriv.log").read_text()
    _resume_reruns_exactly(tmp_path / "sw", slurm, SWEEP, {1})


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_sweeps_process_stopped_or_killed(slurm, tmp_path, how):
    parent = _decpriv(tmp_path, slurm, *SWEEP, "hydra.sweep.dir=sw")
    _simulating(tmp_path / "sw" / "1")
    parent.send_signal(getattr(signal, how))
    assert parent.wait(timeout=120) == (143 if how == "SIGTERM" else -signal.SIGKILL)
    if how == "SIGTERM":  # the sweep cancels its jobs, waits for them and names every one
        assert not _queue(slurm)
        said = " ".join(parent.stderr.read().split())
        assert (
            "interrupted by SIGTERM: the sweep in sw stopped" in said
            and "job 1 (protocol.rounds=6000)" in said
        )
    else:  # nothing cancels a job array whose sweep was killed: its jobs finish and write their own rows
        _empty_queue(slurm)
    table = collect(tmp_path / "sw")  # what show, report and diff read
    assert list(table.job) == [0, 1, 2] and set(table.status) <= ENDED, table
    assert list(pd.read_csv(tmp_path / "sw" / "summary.csv").job) == [0, 1, 2]
    unfinished = {int(j) for j, s in zip(table.job, table.status, strict=True) if s != "completed"}
    assert (how == "SIGTERM") == bool(unfinished)
    if how == "SIGTERM":
        _resume_reruns_exactly(tmp_path / "sw", slurm, SWEEP, unfinished)


def test_a_job_that_raises_is_named_and_its_log_says_so(slurm, tmp_path):
    grid = [
        "-m",
        "protocol.lr=1e12,0.1",
        "protocol.rounds=3",
        "topology.n=6",
        "~attack",
        "plots=false",
        *SLURM,
    ]
    parent = _decpriv(tmp_path, slurm, *grid, "hydra.sweep.dir=sw")
    assert parent.wait(timeout=400) == 1
    assert "job 0 (protocol.lr=1000000000000.0) failed" in " ".join(parent.stderr.read().split())
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(table.status) == ["failed", "completed"] and "Diverged" in table.error[0]
    assert "ended: failed: Diverged" in (tmp_path / "sw" / "0" / "decpriv.log").read_text()
    assert os.listdir(tmp_path / "sw" / ".submitit")  # it ran on Slurm
