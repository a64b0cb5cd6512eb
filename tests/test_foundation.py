"""The foundation as a user meets it: the CLI, run folders, sweeps, diff, bad input, determinism."""

import json
from pathlib import Path

import pandas as pd
import pytest

from decpriv.api import run as api_run

FAST = ["protocol.rounds=4", "topology.n=8"]


def _only_run(base: Path) -> Path:
    runs = [p.parent for p in base.glob("runs/*/*/run.json")]
    assert len(runs) == 1, runs
    return runs[0]


def test_default_run_writes_a_complete_run_folder(cli, tmp_path):
    proc = cli("run", check=True)
    run = _only_run(tmp_path)
    assert run.parent.name.count("-") == 2 and run.name.count("-") == 2  # runs/<YYYY-MM-DD>/<HH-MM-SS>
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "completed" and meta["seed"] == 0
    assert set(meta["wall_seconds"]) >= {"build", "simulate", "write", "total"}
    summary = pd.read_csv(run / "summary.csv")
    assert len(summary) == 1 and summary.status[0] == "completed"
    assert summary.test_accuracy[0] > 0.85  # 16-node ring, an MLP on 17 digits a node, 100 rounds: 0.92
    assert {"topology", "topology.n", "protocol.lr", "seed"} <= set(summary.columns)
    history = pd.read_csv(run / "history.csv")
    assert history["round"].iloc[0] == 0 and history["round"].iloc[-1] == 100
    assert history.test_accuracy.iloc[-1] > history.test_accuracy.iloc[0]
    assert (run / ".hydra" / "config.yaml").is_file()
    assert (run / "plots" / "training.png").stat().st_size > 10_000
    assert str(run.name) in proc.stdout and "test_accuracy" in proc.stdout
    # D-SGD's default attack: one curious node runs membership inference on what it receives
    assert summary.attack[0] == "dsgd_default" and summary["adversary.count"][0] == 1
    mia = pd.read_csv(run / "mia.csv")
    assert set(mia.view) == {"received", "marginalised", "auto"} and mia.victim.nunique() == 2
    # small local sets memorised: measured 0.846 against a null 97.5% of 0.659
    assert summary.mia_received_auc[0] > summary.mia_received_auc_null_hi[0] + 0.1
    assert (run / "plots" / "mia_vs_generalisation.png").stat().st_size > 10_000
    assert "mia_marginalised_auc" in proc.stdout


def test_a_protocol_without_a_default_attack_trains_only(cli, tmp_path):
    cli("run", "protocol=gossip", "partition=one_per_node", "topology.n=8", "hydra.run.dir=g", check=True)
    summary = pd.read_csv(tmp_path / "g" / "summary.csv")
    assert summary.attack[0] == "none" and not any(c.startswith("mia_") for c in summary.columns)


def test_the_default_attack_names_itself_when_it_refuses(cli, tmp_path):
    lsq = [
        "data=least_squares",
        "model=linear_regression",
        "partition=contiguous",
        "protocol.batch_size=null",
    ]
    proc = cli("run", *lsq, "hydra.run.dir=l")
    assert proc.returncode == 2
    assert (
        "attack=dsgd_default is what protocol=dsgd runs by default" in proc.stderr
        and "~attack" in proc.stderr
    )
    cli("run", *lsq, "~attack", "protocol.rounds=3", "hydra.run.dir=l2", check=True)


def test_overrides_and_hydra_run_dir(cli, tmp_path):
    cli(
        "run",
        "topology=torus",
        "topology.n=9",
        "protocol.rounds=3",
        "seed=5",
        "hydra.run.dir=out",
        check=True,
    )
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert summary["topology"][0] == "torus" and summary["nodes"][0] == 9 and summary["edges"][0] == 18
    assert summary["seed"][0] == 5


def test_multirun_sweep_summary_and_failed_job_does_not_stop_others(cli, tmp_path):
    # lr=1e38 passes every check but training diverges at run time: that job fails, the other completes.
    proc = cli("run", "-m", *FAST, "protocol.lr=0.1,1e38", "hydra.sweep.dir=sweep")
    assert proc.returncode == 1
    table = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert list(table.job.astype(str)) == ["0", "1"]
    assert list(table.status) == ["completed", "failed"]
    assert "diverged" in table.error[1] and "round" in table.error[1]
    assert json.loads((tmp_path / "sweep" / "1" / "run.json").read_text())["status"] == "failed"


def test_parallel_launcher(cli, tmp_path):
    cli(
        "run",
        "-m",
        *FAST,
        "seed=0,1",
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=2",
        "hydra.sweep.dir=sw",
        check=True,
    )
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert sorted(table.seed) == [0, 1] and (table.status == "completed").all()


def test_same_seed_gives_identical_tables_and_diff_agrees(cli, tmp_path):
    for name in ("a", "b", "c"):
        seed = "1" if name == "c" else "0"
        cli("run", *FAST, f"seed={seed}", f"hydra.run.dir={name}", check=True)
    for table in ("summary.csv", "history.csv", "nodes.csv"):
        assert (tmp_path / "a" / table).read_bytes() == (tmp_path / "b" / table).read_bytes()
    same = cli("diff", "a", "b")
    assert same.returncode == 0, same.stdout
    other = cli("diff", "a", "c")
    assert other.returncode == 1 and "test_accuracy" in other.stdout and "seed" in other.stdout


def test_diff_tolerance_on_csv_files(cli, tmp_path):
    pd.DataFrame({"round": [0, 1], "loss": [1.0, 0.5]}).to_csv(tmp_path / "x.csv", index=False)
    pd.DataFrame({"round": [0, 1], "loss": [1.0, 0.5001]}).to_csv(tmp_path / "y.csv", index=False)
    assert cli("diff", "x.csv", "y.csv").returncode == 1
    assert cli("diff", "x.csv", "y.csv", "--rtol", "1e-3").returncode == 0
    assert cli("diff", "x.csv", "y.csv", "--rtol", "1e-5").returncode == 1


@pytest.mark.parametrize(
    ("override", "mentions"),
    [
        ("topology=nosuch", "topology"),
        ("protocol.rounds=abc", "protocol.rounds"),
        ("protocol.lr=-1", "protocol.lr"),
        ("protocol.nosuchkey=1", "nosuchkey"),
        ("device=tpu", "device"),
        ("adversary.nodes=[99]", "adversary.nodes"),
    ],
)
def test_bad_input_is_one_sentence_exit_2_and_writes_nothing(cli, tmp_path, override, mentions):
    proc = cli("run", override)
    assert proc.returncode == 2
    message = proc.stderr.strip()
    assert mentions in message and "Traceback" not in message
    assert len(message.splitlines()) <= 2  # one sentence, wrapped at most once by the terminal
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("summary.csv"))


def test_bad_value_in_a_sweep_is_refused_before_any_job(cli, tmp_path):
    proc = cli("run", "-m", "topology=torus", "topology.n=9,10", "hydra.sweep.dir=sw")
    assert proc.returncode == 2 and "topology.n=10" in proc.stderr
    assert not (tmp_path / "sw").exists()


def test_failure_during_the_run_is_recorded_and_nothing_looks_complete(tmp_path, monkeypatch):
    from decpriv.protocols import dsgd

    def explode(self, sim):
        raise RuntimeError("simulated crash in round 3")

    monkeypatch.setattr(dsgd.DSGD, "run", explode)
    with pytest.raises(RuntimeError):
        api_run(FAST, out_dir=tmp_path / "crash")
    meta = json.loads((tmp_path / "crash" / "run.json").read_text())
    assert meta["status"] == "failed" and "simulated crash" in meta["error"]
    assert not (tmp_path / "crash" / "history.csv").exists()
    assert pd.read_csv(tmp_path / "crash" / "summary.csv").status[0] == "failed"


def test_python_api_returns_tables(tmp_path):
    result = api_run([*FAST, "protocol=fedavg"], out_dir=tmp_path / "api")
    assert result.status == "completed"
    assert result.summary["protocol"] == "fedavg"
    assert list(result.history["round"]) == [0, 1, 2, 3, 4]
    assert len(result.nodes) == 8


def test_list_show_and_hydra_flags(cli, tmp_path):
    listing = cli("list", check=True).stdout
    for group in ("topology", "protocol", "data", "model", "partition", "gossip_matrix", "hydra/launcher"):
        assert group in listing
    assert "Cycle graph" in cli("list", "topology", check=True).stdout  # descriptions: one group's listing
    cli("run", *FAST, "hydra.run.dir=r", check=True)
    shown = cli("show", "r", check=True).stdout
    assert "completed" in shown and "test_accuracy" in shown and "history.csv" in shown
    job_cfg = cli("run", "--cfg", "job", "topology=complete", check=True).stdout
    assert "decpriv.graphs.topologies.complete" in job_cfg
    assert cli("run", "--info", "defaults").returncode == 0


def test_an_active_attack_is_refused_under_a_robust_aggregation_rule():
    from decpriv.api import compose_config
    from decpriv.errors import ConfigError
    from decpriv.experiment import build

    cfg, _ = compose_config(["attack=echo", "defense=self_centred_clipping", "adversary.nodes=[0]"])
    with pytest.raises(ConfigError, match="defense='self_centred_clipping': attack=echo forges messages"):
        build(cfg)
