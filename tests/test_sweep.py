"""Sweeps end to end: a real 2 x 2 x 2-seed sweep through the CLI, its aggregated table, report, plots,
resume, the runs index; plus a hand-made sweep whose statistics are solved by hand."""

import io
import json
import math
import re
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from decpriv.report.aggregate import aggregate, load_sweep

GRID = [
    "seed=0,1",
    "topology=ring,complete",
    "protocol.lr=0.1,0.3",
    "protocol.rounds=2",
    "topology.n=6",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sweep")
    run_cli("run", "-m", *GRID, "hydra.sweep.dir=sw", cwd=base, check=True)
    return base / "sw"


def _job_rows(sweep: Path) -> pd.DataFrame:
    """The jobs' own summary.csv files, read one by one: an independent path to the sweep's numbers."""
    return pd.concat([pd.read_csv(f) for f in sorted(sweep.glob("*/summary.csv"))], ignore_index=True)


def test_sweep_summary_has_every_job_with_swept_keys_first(sweep):
    table = pd.read_csv(sweep / "summary.csv")
    assert list(table.columns[:5]) == ["job", "status", "seed", "topology", "protocol.lr"]
    assert len(table) == 8 and (table.status == "completed").all()
    combos = set(zip(table.seed, table.topology, table["protocol.lr"], strict=True))
    assert combos == {(s, t, lr) for s in (0, 1) for t in ("ring", "complete") for lr in (0.1, 0.3)}


def test_aggregate_is_mean_std_count_over_seeds(sweep):
    found = load_sweep(sweep)
    assert found.keys == ["seed", "topology", "protocol.lr"]
    stats = aggregate(found)
    jobs = _job_rows(sweep)
    assert len(stats) == 4 * len(found.metrics)
    assert (stats["count"] == 2).all() and (stats["failed"] == 0).all()
    for topology in ("ring", "complete"):
        for lr in (0.1, 0.3):
            pair = jobs[(jobs.topology == topology) & (jobs["protocol.lr"] == lr)].test_accuracy.to_numpy()
            row = stats[
                (stats.topology == topology)
                & (stats["protocol.lr"] == lr)
                & (stats.metric == "test_accuracy")
            ].iloc[0]
            assert row["mean"] == pytest.approx(pair.mean(), rel=1e-9)
            assert row["std"] == pytest.approx(abs(pair[0] - pair[1]) / math.sqrt(2), rel=1e-9, abs=1e-12)
    # The ring never reaches exact consensus in 2 rounds; the complete graph with W = J/n does at once.
    consensus = stats[stats.metric == "consensus_distance"].set_index(["topology", "protocol.lr"])["mean"]
    assert (consensus.loc["complete"] < 1e-10).all() and (consensus.loc["ring"] > 1e-6).all()


def test_report_writes_tables_pictures_and_a_self_contained_page(sweep):
    proc = run_cli("report", str(sweep), check=True)
    out = sweep / "report"
    assert "mean ± std over seeds" in proc.stdout and "report.html" in proc.stdout
    stats = pd.read_csv(out / "aggregate.csv")
    assert list(stats.columns) == ["topology", "protocol.lr", "metric", "mean", "std", "count", "failed"]
    pictures = sorted((out / "plots").glob("*.png"))
    assert pictures and all(p.name.endswith("_vs_protocol.lr.png") for p in pictures)
    for picture in pictures:
        pixels = mpimg.imread(picture)
        height, width = pixels.shape[:2]
        assert 350 <= height <= 700 and 600 <= width <= 900, (picture.name, pixels.shape)
        assert pixels[..., :3].std() > 0.05  # lines, markers and text, not a blank canvas
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(pictures) and "<table" in page
    markdown = (out / "report.md").read_text()
    for link in re.findall(r"\]\((plots/[^)]+)\)", markdown):
        assert (out / link).is_file()
    assert "| ring | 0.3 | 2 |" in markdown
    # the attack's headline is drawn first, each metric with its null band
    links = re.findall(r"\]\((plots/[^)]+)\)", markdown)
    assert links[:2] == [
        "plots/mia_received_auc_vs_protocol.lr.png",
        "plots/mia_marginalised_auc_vs_protocol.lr.png",
    ]


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (fast): for commands that do not start Hydra jobs."""
    from decpriv.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_and_runs_are_readable_at_80_columns(sweep, capsys, monkeypatch):
    from decpriv import cli

    monkeypatch.setattr(cli, "console", cli.Console(width=80, force_terminal=False))
    code, out, _ = _main(capsys, "show", str(sweep))
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= 80
    header = next(line for line in lines if line.startswith("job"))
    names = header.split()
    # whole names: status, the attack's headline (each cell beside its null), the swept keys, then training
    assert names[:3] == ["job", "status", "mia_received_auc"] and names.index("seed") > 2
    table = pd.read_csv(sweep / "summary.csv")
    for job, auc in zip(table.job, table.mia_received_auc, strict=True):
        assert any(re.match(rf"{job}\s+completed\s+{auc:.4g} vs ", line) for line in lines)
    assert "pictures in the job folders" in out and out.count("training.png") == 1
    # a relative root, as a user types it: pytest-xdist's temporary paths alone are near 80 characters
    monkeypatch.chdir(sweep.parent.parent)
    code, out, _ = _main(capsys, "runs", "--root", sweep.parent.name)
    assert code == 0 and max(map(len, out.splitlines())) <= 80 and "…" not in out
    # every run's path whole, relative to --root (the title names it): decpriv show ROOT/PATH
    assert out.count(f"\n{sweep.name}/") == 8 and f"under {sweep.parent.name} (runs relative to it" in out


def test_custom_plot_and_its_refusals(sweep, capsys):
    code, out, _ = _main(capsys, "plot", str(sweep), "x=seed", "y=train_loss", "hue=topology,protocol.lr")
    picture = sweep / "plots" / "train_loss_vs_seed_by_topology_protocol.lr.png"  # not the report's
    assert code == 0 and picture.name in out.replace("\n", "")
    assert mpimg.imread(picture).shape[1] >= 600
    code, _, err = _main(capsys, "plot", str(sweep), "x=seed", "y=no_such_metric")
    assert code == 2 and "no_such_metric" in err and "Traceback" not in err
    assert _main(capsys, "plot", str(sweep), "x=seed")[0] == 2
    assert _main(capsys, "plot", str(sweep), "x=seed", "y=test_accuracy", "colour=red")[0] == 2
    assert _main(capsys, "plot", str(sweep), "x=seed", "y=topology")[0] == 2  # not a number
    # a swept key neither x nor hue: its values' jobs pooled into one point's spread, as if repeats
    code, _, err = _main(capsys, "plot", str(sweep), "x=topology", "y=train_loss")
    assert code == 2 and "the sweep's protocol.lr varies" in err and "add hue=protocol.lr" in err


def test_runs_index_filters_on_config_and_status(sweep, capsys):
    root = str(sweep.parent)
    code, out, _ = _main(
        capsys, "runs", "--root", root, "--format", "csv", "topology=ring", "protocol.lr=0.30"
    )
    table = pd.read_csv(io.StringIO(out))
    # seed, topology, lr: the last varies fastest; paths whole, as decpriv show takes them
    assert code == 0 and sorted(table.run) == [f"{root}/sw/1", f"{root}/sw/5"]
    digests = {p.parent.name: json.loads(p.read_text())["config_digest"] for p in sweep.glob("*/run.json")}
    assert list(table.config_digest) == [digests[r.rsplit("/", 1)[1]] for r in table.run]
    assert (table.headline == "mia_received_auc").all() and (table.attack == "mia").all()
    code, out, _ = _main(capsys, "runs", "--root", root, "--format", "csv", "status=failed")
    assert code == 0 and len(pd.read_csv(io.StringIO(out))) == 0
    assert _main(capsys, "runs", "--root", root, "topology")[0] == 2
    assert _main(capsys, "runs", "--root", str(sweep / "nowhere"))[0] == 2
    code, out, _ = _main(capsys, "list", "runs", "--root", root, "--format", "markdown", "seed=1")
    assert (
        code == 0
        and out.count("/sw/") == 4
        and out.startswith("| run | status | value | baseline | better | headline | attack |")
    )


def test_resume_skips_completed_jobs_with_the_same_digest(tmp_path, capsys):
    grid = ["protocol.rounds=2", "topology.n=6", "hydra.sweep.dir=sw"]
    run_cli("run", "-m", "seed=0,1", *grid, cwd=tmp_path, check=True)
    before = {j: (tmp_path / "sw" / j / "run.json").read_bytes() for j in ("0", "1")}
    grown = run_cli("run", "-m", "seed=0,1,2", *grid, "resume=true", cwd=tmp_path, check=True)
    assert "2 job(s) kept" in grown.stdout
    assert all((tmp_path / "sw" / j / "run.json").read_bytes() == before[j] for j in before)
    table = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(table.seed) == [0, 1, 2] and (table.status == "completed").all()
    assert "resume" not in table.columns
    # another sweep into that folder (another learning rate, fewer seeds) is refused: it holds one sweep
    for other in (["seed=0,1,2", "protocol.lr=0.2"], ["seed=0,1"], ["seed=1,0,2"]):
        changed = run_cli("run", "-m", *other, *grid, "resume=true", cwd=tmp_path)
        assert (
            changed.returncode == 2 and "resume=true finishes the sweep this folder holds" in changed.stderr
        )
    assert all((tmp_path / "sw" / j / "run.json").read_bytes() == before[j] for j in before)
    code, _, err = _main(capsys, "run", "-m", "seed=0,1", "resume=true")
    assert code == 2 and "hydra.sweep.dir" in err
    assert _main(capsys, "run", "-m", "seed=0,1", "hydra.sweep.dir=sw", "resume=maybe")[0] == 2


def _fake_sweep(folder: Path, rows: list[dict], swept: list[str]) -> Path:
    """A sweep folder as decpriv writes it: job folders with run.json + summary.csv, and multirun.yaml."""
    task = "\n".join(f"    - {k}=a,b" for k in swept)
    folder.mkdir(parents=True)
    (folder / "multirun.yaml").write_text(f"hydra:\n  overrides:\n    task:\n{task}\n")
    for job, row in enumerate(rows):
        (folder / str(job)).mkdir()
        status = row.get("status", "completed")
        meta = {"status": status, "metrics": ["acc"]} if status == "completed" else {"status": status}
        (folder / str(job) / "run.json").write_text(json.dumps(meta))
        pd.DataFrame([{"status": status, **row}]).to_csv(folder / str(job) / "summary.csv", index=False)
    return folder


def test_aggregate_by_hand_with_a_failed_seed(tmp_path):
    rows = [
        {"acc": 1.0, "defense": "ldp", "seed": 0},
        {"acc": 3.0, "defense": "ldp", "seed": 1},
        {"acc": 10.0, "defense": "none", "seed": 0},
        {"defense": "none", "seed": 1, "status": "failed"},
    ]
    found = load_sweep(_fake_sweep(tmp_path / "sw", rows, ["defense", "seed"]))
    stats = aggregate(found).set_index("defense")
    assert stats.loc["ldp", "mean"] == 2.0 and stats.loc["ldp", "std"] == pytest.approx(math.sqrt(2))
    assert stats.loc["ldp", "count"] == 2 and stats.loc["ldp", "failed"] == 0
    assert stats.loc["none", "mean"] == 10.0 and np.isnan(stats.loc["none", "std"])
    assert stats.loc["none", "count"] == 1 and stats.loc["none", "failed"] == 1


def test_job_line_names_the_swept_values():
    from decpriv.cli.job import job_line

    sweeper = {"job_count": 8, "swept_keys": ["seed", "topology"]}  # the job's hydra.sweeper node
    line = job_line(2, ["seed=1", "topology=ring", "protocol.rounds=2"], sweeper)
    assert line.strip() == "job 2 of 8  seed=1 topology=ring"  # 0-based, as the job folders are named
    assert job_line(0, ["seed=1"], {}).strip() == "job 0 of ?  seed=1"  # another sweeper: every override


LIST_SWEEP = [
    "protocol=gossip",
    "attack=knowledge_matrix",
    "partition=one_per_node",
    "topology.n=8",
    "protocol.rounds=3",
    "adversary.nodes=[0],[1]",
    "hydra.sweep.dir=sw",
]


def test_sweep_plan_counts_the_sweeper_params_of_a_preset():
    from decpriv.report.grid import sweep_plan

    preset = {"adversary.nodes": "[0],[1],[2]", "seed": "range(10)"}  # as elmrini_fig5 sweeps them
    assert sweep_plan(["experiment=elmrini_fig5"], preset) == (30, ["adversary.nodes", "seed"])
    assert sweep_plan(["experiment=elmrini_fig5", "seed=0"], preset) == (3, ["adversary.nodes"])
    assert sweep_plan(["adversary.nodes=[4],[5]", "seed=0,1"], preset) == (4, ["adversary.nodes", "seed"])
    assert sweep_plan(["seed=0,1", "topology=ring,complete", "topology.n=6"]) == (4, ["seed", "topology"])


def test_list_valued_sweep_has_one_row_per_job_also_from_sweeper_params(tmp_path, capsys):
    """A list-valued swept key (adversary.nodes=[0],[1]) keeps every job, on the command line and as
    an experiment preset's ``hydra.sweeper.params`` (elmrini_fig5: 15 jobs once gave a 1-row summary)."""
    from omegaconf import OmegaConf

    from decpriv.report.grid import swept_overrides
    from decpriv.report.sweep import SweepSummary

    run_cli("run", "-m", *LIST_SWEEP, cwd=tmp_path, check=True)
    sweep = tmp_path / "sw"
    table = pd.read_csv(sweep / "summary.csv")
    assert list(table.columns[:3]) == ["job", "status", "adversary.nodes"]
    assert list(table.job) == [0, 1] and (table.status == "completed").all()
    assert list(table["adversary.nodes"]) == ["[0]", "[1]"]

    # The same sweep as a preset's sweeper params: the command line no longer names the swept key.
    config = OmegaConf.load(sweep / "multirun.yaml")
    config.hydra.overrides.task = [o for o in config.hydra.overrides.task if "adversary.nodes" not in o]
    config.hydra.sweeper.params = {"adversary.nodes": "[0],[1]"}
    config.hydra.sweep.dir = str(sweep)  # the callback runs here, not in the sweep's working directory
    OmegaConf.save(config, sweep / "multirun.yaml")
    (sweep / "summary.csv").unlink()
    SweepSummary().on_multirun_end(config)
    rebuilt = pd.read_csv(sweep / "summary.csv")
    assert len(rebuilt) == 2
    assert list(rebuilt["adversary.nodes"]) == ["[0]", "[1]"]
    assert rebuilt.drop(columns="adversary.nodes").equals(table.drop(columns="adversary.nodes"))
    assert swept_overrides(sweep) == ["adversary.nodes"]

    found = load_sweep(sweep)
    assert found.keys == ["adversary.nodes"]
    stats = aggregate(found)
    assert set(stats["adversary.nodes"]) == {"[0]", "[1]"} and (stats["count"] == 1).all()
    code, out, _ = _main(capsys, "report", str(sweep))
    assert code == 0 and "swept keys: adversary.nodes" in out
    report = pd.read_csv(sweep / "report" / "aggregate.csv")
    assert set(report["adversary.nodes"]) == {"[0]", "[1]"}
    code, out, _ = _main(capsys, "diff", "--format", "csv", str(sweep), str(sweep))
    assert code == 0
    other = tmp_path / "other"
    shutil.copytree(sweep, other)  # a sweep folder (job folders with run.json), its summary edited below
    job = pd.read_csv(other / "1" / "summary.csv")  # the sweep's table is its jobs' (the ledger)
    job.loc[0, "median_psnr"] += 1.0
    job.to_csv(other / "1" / "summary.csv", index=False)
    meta = json.loads((other / "1" / "run.json").read_text())
    meta.pop("tables", None)  # as a run written before run.json marked its tables (else: refused, changed)
    meta.pop("run_json_sha256", None)
    (other / "1" / "run.json").write_text(json.dumps(meta))
    code, out, _ = _main(capsys, "diff", "--format", "csv", str(sweep), str(other))
    diff = pd.read_csv(io.StringIO(out))
    assert code == 1 and list(diff.change) == ["changed", "changed"]  # the sweep's row, the job's table
    assert list(diff.table) == ["summary", "1/summary"] and set(diff.column) == {"median_psnr"}
    assert diff.key[0] == "adversary.nodes=[1]"


def test_aggregate_orders_list_valued_keys_by_number_and_averages_seeds():

    from decpriv.report.aggregate import Sweep, aggregate

    nodes = ["[10]", "[1]", "[2]", "[10]", "[1]", "[2]"]
    table = pd.DataFrame(
        {"job": range(6), "status": "completed", "adversary.nodes": nodes, "seed": [0, 0, 0, 1, 1, 1]}
    ).assign(acc=[0.5, 0.1, 0.2, 0.7, 0.3, 0.4])
    stats = aggregate(Sweep(Path("."), table, ["adversary.nodes", "seed"], ["acc"]))
    assert stats["adversary.nodes"].tolist() == ["[1]", "[2]", "[10]"]
    assert stats["mean"].tolist() == pytest.approx([0.2, 0.3, 0.6]) and (stats["count"] == 2).all()


def test_a_key_of_a_swept_group_that_is_unset_by_default(tmp_path):
    """Hydra composes a sweep's base config without its sweeps: `defense.sigma=2` beside `defense=ldp,cdp`
    failed there ("Key 'defense' is not in struct"), though each job composes."""
    args = ("-m", "defense=ldp,cdp", "defense.sigma=2", "protocol.rounds=2", "~attack", "plots=false")
    run_cli("run", *args, "hydra.sweep.dir=sw", cwd=tmp_path, check=True)
    rows = _job_rows(tmp_path / "sw")
    assert sorted(rows.defense) == ["cdp", "ldp"] and (rows.sigma == 2).all()
    summary = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(summary.columns[:4]) == ["job", "status", "defense", "train_loss"]  # one key swept
