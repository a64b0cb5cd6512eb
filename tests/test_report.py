"""``decpriv report RUN`` (history plots, the run's own pictures embedded) and a sweep report with a
failed job; the pictures are opened and measured."""

import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pandas as pd
from conftest import run_cli

from decpriv.cli import main
from decpriv.report.plots import TRAINING_PANELS


def test_run_report_plots_history_and_embeds_the_runs_pictures(tmp_path, capsys):
    run_cli("run", "protocol.rounds=3", "topology.n=6", "hydra.run.dir=r", cwd=tmp_path, check=True)
    run = tmp_path / "r"
    figure, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    (run / "plots").mkdir(exist_ok=True)
    figure.savefig(run / "plots" / "own.png")
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "test_accuracy" in out and "status: completed" in out
    history = pd.read_csv(run / "history.csv")
    drawn = {c for _, columns in TRAINING_PANELS for c in columns}  # already in plots/training.png
    varying = [c for c in history.columns if c != "round" and c not in drawn and history[c].nunique() > 1]
    made = sorted((run / "report" / "plots").glob("history_*.png"))
    assert made and [p.stem for p in made] == sorted(f"history_{c}" for c in varying[:6])
    assert not (run / "report" / "plots" / "history_train_loss.png").exists()
    for picture in made:
        height, width = mpimg.imread(picture).shape[:2]
        assert 350 <= height <= 700 and 600 <= width <= 900
    markdown = (run / "report" / "report.md").read_text()
    assert "](../plots/own.png)" in markdown and (run / "report" / "../plots/own.png").is_file()
    page = (run / "report" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(made) + len(list((run / "plots").glob("*.png")))
    summary = pd.read_csv(run / "report" / "aggregate.csv")
    assert summary.set_index("metric").loc["nodes", "value"] == 6
    # the config that ran is on the page, under its own heading, and the attack's verdict in the facts
    config = markdown.split("## config", 1)[1]
    assert "| topology.n | 6 |" in config and "| protocol.rounds | 3 |" in config
    assert "- verdict: mia: AUC over" in markdown
    # words and flags are values too: the verdict in the value column, flags as true/false, no <NA>
    assert "<NA>" not in markdown and "| verdict | mia: AUC over" in markdown
    assert "| mia_received_auc_above_null | true |" in markdown or "_above_null | false |" in markdown
    assert markdown.index("## headline") < markdown.index("## summary")


def _job(folder: Path, job: int, row: dict, status: str = "completed") -> None:
    path = folder / str(job)
    path.mkdir(parents=True)
    meta = {"status": status, "metrics": ["attack_accuracy"]}
    if status != "completed":
        meta["error"] = row["error"]
    (path / "run.json").write_text(json.dumps(meta))
    pd.DataFrame([{"status": status, **row}]).to_csv(path / "summary.csv", index=False)


def test_sweep_report_lists_failed_jobs_and_plots_against_a_log_scaled_budget(tmp_path, capsys):
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - defense.epsilon=0.1,1,10\n    - seed=0,1\n"
    )
    job = 0
    for epsilon, accuracy in ((0.1, 0.52), (1.0, 0.61), (10.0, 0.9)):
        for seed in (0, 1):
            if (epsilon, seed) == (10.0, 1):
                _job(
                    sweep,
                    job,
                    {"defense.epsilon": epsilon, "seed": seed, "error": "RuntimeError: boom"},
                    "failed",
                )
            else:
                _job(
                    sweep,
                    job,
                    {"defense.epsilon": epsilon, "seed": seed, "attack_accuracy": accuracy + seed / 100},
                )
            job += 1
    assert main(["report", str(sweep)]) == 0
    capsys.readouterr()
    markdown = (sweep / "report" / "report.md").read_text()
    assert "6 jobs: 5 completed, 1 failed" in markdown and "RuntimeError: boom" in markdown
    assert "| 10 | 1 | 0.9 |" in markdown  # one completed seed: mean 0.9, no std
    picture = sweep / "report" / "plots" / "attack_accuracy_vs_defense.epsilon.png"
    pixels = mpimg.imread(picture)
    assert pixels.shape[1] >= 600 and pixels[..., :3].std() > 0.05
    stats = pd.read_csv(sweep / "report" / "aggregate.csv").set_index("defense.epsilon")
    assert stats.loc[0.1, "mean"] == 0.525 and stats.loc[10.0, "failed"] == 1
