"""A sweep's ledger: summary.csv names every planned job from the start and how it ended, on every
launcher; a failed, stopped or vanished job does not stop its sweep, whose exit names it; ``resume=true``
reruns exactly the jobs that did not complete."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from decpriv.cli import main
from decpriv.report.diff import diff_paths
from decpriv.report.ledger import close_ledger, open_ledger, read_ledger, record_end, render, update_job
from decpriv.report.sweep import collect

QUICK = ["topology.n=6", "~attack", "plots=false"]
ENTRY = "import sys; from decpriv.cli import entry; sys.argv = ['decpriv', *sys.argv[1:]]; entry()"


def _job(sweep: Path, num: int, status: str, seed: int, error: str | None = None) -> None:
    """A job folder as a run writes it (run.json, and summary.csv for a completed run)."""
    folder = sweep / str(num)
    folder.mkdir(parents=True)
    meta = {"status": status, "started": "2999-01-01T00:00:00", "metrics": ["acc"]}
    (folder / "run.json").write_text(json.dumps({**meta, **({"error": error} if error else {})}))
    row = {"status": status, "acc": 0.5 + seed, "seed": seed, **({"error": error} if error else {})}
    pd.DataFrame([row]).to_csv(folder / "summary.csv", index=False)


def _statuses(sweep: Path) -> list[str]:
    return list(render(sweep, read_ledger(sweep))["status"])


def test_every_planned_job_has_a_row_and_each_status_by_hand(tmp_path):
    jobs = [[f"seed={s}", "topology.n=6", "hydra.sweep.dir=x", "resume=true"] for s in range(5)]
    open_ledger(tmp_path, jobs, ["seed"], set(), "basic")
    planned = pd.read_csv(tmp_path / "summary.csv")  # written before any job starts
    assert list(planned.job) == [0, 1, 2, 3, 4] and set(planned.status) == {"planned"}
    assert list(planned.seed) == [0, 1, 2, 3, 4] and "resume" not in planned
    assert read_ledger(tmp_path)["jobs"][0] == ["seed=0", "topology.n=6"]  # the experiment, not Hydra's
    _job(tmp_path, 0, "completed", 0)
    _job(tmp_path, 1, "failed", 1, "interrupted: SIGTERM")
    _job(tmp_path, 2, "failed", 2, "interrupted: SIGTERM")
    update_job(tmp_path, 3, running=True)
    record_end(tmp_path, 2, "cancelled", "no result; the scheduler's state: CANCELLED by 0")
    record_end(tmp_path, 2, "failed", "a later word on job 2 is not kept")
    assert list(pd.read_csv(tmp_path / "summary.csv").status) == [
        "planned", "planned", "cancelled", "running", "planned"
    ]  # fmt: skip
    (tmp_path / "1" / "decpriv.log").write_text("[...] - simulate: started\n")  # killed: said no end
    table = close_ledger(tmp_path, stopped_by="SIGTERM")
    last = (tmp_path / "1" / "decpriv.log").read_text().splitlines()[-1]
    assert last.endswith(
        "ended: interrupted (interrupted: SIGTERM), as the sweep's process found it at the sweep's end"
    )
    assert list(table.status) == ["completed", "interrupted", "cancelled", "never started", "never started"]
    assert table.error[2].startswith("no result; the scheduler's state: CANCELLED by 0 (interrupted")
    assert "stopped (SIGTERM)" in table.error[4] and table.acc[0] == 0.5
    (tmp_path / "0" / "run.json").unlink()  # a finished job's run.json removed afterwards: damaged
    assert _statuses(tmp_path)[0] == "damaged"
    shutil.rmtree(tmp_path / "0")  # its whole folder: missing
    assert _statuses(tmp_path)[0] == "missing"


def test_a_sweep_whose_process_was_killed_reads_never_started(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    open_ledger(tmp_path, [["seed=0"], ["seed=1"]], ["seed"], set(), "basic")
    ledger = read_ledger(tmp_path)
    ledger["parent"]["pid"] = int(dead.stdout)  # that process has exited: killed, never closed its ledger
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    _job(tmp_path, 0, "completed", 0)
    assert _statuses(tmp_path) == ["completed", "never started"]


def test_a_failed_job_is_named_and_its_log_says_how_it_ended(tmp_path):
    grid = ["run", "-m", "protocol.lr=1e12,0.1", "protocol.rounds=3", *QUICK, "hydra.sweep.dir=sw"]
    first = run_cli(*grid, cwd=tmp_path)  # the basic launcher: the jobs in the sweep's own process
    assert first.returncode == 1, first.stderr
    said = " ".join(first.stderr.split())
    assert "1 of 2 jobs did not complete: job 0 (protocol.lr=1000000000000.0) failed" in said
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(table.status) == ["failed", "completed"] and "Diverged" in table.error[0]
    log = (tmp_path / "sw" / "0" / "decpriv.log").read_text().splitlines()
    assert log[-1].endswith("ended: failed: " + table.error[0])
    assert (tmp_path / "sw" / "1" / "decpriv.log").read_text().splitlines()[-1].endswith("ended: completed")


def _running(job: Path, deadline: float) -> int:
    """The pid of a job once it simulates (so a signal stops the run, not its start)."""
    while True:
        log = job / "decpriv.log"
        if log.is_file() and "simulate: started" in log.read_text():
            return json.loads((job / "run.json").read_text())["pid"]
        assert time.monotonic() < deadline, f"{job} did not start"
        time.sleep(0.05)


# submitit_local's own stop and resume run in the default suite (test_scheduler.py), a real Slurm's scancel
# in test_slurm.py (slow)
@pytest.mark.parametrize("launcher", ["parallel", pytest.param("submitit_local", marks=pytest.mark.slow)])
def test_one_job_stopped_the_sweep_goes_on_and_resume_reruns_exactly_it(tmp_path, launcher):
    if launcher == "submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep = ["-m", "protocol.rounds=5,4000,6", *QUICK, "hydra.sweep.dir=sw"]
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "parallel" else []
    grid = [*sweep, f"hydra/launcher={launcher}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "run", *grid], cwd=tmp_path, stderr=subprocess.PIPE, text=True, env=env
    )
    os.kill(_running(tmp_path / "sw" / "1", time.monotonic() + 180), signal.SIGTERM)  # scancel's signal
    assert parent.wait(timeout=240) == 1
    said = " ".join(parent.stderr.read().split())
    assert "1 of 3 jobs did not complete: job 1 (protocol.rounds=4000) interrupted" in said
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(table.status) == ["completed", "interrupted", "completed"], table.error
    log = (tmp_path / "sw" / "1" / "decpriv.log").read_text()
    assert "ended: interrupted: SIGTERM" in log.splitlines()[-1]
    kept = {n: (tmp_path / "sw" / n / "run.json").read_bytes() for n in ("0", "2")}
    resumed = run_cli("run", *sweep, "resume=true", cwd=tmp_path)  # on any launcher: here the basic one
    assert resumed.returncode == 0, resumed.stderr
    assert {n: (tmp_path / "sw" / n / "run.json").read_bytes() for n in kept} == kept
    assert set(pd.read_csv(tmp_path / "sw" / "summary.csv").status) == {"completed"}


def test_a_removed_or_garbage_job_is_never_read_as_absent_or_equal(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    open_ledger(a, [["seed=0"], ["seed=1"]], ["seed"], set(), "basic")
    _job(a, 0, "completed", 0)
    _job(a, 1, "completed", 1)
    close_ledger(a)
    shutil.copytree(a, b)
    (b / "1" / "summary.csv").write_text("garbage\n\x00\n")
    assert not all(d.equal for d in diff_paths(a, b))  # the corrupt job pairs on its swept value
    shutil.rmtree(b / "0")
    assert list(collect(b).status) == ["missing", "corrupt"]  # show, report and diff read this
    (b / "ledger.json").unlink()  # a sweep from before the ledger: its plan is multirun.yaml's
    (b / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=0,1\n")
    assert list(collect(b).status) == ["missing", "corrupt"] and list(collect(b).seed) == [0, 1]


def test_a_folder_holds_one_run_or_one_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _job(tmp_path, 0, "completed", 0)  # a completed single run in ./0
    for line in (
        ["-m", "seed=0,1", "hydra.sweep.dir=0", "resume=true"],  # a sweep resumed into a run's folder
        ["++hydra.run.dir=0"],  # a run into a used folder, named with ++
    ):
        assert main(["run", *QUICK, "protocol.rounds=2", *line]) == 2
        assert "hydra." in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "0").iterdir()) == ["run.json", "summary.csv"]


def test_the_python_api_refuses_what_is_not_one_job(tmp_path):
    from decpriv.api import run as api_run
    from decpriv.errors import ConfigError

    refusals = {
        "is a list of strings": (("protocol.rounds=2",), {}),  # a string would be read letter by letter
        "decpriv.api.run runs one job": ((["-m", "seed=0,1"],), {}),
        "did you mean topology?": ((["topolgy=torus"],), {}),
        "a run folder holds one run": ((["~attack"],), {"out_dir": tmp_path}),
    }
    (tmp_path / "run.json").write_text("{}")  # out_dir: a folder that holds a run
    for sentence, (args, kwargs) in refusals.items():
        with pytest.raises(ConfigError, match=sentence):
            api_run(*args, **kwargs)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_slurm_states_without_accounting_are_read_in_one_scontrol_call(monkeypatch):
    """Without slurmdbd, sacct fails and submitit says UNKNOWN: the states come from one ``scontrol show
    job -o`` per poll, a pending array's task range expanded (Slurm prints it on one line)."""
    from types import SimpleNamespace

    from decpriv import scheduler

    shown = (
        "JobId=7 ArrayJobId=5 ArrayTaskId=1 JobState=CANCELLED Reason=None\n"
        "JobId=8 ArrayJobId=5 ArrayTaskId=0 JobState=COMPLETING\n"
        "JobId=5 ArrayJobId=5 ArrayTaskId=2-3,5%2 JobState=PENDING Reason=JobArrayTaskLimit\n"
    )
    calls = []
    monkeypatch.setattr(
        scheduler.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or SimpleNamespace(stdout=shown)
    )
    monkeypatch.setitem(scheduler._scontrol, "at", float("-inf"))
    monkeypatch.setitem(scheduler._scontrol, "states", {})
    states = scheduler._scontrol_states()
    assert states["5_1"] == "CANCELLED" and states["5_0"] == "COMPLETING"
    assert [states[f"5_{t}"] for t in (2, 3, 5)] == ["PENDING"] * 3 and "5_4" not in states
    assert scheduler._scontrol_states() is states and len(calls) == 1  # once a poll
