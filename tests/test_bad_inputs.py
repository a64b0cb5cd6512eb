"""Reliability as a new user meets it: bad inputs and faults are refused in one line, before any folder
exists; no result is lost (unique run folders), none is left half-written, and no run stays "running"
after its process died.

The table runs every case through the CLI entry in the same process (what ``decpriv`` calls); the few
cases that need real processes (two runs at once, a run killed outright, a run stopped by a signal) start
subprocesses, and the signals go to those, never to the test's own process.
"""

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import torch

from decpriv import NO_USER_CONF
from decpriv.cli import main
from decpriv.report.run_folder import RunFolder, claim_folder, read_status

# pytest drops the warning filters set while it imports the tests, decpriv's own among them (__init__.py);
# the CLI runs in this process below need it back. Runs in a subprocess keep it (the one-line refusal of
# test_end_to_end_speed's parallel sweep fails without it).
pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")

ROUNDS = ["protocol.rounds=1", "topology.n=6", "~attack"]


def _edges(tmp: Path) -> dict[str, Path]:
    files = {
        "malformed": "0 1\n1\n",
        "empty": "# only a comment\n",
        "loops": "0 1\n1 2\n2 0\n2 2\n5 6\n",
    }
    paths = {name: tmp / f"{name}.txt" for name in files}
    for name, text in files.items():
        paths[name].write_text(text)
    paths["binary"] = tmp / "binary.txt"
    paths["binary"].write_bytes(bytes(range(256)) * 4)
    return paths


# (argv, exit status, text the one stderr line must contain, text it must not contain)
CONFIG_CASES = [
    (["run", "+foo=1"], 2, "foo=1", None),
    (["run", "protocol.lr=nan"], 2, "protocol.lr=nan", None),
    (["run", "defense=ldp", "defense.epsilon=-inf"], 2, "defense.epsilon=-inf", None),
    (["run", "name=../../x"], 2, "name=", None),
    (["run", "topolgy=ring"], 2, "did you mean topology", None),
    (["run", "topology=torsu"], 2, "did you mean torus", None),
    (["run", "protocol.lrr=0.1"], 2, "did you mean protocol.lr", None),
    (["run", "attack=null"], 2, "write ~attack", None),
    (["run", "adversary.nodes=[1,1]"], 2, "adversary.nodes", None),
    (["run", "plots=maybe"], 2, "use plots=true or plots=false", None),
    # cross-plugin checks: decided by the build, before any folder
    (["run", "attack=knowledge_matrix", "protocol=dsgd"], 2, "protocol.batch_size", "dsgd_default"),
    (["run", "protocol=gossip", "attack=diffgrad"], 2, "protocol", "gossip_default"),
    (["run", "protocol=pdmm", "defense=muffliato"], 2, "defense", "pdmm_default"),
    (["run", "data=mnist", "data.root=plain_file/mnist"], 2, "data.root", "dsgd_default"),
    (["run", "-m", "protocol=dsgd", "attack=mia,knowledge_matrix"], 2, "protocol.batch_size", None),
    # a hint appears only when the default attack is the cause
    (["run", "topology=torus", "topology.n=10"], 2, "topology.n=10", "~attack"),
    (["run", "protocol.lr=-1"], 2, "protocol.lr", "~attack"),
    # output folders that cannot be written
    (["run", "hydra.run.dir=/proc/decpriv_x"], 2, "hydra.run.dir", None),
    (["run", "hydra.run.dir=plain_file/x"], 2, "hydra.run.dir", None),
    (["run", "-m", "seed=0,1", "hydra.sweep.dir=plain_file/x"], 2, "hydra.sweep.dir", None),
]
if not torch.cuda.is_available():
    CONFIG_CASES.append((["run", "device=cuda"], 2, "device", None))
EDGE_CASES = [("malformed", "line 2"), ("binary", "not a text file"), ("empty", "no edges")]


def _one_line(capsys, argv: list[str], status: int, must: str, must_not: str | None) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == status, (argv, code, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)
    assert must in err, (argv, err)
    assert must_not is None or must_not not in err, (argv, err)
    return err


def test_bad_config_is_one_line_exit_2_and_creates_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("plain_file").write_text("not a folder\n")
    for argv, status, must, must_not in CONFIG_CASES:
        _one_line(capsys, [*argv, "protocol.rounds=3"], status, must, must_not)
    edges = _edges(tmp_path)
    for name, must in EDGE_CASES:
        argv = ["run", "topology=edgelist", f"topology.path={edges[name]}"]
        _one_line(capsys, argv, 2, must, "Error in call")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["plain_file", *[f.name for f in edges.values()]]
    )


def _fake_run(folder: Path, status: str = "completed", **summary: object) -> Path:
    folder.mkdir(parents=True)
    meta = {"status": status, "started": "2026-01-01T00:00:00", "metrics": ["test_accuracy"]}
    (folder / "run.json").write_text(json.dumps(meta))
    pd.DataFrame([{"status": status, "test_accuracy": 0.5, **summary}]).to_csv(
        folder / "summary.csv", index=False
    )
    return folder


def test_reading_commands_refuse_corrupt_or_foreign_folders_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    good = _fake_run(tmp_path / "runs" / "good", topology="ring")
    bad_json = _fake_run(tmp_path / "runs" / "bad_json")
    (bad_json / "run.json").write_text('{"status": "compl')
    bad_csv = _fake_run(tmp_path / "runs" / "bad_csv")
    (bad_csv / "summary.csv").write_bytes(b'"unterminated,\x00\x01\n1,2,3,4\n')
    unwritable = _fake_run(tmp_path / "unwritable")
    (unwritable / "report").write_text("a file where report/ would go\n")
    for folder in ("etc", "share"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.txt").write_text("not a run\n")
    cases = [
        (["show", str(bad_json)], 2, "run.json"),
        (["show", str(bad_csv)], 2, "summary.csv"),
        (["report", str(bad_json)], 2, "run.json"),
        (["report", str(bad_csv)], 2, "summary.csv"),
        (["diff", str(good), str(bad_json)], 2, "run.json"),
        (["diff", str(good), str(bad_csv)], 2, "summary.csv"),
        (["diff", "etc", "share"], 2, "not a run or sweep folder"),
        (["diff", str(good), "etc"], 2, "etc"),
        (["runs", "--root", str(good), "nosuchkey=3"], 2, "nosuchkey"),
        (["runs", "--root", str(good), "topolgy=ring"], 2, "did you mean topology"),
        (["list", "nosuchgroup"], 2, "nosuchgroup"),
        (["list", "topolgy"], 2, "did you mean topology"),
        (["report", str(unwritable)], 1, "report"),
        (
            ["plot", str(good), "x=topology", "y=test_accuracy", "table=summary", "out=/proc/x/y.png"],
            1,
            "/proc",
        ),
    ]
    for argv, status, must in cases:
        _one_line(capsys, argv, status, must, None)
    # one corrupt folder does not break the index: an unreadable run.json is skipped with a warning, a
    # garbage summary.csv listed as corrupt (never as a result) with one
    assert main(["runs", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    listed = pd.read_csv(__import__("io").StringIO(captured.out))
    assert dict(zip(listed.run, listed.status, strict=True)) == {
        "runs/good": "completed",
        "runs/bad_csv": "corrupt",
    }
    warned = captured.err.strip().splitlines()
    assert len(warned) == 2 and all(w.startswith("warning: ") for w in warned), warned
    assert main(["list", "topology"]) == 0 and "torus" in capsys.readouterr().out


def test_claimed_folders_are_unique_across_threads(tmp_path):
    base = tmp_path / "runs" / "12-00-00"
    found: list[Path] = []
    threads = [threading.Thread(target=lambda: found.append(claim_folder(base))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 8 and base in found and base.with_name("12-00-00-8") in found


def _forked(target, *args, method: str = "fork") -> multiprocessing.Process:
    """A child process of this one. Runs that train are spawned: a forked child of a process whose torch
    already ran OpenMP threads can deadlock in its first parallel region (as under pytest-xdist)."""
    child = multiprocessing.get_context(method).Process(target=target, args=args)
    child.start()
    return child


class _SameSecond(datetime):
    @classmethod
    def now(cls, tz=None) -> datetime:
        return cls(2026, 1, 1, 12, 0, 0)


def _cli_child(argv: list[str], out: Path) -> None:
    import hydra.core.utils

    hydra.core.utils.datetime = _SameSecond  # Hydra's ${now:} clock: both runs start in the same second
    with open(out, "w") as stream:
        sys.stdout = sys.stderr = stream
        os._exit(main(argv))


def _killed_child(folder: Path) -> None:
    RunFolder(folder).start(0, "cpu", "digest")
    os.kill(os.getpid(), signal.SIGKILL)


def test_two_runs_at_once_keep_both_results_and_a_killed_run_reads_as_interrupted(
    tmp_path, monkeypatch, capsys
):
    """Two runs started in the same instant from one folder, and a process killed outright (SIGKILL)."""
    monkeypatch.chdir(tmp_path)
    pair = [_forked(_cli_child, ["run", *ROUNDS], tmp_path / f"out{k}.txt", method="spawn") for k in range(2)]
    killed = _forked(_killed_child, tmp_path / "killed")
    for child in pair:
        child.join(timeout=300)
    outs = [(tmp_path / f"out{k}.txt").read_text() for k in range(2)]
    assert [p.exitcode for p in pair] == [0, 0], outs
    folders = sorted(p.parent for p in (tmp_path / "runs").glob("*/*/run.json"))
    assert len(folders) == 2 and all(read_status(f)["status"] == "completed" for f in folders)
    assert [f.name for f in folders] == ["12-00-00", "12-00-00-2"]  # the second run got a suffix
    printed = ["".join(o.split()) for o in outs]  # the terminal may wrap the path
    shown = [f.relative_to(tmp_path) for f in folders]  # printed relative to the working directory
    assert all(any(f"runfolder:{f}" in p for p in printed) for f in shown), outs
    killed.join(timeout=60)
    assert killed.exitcode == -signal.SIGKILL
    raw = json.loads((tmp_path / "killed" / "run.json").read_text())
    assert raw["status"] == "running" and raw["pid"] == killed.pid
    assert read_status(tmp_path / "killed")["status"] == "interrupted"
    assert main(["runs", "--root", str(tmp_path), "--format", "csv", "status=interrupted"]) == 0
    listed = capsys.readouterr().out
    assert "killed" in listed and "runs/" not in listed


def _waited(run: subprocess.Popen, folder: Path, how: str) -> int:
    """The run's exit status; a run still alive 300 s after the signal is killed and the test fails with
    what it had said: whether it ended its run (then it hung on the way out) or never took the signal."""
    try:
        return run.wait(timeout=300)
    except subprocess.TimeoutExpired:
        run.kill()
        log = (
            (folder / "decpriv.log").read_text().splitlines()[-5:]
            if (folder / "decpriv.log").is_file()
            else []
        )
        pytest.fail(
            f"alive 300 s after {how}: run.json {read_status(folder).get('status')!r}, log tail {log}"
        )


def _interrupt_when_running(folder: Path, send) -> threading.Thread:
    """Interrupt the run once it runs; again (as a user presses Ctrl-C again) if it still runs 10 s later:
    in one full-suite run on the loaded machine the first one was lost and the run went on to the end."""

    def running() -> bool:
        return (folder / "run.json").is_file() and read_status(folder).get("status") == "running"

    def wait_then_send() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not running():
            time.sleep(0.1)
        time.sleep(0.3)
        for _ in range(3):
            send()
            waited = time.time()
            while running() and time.time() - waited < 10:
                time.sleep(0.1)
            if not running():
                return

    thread = threading.Thread(target=wait_then_send, daemon=True)
    thread.start()
    return thread


# decpriv as a terminal's foreground job starts it, Ctrl-C taken: a suite started in the background (`make
# test &`, nohup) hands its processes SIGINT ignored, which Python then keeps, and a SIGINT would do nothing
ENTRY = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from decpriv.cli import entry; sys.argv = ['decpriv', *sys.argv[1:]]; entry()"
)


def _decpriv(cwd: Path, *args: str) -> subprocess.Popen:
    """``decpriv ARGS`` in its own process: the signals below go to it, not to the test's worker."""
    return subprocess.Popen([sys.executable, "-c", ENTRY, *args], cwd=cwd, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("SIGTERM", 143),
        ("SIGINT", 130),
    ],
)
def test_sigterm_and_ctrl_c_mark_the_run_failed_in_one_line(tmp_path, how, status):
    run = _decpriv(tmp_path, "run", "protocol.rounds=1000000", "topology.n=4", "~attack", "hydra.run.dir=r")
    thread = _interrupt_when_running(tmp_path / "r", lambda: run.send_signal(getattr(signal, how)))
    code = _waited(run, tmp_path / "r", how)
    thread.join()
    err = run.stderr.read().strip()
    assert code == status and len(err.splitlines()) == 1 and "interrupted" in err, err
    meta = read_status(tmp_path / "r")
    assert meta["status"] == "failed" and meta["error"] == f"interrupted: {how}"
    assert sorted(f.name for f in (tmp_path / "r").glob("*.csv")) == ["summary.csv"]
    assert pd.read_csv(tmp_path / "r" / "summary.csv").status[0] == "failed"


def test_an_interrupted_sweep_still_writes_its_summary(tmp_path):
    argv = [
        "run",
        "-m",
        "seed=0,1",
        "protocol.rounds=1000000",
        "topology.n=4",
        "~attack",
        "hydra.sweep.dir=s",
    ]
    sweep = _decpriv(tmp_path, *argv)
    thread = _interrupt_when_running(tmp_path / "s" / "0", lambda: sweep.send_signal(signal.SIGTERM))
    assert sweep.wait(timeout=300) == 143
    thread.join()
    said = " ".join(sweep.stderr.read().split())
    assert "interrupted by SIGTERM: the sweep in s stopped; 2 of 2 jobs did not complete" in said
    table = pd.read_csv(tmp_path / "s" / "summary.csv")  # the ledger: every planned job, how it ended
    assert list(table.job) == [0, 1] and list(table.status) == ["interrupted", "never started"]
    assert table.error[0] == "interrupted: SIGTERM" and list(table.seed) == [0, 1]


def _ctrl_c_burst(group: subprocess.Popen, count: int, gap: float) -> None:
    """Ctrl-C pressed again and again: the terminal signals the whole process group (the sweep and its
    workers, and whatever they start), here until the sweep has ended."""
    for _ in range(count):
        if group.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group.pid, signal.SIGINT)
        time.sleep(gap)


@pytest.mark.slow
def test_ctrl_c_pressed_again_during_a_parallel_sweeps_shutdown_ends_in_one_line(tmp_path):
    """About 15 s (two joblib workers start torch): before, the presses during the shutdown printed loky's
    pgrep CalledProcessError, an atexit KeyboardInterrupt or a worker's traceback, and exited -2."""
    argv = ["run", "-m", "seed=0,1", "protocol.rounds=1000000", "topology.n=4", "~attack"]
    argv += ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=s"]
    sweep = subprocess.Popen(
        [sys.executable, "-c", ENTRY, *argv],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the presses reach it and its workers, not pytest
    )
    deadline = time.time() + 180
    while time.time() < deadline and not all(
        read_status(tmp_path / "s" / str(job)).get("status") == "running" for job in (0, 1)
    ):
        time.sleep(0.1)
    _ctrl_c_burst(sweep, 80, 0.02)
    err = sweep.communicate(timeout=120)[1].strip()
    assert sweep.returncode == 130 and len(err.splitlines()) == 1, err
    assert "interrupted by SIGINT: the sweep in s stopped; 2 of 2 jobs did not complete" in " ".join(
        err.split()
    )
    table = pd.read_csv(tmp_path / "s" / "summary.csv")  # the ledger: both jobs marked interrupted
    assert list(table.status) == ["interrupted", "interrupted"]


def test_a_full_disk_while_writing_leaves_no_table_that_looks_complete(tmp_path, monkeypatch):
    from decpriv.api import run as api_run

    written = []
    original = RunFolder.write_table

    def fill_up(self, name, table):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(name)
        original(self, name, table)

    monkeypatch.setattr(RunFolder, "write_table", fill_up)
    with pytest.raises(OSError, match="No space"):
        api_run(ROUNDS, out_dir=tmp_path / "full")
    assert len(written) == 2
    assert read_status(tmp_path / "full")["status"] == "failed"
    assert not list((tmp_path / "full").glob("*.csv")) and not list((tmp_path / "full").rglob("*.png"))


def test_diverging_training_fails_with_the_round(tmp_path):
    from decpriv.api import run as api_run
    from decpriv.errors import Diverged

    with pytest.raises(Diverged) as caught:
        api_run(["protocol.lr=1e38", "protocol.rounds=5", "topology.n=4", "~attack"], out_dir=tmp_path / "d")
    meta = read_status(tmp_path / "d")
    assert meta["status"] == "failed" and f"at round {caught.value.diverged_at}" in meta["error"]
    assert 0 < caught.value.diverged_at <= 5
    assert not (tmp_path / "d" / "history.csv").exists()


def test_silent_repairs_are_reported_once_on_stderr_and_in_run_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    edges = _edges(tmp_path)
    argv = ["run", "topology=edgelist", f"topology.path={edges['loops']}", "protocol.rounds=1", "~attack"]
    argv.append("hydra.run.dir=g")
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    err = [line for line in err if not line.startswith("decpriv: ")]  # the phase lines (not a terminal)
    assert len(err) == 2 and all(line.startswith("warning: topology") for line in err), err
    assert any("self-loop" in line for line in err) and any("2 components" in line for line in err)
    meta = read_status(tmp_path / "g")
    assert meta["warnings"] == [line.removeprefix("warning: ") for line in err]
    assert pd.read_csv(tmp_path / "g" / "summary.csv").nodes[0] == 3


def test_a_protocol_without_the_per_round_guard_is_still_stopped_at_the_first_bad_round():
    from decpriv.errors import Diverged
    from decpriv.experiment import check_finite
    from decpriv.protocols.base import Outcome

    # a nan in a column that is not a loss (a residual undefined before round 1) is not divergence
    history = pd.DataFrame(
        {"round": [0, 2, 4], "train_loss": [1.0, 2.0, 3.0], "residual": [float("nan"), 1, 1]}
    )
    check_finite(Outcome(history, torch.zeros(3, 2), {}))
    history["train_loss"] = [1.0, float("inf"), float("nan")]
    with pytest.raises(Diverged, match="train_loss became non-finite .* at round 2"):
        check_finite(Outcome(history, torch.zeros(3, 2), {}))
    history["train_loss"] = 1.0
    with pytest.raises(Diverged, match="final node parameters .* at round 4"):
        check_finite(Outcome(history, torch.tensor([[0.0, float("nan")]]), {}))


def test_a_corrupt_job_is_rerun_by_resume_and_skipped_with_a_warning_by_sweep_reports(tmp_path):
    from decpriv.report.resume import already_completed
    from decpriv.report.sweep import collect

    _fake_run(tmp_path / "0", "completed")
    _fake_run(tmp_path / "1", "completed")
    (tmp_path / "1" / "run.json").write_text("{not json")
    (tmp_path / "1" / "summary.csv").write_bytes(b'"\x00')
    assert not already_completed(tmp_path / "1", "digest")
    with pytest.warns(UserWarning, match="skipped job 1: .*run.json: unreadable or corrupt"):
        table = collect(tmp_path)
    assert list(table.job) == ["0"]


def test_slurm_without_its_plugin_names_the_extra(cli):
    """The slurm launcher's yaml needs Hydra's submitit plugin; without it the error says how to install it."""
    import importlib.util

    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
        pytest.skip("the submitit plugin is installed here")
    proc = cli("run", "-m", "hydra/launcher=slurm", "seed=0")
    assert proc.returncode == 2
    assert "pip install -e '.[slurm]'" in proc.stderr


BATCH = "a batch size (auto: min(16, the smallest local set); null: all) is int >= 1 | 'auto' | null"
BATCH_FIX = "use e.g. protocol.batch_size=16, protocol.batch_size=auto or protocol.batch_size=null."


@pytest.mark.parametrize(
    "override, sentence",
    [
        ("protocol.batch_size=1.5", f"protocol.batch_size=1.5: {BATCH}; {BATCH_FIX}"),
        ("protocol.batch_size=", f"protocol.batch_size='': {BATCH}; {BATCH_FIX}"),
        ("protocol.batch_size=1e100", f"protocol.batch_size=1e+100: {BATCH}; {BATCH_FIX}"),
        (
            "protocol.batch_size='16'",
            f"protocol.batch_size='16': {BATCH}, and quotes make it text; write it unquoted: "
            "protocol.batch_size=16.",
        ),
        (  # a float key keeps the overflow: that is what it is
            "protocol.lr=1e100",
            "protocol.lr=1e+100: the value overflows the 32-bit floats the models compute in (max 3.4e38); "
            "give a smaller, finite number.",
        ),
        (
            "name='emoji🙂'",
            "name='emoji🙂': the name becomes part of the run folder's name and may not contain '🙂'; use "
            "letters, digits, '-', '_' and '.'.",
        ),
        ("name='a b'", "may not contain a space;"),
        (
            "topology.n=300",
            "topology.n=300: the data's training split has 270 samples, fewer than the nodes, so some node "
            "would hold no data; use topology.n <= 270, or more data: data=gaussian_classes data.size=400 "
            "(a training split of 300).",
        ),
    ],
)
def test_refusals_name_what_the_key_takes(tmp_path, monkeypatch, capsys, override, sentence):
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, ["run", *ROUNDS, override], 2, "", None)
    assert sentence in " ".join(err.split()), err
    assert not list(tmp_path.iterdir())


def test_the_data_size_a_refusal_names_runs(tmp_path, monkeypatch, capsys):
    """The refusal's data set holds a sample for every node: its command runs."""
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, ["run", "topology.n=301", *ROUNDS[::2]], 2, "data=gaussian_classes", None)
    fix = err.rsplit("more data: ", 1)[1].split(" (")[0].split()
    assert fix == ["data=gaussian_classes", "data.size=402"]  # 402 - round(0.25 x 402) = 301 = n
    assert main(["run", "topology.n=301", *ROUNDS[::2], *fix, "plots=false", "hydra.run.dir=r"]) == 0
    assert pd.read_csv("r/summary.csv").loc[0, "nodes"] == 301


def test_a_blocklisted_target_in_a_users_yaml_is_one_sentence_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("conf/topology").mkdir(parents=True)
    Path("conf/topology/evil.yaml").write_text("_target_: os.system\ncommand: touch pwned\n")
    err = _one_line(capsys, ["run", "topology=evil", *ROUNDS[::2]], 2, "", None)
    assert " ".join(err.split()) == (
        "error: topology._target_='os.system': Hydra refuses to call it from a config (its blocklist: config "
        "data may not run commands), and conf/topology/evil.yaml names it; name a plugin's class or function "
        "(decpriv list topology shows decpriv's own)."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]  # no run folder, no file pwned
