"""Issue 24, at the edges: no silent wrong answer (a refusal naming key, value and fix, exit 2, no folder
written), one run per run folder, and sweep tables built from every job, not from the summary alone."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")
SMALL = ["topology.n=6", "protocol.rounds=2", "plots=false"]

# (argv, the key the one-line refusal names, a word of its reason)
REFUSED = [
    (["experiment=elmrini_fig2", "topology=ring"], "topology='ring'", "builds its own topology"),
    (
        ["attack=sybil_evasion", "adversary.sybils=3", "adversary.count=999"],
        "adversary.count=999",
        "not read",
    ),
    (["adversary.nodes=[1]", "adversary.strategy=first"], "adversary.strategy='first'", "not read"),
    (["adversary.rewire=true", "~attack"], "adversary.rewire=True", "not read"),
    (
        ["protocol=pdmm", "attack=diffgrad", "attack.t_max=0", "protocol.rounds=20"],
        "attack.t_max=0",
        "use 4..",
    ),
    (["protocol.eval_every=-1", "~attack"], "protocol.eval_every=-1", "null"),
    (["protocol.eval_every=0", "~attack"], "protocol.eval_every=0", "null"),
    (["protocol.rounds=100000000000000", "~attack"], "protocol.rounds=100000000000000", "1e+07"),
    (["protocol.lr=1e308", "~attack"], "protocol.lr=1e+308", "32-bit"),
    (["seed=99999999999999999999", "~attack"], "seed=99999999999999999999", "64 bits"),
    (["adversary=server", "attack=mia"], "adversary.count=0", "adversary=server owns no node"),
    (["topology.n=16", "adversary.count=16"], "adversary.count <= 15", "no victim"),
    (["model=cnn", "data=breast_cancer", "~attack"], "model='cnn'", "images"),
    (["model=logistic", "data=digits", "~attack"], "model='logistic'", "two classes"),
    (["data.test_fraction=1.5", "~attack"], "data.test_fraction=1.5", "[0, 1)"),
    (["topology.n=2000", "~attack"], "topology.n=2000", "fewer than the nodes"),
    (["hydra.run.dir="], "hydra.run.dir=''", "current folder"),
    (["topology.n=10000000000", "~attack"], "topology.n=10000000000", "1e+07"),
    (["data=gaussian_classes", "data.num_classes=1", "~attack"], "data.num_classes=1", ">= 2"),
    (["data=gaussian_classes", "data.dim=0", "~attack"], "data.dim=0", ">= 1"),
]


@pytest.mark.parametrize(("extra", "key", "reason"), REFUSED, ids=[" ".join(c[0]) for c in REFUSED])
def test_odd_inputs_are_refused_naming_key_value_and_fix(extra, key, reason, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["run", *SMALL, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert key in err and reason in err, err
    assert not any(tmp_path.iterdir()), "nothing is written"


def test_a_sweep_launcher_option_that_fails_late_is_refused_first(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "-m", "seed=0,1", *SMALL, "hydra/launcher=parallel", "hydra.launcher.n_jobs=0"]
    assert main(argv) == 2
    assert "hydra.launcher.n_jobs=0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_preset_records_the_graph_it_built(tmp_path, monkeypatch):
    from decpriv.api import compose_config
    from decpriv.experiment import flatten_config

    cfg, choices = compose_config(["experiment=elmrini_fig2"])[:2]
    assert flatten_config(cfg, choices)["topology"] == "erdos_renyi_mean_degree"


def test_divergence_below_the_overflow_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "model=linear_regression", "data=digits", "topology.n=6", "protocol.rounds=5", "~attack"]
    assert main([*argv, "plots=false", "hydra.run.dir=out"]) == 0
    err = capsys.readouterr().err
    assert "train_loss grew from" in err and "lower protocol.lr" in err
    meta = json.loads((tmp_path / "out" / "run.json").read_text())
    assert any("training diverged" in w for w in meta["warnings"])


def test_divergence_under_a_defense_names_its_noise():
    """Measured on the default run with user-level DECOR (defense.level=user, epsilon 10): train_loss
    2.31 -> 3282, and no learning rate from 0.5 to 0.01 trains through that noise; the warning says so
    rather than only 'lower protocol.lr'."""
    import torch

    from decpriv.defenses.base import Mechanism
    from decpriv.experiment import check_finite
    from decpriv.protocols.base import Outcome

    history = pd.DataFrame({"round": [0, 10], "train_loss": [2.31, 3282.0]})
    outcome = Outcome(history, torch.zeros(2, 3), {})
    with pytest.warns(
        UserWarning, match=r"less noise \(the defense's private std is 41\.2 x its clip 1.*defense\.sigma_cor"
    ):
        check_finite(outcome, Mechanism("gradients", 1.0, 41.2, correlated=True))
    with pytest.warns(UserWarning, match=r"diverged; lower protocol\.lr$"):
        check_finite(outcome, None)


def test_a_run_folder_holds_one_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = ["run", *SMALL, "~attack"]
    assert main([*run, "hydra.run.dir=out"]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    capsys.readouterr()
    assert main([*run, "protocol.rounds=3", "hydra.run.dir=out"]) == 2
    assert "a run folder holds one run" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep\n")
    assert main([*run, "hydra.run.dir=notes"]) == 2
    assert "not empty (mine.txt)" in capsys.readouterr().err
    sweep = ["run", "-m", "seed=0,1", *SMALL, "~attack", "hydra.sweep.dir=sw"]
    assert main(sweep) == 0
    capsys.readouterr()
    assert main([*sweep[:2], "seed=5", *sweep[3:]]) == 2  # a new sweep into the old one's folder
    assert "resume=true" in capsys.readouterr().err
    assert main([*sweep, "resume=true"]) == 0  # resuming it is the way in


def test_two_runs_into_one_named_folder_at_once_one_is_refused(tmp_path):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "decpriv.cli", "run", *SMALL, "~attack", "hydra.run.dir=out"]
    code = "import sys; from decpriv.cli import entry; sys.argv = ['decpriv', *sys.argv[1:]]; entry()"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, *argv[3:]], cwd=tmp_path, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 2]
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert len(summary) == 1 and summary.status[0] == "completed"


def test_resume_reruns_a_failed_job_without_its_old_files(tmp_path):
    from decpriv.report.run_folder import RunFolder

    folder = RunFolder(tmp_path / "job")
    folder.start(0, "cpu", "d1")
    folder.write_table("history", pd.DataFrame({"round": [0]}))
    folder.fail(RuntimeError("x"))
    (tmp_path / "job" / "stale.csv").write_text("a\n1\n")  # a table the failed run left
    again = RunFolder(tmp_path / "job")
    again.start(0, "cpu", "d2")
    assert not (tmp_path / "job" / "stale.csv").exists()


def _job(folder: Path, status: str, digest: str, summary: str | None, **row: object) -> None:
    folder.mkdir(parents=True)
    meta = {"status": status, "config_digest": digest, "started": "2026-01-01T00:00:00", "metrics": ["acc"]}
    (folder / "run.json").write_text(json.dumps(meta))
    if summary is not None:
        (folder / "summary.csv").write_text(summary)
    elif row:
        pd.DataFrame([{"status": status, **row}]).to_csv(folder / "summary.csv", index=False)


def test_a_garbage_summary_is_neither_completed_nor_kept_by_resume(tmp_path):
    from decpriv.report.aggregate import load_sweep
    from decpriv.report.resume import already_completed

    _job(tmp_path / "0", "completed", "d", None, acc=0.5, seed=0)
    _job(tmp_path / "1", "completed", "d", "hello\nworld\n")
    _job(tmp_path / "2", "completed", "d", "status,acc\nfailed,0.1\n")  # not the completed run's row
    sweep = load_sweep(tmp_path)
    assert dict(zip(sweep.table.job, sweep.table.status, strict=True)) == {
        "0": "completed",
        "1": "corrupt",
        "2": "corrupt",
    }
    assert list(sweep.completed.job) == ["0"]
    assert already_completed(tmp_path / "0", "d")
    assert not already_completed(tmp_path / "1", "d") and not already_completed(tmp_path / "2", "d")


def test_a_run_json_of_wrong_types_is_one_skipped_folder_not_a_stopped_index(tmp_path):
    from decpriv.report.runs_index import index

    _job(tmp_path / "a", "completed", "d", None, acc=0.5)
    _job(tmp_path / "b", "completed", "d", None, acc=0.5)
    (tmp_path / "b" / "run.json").write_text(json.dumps({"status": 3, "wall_seconds": [1], "metrics": "x"}))
    with pytest.warns(UserWarning, match="skipped .*b.*field 'status' is int"):
        table = index(tmp_path)
    assert list(table.run) == [(tmp_path / "a").as_posix()]


def test_diff_of_two_sweeps_compares_every_jobs_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("A", "B"):
        assert main(["run", "-m", "seed=0,1", *SMALL, "~attack", f"hydra.sweep.dir={name}"]) == 0
    capsys.readouterr()
    assert main(["diff", "A", "B"]) == 0
    capsys.readouterr()
    history = tmp_path / "B" / "1" / "history.csv"
    table = pd.read_csv(history)
    table.loc[1, "consensus_distance"] *= 1.5  # a job's history changes, its summary does not
    table.to_csv(history, index=False)
    assert main(["diff", "A", "B", "--format", "csv"]) == 2  # not the table its run wrote: refused
    assert "(job 1, damaged: its history.csv was changed since the run wrote it" in capsys.readouterr().err
    meta = json.loads((history.parent / "run.json").read_text())
    del meta["tables"]["history.csv"], meta["run_json_sha256"]  # as a run from before the marks
    (history.parent / "run.json").write_text(json.dumps(meta))
    assert main(["diff", "A", "B", "--format", "csv"]) == 1
    rows = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert set(rows.table) == {"1/history"} and set(rows.column) == {"consensus_distance"}


def test_diff_refuses_a_negative_tolerance(tmp_path, capsys):
    _job(tmp_path / "r", "completed", "d", None, acc=0.5)
    assert main(["diff", str(tmp_path / "r"), str(tmp_path / "r"), "--rtol", "-1"]) == 2
    assert "--rtol=-1.0" in capsys.readouterr().err


@pytest.mark.parametrize("rows", ["-3", "-1"])
def test_show_refuses_a_negative_row_count(rows, tmp_path, capsys):
    _job(tmp_path / "r", "completed", "d", None, acc=0.5)
    assert main(["show", str(tmp_path / "r"), "--rows", rows]) == 2
    assert f"--rows={rows}" in capsys.readouterr().err


def test_list_help_is_help(capsys):
    assert main(["list", "--help"]) == 0
    assert "usage: decpriv list" in capsys.readouterr().out


def test_the_large_ring_run_finishes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "topology.n=30000", "protocol=gossip", "data=gaussian_classes", "data.size=60000"]
    assert main([*argv, "~attack", "protocol.rounds=2", "plots=false", "hydra.run.dir=out"]) == 0
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert summary.spectral_gap_method[0] == "closed form (ring)"
    assert summary.spectral_gap[0] == pytest.approx((2 - 2 * math.cos(2 * math.pi / 30000)) / 3, rel=1e-9)


def test_list_prints_bracketed_text_literally(capsys):
    assert main(["list", "hydra/launcher"]) == 0
    assert "'.[slurm]'" in capsys.readouterr().out.replace("\n", "")


def test_the_slurm_options_pointed_at_the_local_executor_are_refused(tmp_path, monkeypatch, capsys):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.chdir(tmp_path)
    local = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    argv = ["run", "-m", "seed=0,1", *SMALL, "hydra/launcher=slurm", f"hydra.launcher._target_={local}"]
    assert main(argv) == 2
    assert "use hydra/launcher=submitit_local" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
