"""Every view leads with the finding at 80 columns: ``runs``, ``show SWEEP``, ``report SWEEP`` and ``diff``
open with the attack's headline beside its baseline and each job's status; flags read ``k of m``,
constants are stated once, failed jobs show their first error line (hand-made sweep, hand-solved cells)."""

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
from rich.console import Console

from decpriv.cli import main

HEADLINE = {"metric": "auc", "baseline": "auc_null_hi", "better": "higher", "against": "shuffled null"}
TRAINING = {"train_loss": 0.07, "consensus_distance": 0.5, "test_accuracy": 0.9, "nodes": 16}
JOBS = [  # topology, seed, auc, its null's 97.5% point; the last job failed
    ("ring", 0, 0.70, 0.55),
    ("ring", 1, 0.72, 0.56),
    ("ring", 2, 0.74, 0.57),
    ("torus", 0, 0.50, 0.58),
    ("torus", 1, 0.60, 0.58),
    ("torus", 2, None, None),
]
METRICS = ["train_loss", "consensus_distance", "test_accuracy", "nodes", "auc", "auc_null_hi", "above"]


def make_sweep(folder: Path) -> Path:
    """A sweep folder as decpriv writes it: multirun.yaml, job folders (run.json, summary.csv), summary.csv."""
    folder.mkdir(parents=True)
    (folder / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - topology=ring,torus\n    - seed=0,1,2\n"
    )
    rows = []
    for job, (topology, seed, auc, null) in enumerate(JOBS):
        done = auc is not None
        row = {"job": job, "status": "completed" if done else "failed", "topology": topology, "seed": seed}
        row |= {**TRAINING, "auc": auc, "auc_null_hi": null, "above": (auc > null) if done else None}
        row |= {"error": None if done else "Diverged: non-finite at round 2\ntraceback line"}
        meta = {"status": row["status"], "metrics": METRICS, "headline": [HEADLINE] if done else []}
        meta |= {"attack": "mia", "started": f"2026-01-01T00:00:0{job}", "error": row["error"]}
        (folder / str(job)).mkdir()
        (folder / str(job) / "run.json").write_text(json.dumps(meta))
        pd.DataFrame([{k: v for k, v in row.items() if k != "job"}]).to_csv(
            folder / str(job) / "summary.csv", index=False
        )
        rows.append(row)
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    return folder


def screen(*args: str) -> list[str]:
    """What ``decpriv ARGS`` prints on an 80-column terminal."""
    import decpriv.cli as cli

    stream, saved = io.StringIO(), cli.console
    cli.console = Console(file=stream, width=80)
    try:
        main(list(args))
    finally:
        cli.console = saved
    lines = stream.getvalue().splitlines()
    # a folder's path, printed on its own line, is as long as the user's folders make it
    wide = [line for line in lines if len(line) > 80 and not line.startswith(("sweep: ", "run folder: "))]
    assert not wide, wide
    return lines


def test_show_sweep_leads_with_status_and_headline_and_names_failures(tmp_path):
    sweep = make_sweep(tmp_path / "s")
    lines = screen("show", str(sweep))
    assert lines[0] == f"sweep: {sweep}"  # the folder whole, on a line of its own
    at = next(i for i, line in enumerate(lines) if line.startswith("job "))
    header = lines[at].split()
    assert header[:3] == ["job", "status", "auc"] and header.index("topology") > 2
    assert lines[at + 2].split()[:6] == ["0", "completed", "0.7", "vs", "0.55", "✓"]
    assert lines[at + 5].split()[:6] == ["3", "completed", "0.5", "vs", "0.58", "✗"]
    assert lines[at + 7].split()[:2] == ["5", "failed"]
    assert "job 5 failed: Diverged: non-finite at round 2" in lines


def test_report_sweep_leads_with_headline_vs_baseline_counts_flags_states_constants(tmp_path):
    lines = screen("report", str(make_sweep(tmp_path / "s")))
    text = "\n".join(lines)
    assert "the same in every completed job: train_loss 0.07" in text and "nodes 16" in text.replace(
        "\n", " "
    )
    table = lines.index(next(line for line in lines if line.startswith("auc ")))
    assert lines[table].split() == ["auc", "topology", "n", "above"]
    # ring: mean 0.72, std 0.02, null 0.56, 3 of 3 above; torus: 0.55 ± 0.071 vs 0.58, 1 of 2
    assert " ".join(lines[table + 2].split()) == "0.72 ± 0.02 vs 0.56: 3 of 3 ring 3 3 of 3"
    assert " ".join(lines[table + 3].split()) == "0.55 ± 0.071 vs 0.58: 1 of 2 torus 2 1 of 2"
    assert any(line.split()[:2] == ["5", "failed"] and "Diverged" in line for line in lines)
    # over seeds, each configuration's finding beside its baseline within 80 columns (screen checks the width)
    at = lines.index(next(line for line in lines if line.startswith("headline over seeds")))
    assert lines[at + 1].split()[:7] == ["topology", "metric", "beats", "median", "baseline", "min", "max"]
    assert lines[at + 3].split()[:9] == ["ring", "auc", "3", "of", "3", "0.72", "0.56", "0.7", "0.74"]
    assert lines[at + 4].split()[:9] == ["torus", "auc", "1", "of", "2", "0.55", "0.58", "0.5", "0.6"]
    aggregate = pd.read_csv(tmp_path / "s" / "report" / "aggregate.csv")
    assert list(dict.fromkeys(aggregate["metric"]))[:2] == ["auc", "auc_null_hi"]


def test_runs_leads_with_status_value_and_baseline(tmp_path):
    lines = screen("runs", "--root", str(make_sweep(tmp_path / "s")))
    at = next(i for i, line in enumerate(lines) if line.startswith("run "))
    assert lines[at].split()[:3] == ["run", "status", "headline"]
    assert lines[at + 2].split()[1:5] == ["completed", "auc=0.7", "vs", "0.55"]  # the metric named
    assert lines[at + 7].split()[1] == "failed"


def test_diff_opens_with_both_headlines_beside_their_baselines(tmp_path):
    sweep = make_sweep(tmp_path / "s")
    lines = screen("diff", str(sweep / "0"), str(sweep / "3"))
    at = lines.index("headline (value vs its baseline)")
    assert lines[at + 1].split() == ["metric", "A", "B"]
    assert lines[at + 3].split() == ["auc", "0.7", "vs", "0.55", "✓", "0.5", "vs", "0.58", "✗"]
    assert lines[-1].startswith("differ: 1 config key, ")


def test_a_run_table_drops_rows_that_say_nothing():
    """One image inverted from the first gradient: its median PSNR is its mean (said once), and the
    accuracy after one round is not read as the run's finding; an accounting run leads with its loss."""
    from decpriv.report.show import headline_rows

    entries = [
        {"metric": "attack_psnr_median", "baseline": "attack_mean_image_psnr", "better": "higher"},
        {"metric": "attack_psnr", "baseline": "attack_mean_image_psnr", "better": "higher"},
    ]
    summary = {"attack_psnr_median": 31.5, "attack_psnr": 31.5, "attack_mean_image_psnr": 11.0}
    summary |= {"test_accuracy": 0.116, "protocol.rounds": 1}
    rows = headline_rows({"headline": entries}, pd.Series(summary))
    assert rows["metric"].tolist() == ["attack_psnr_median"] and rows["beats"].tolist() == ["yes"]
    summary |= {"protocol.rounds": 50, "attack_psnr": 29.0}
    rows = headline_rows({"headline": entries}, pd.Series(summary))
    assert rows["metric"].tolist() == ["attack_psnr_median", "attack_psnr", "test_accuracy"]
    privacy = {"epsilon_rdp_max": 20.0, "epsilon_mean_max": 17.6, "ldp_level": 20.0, "epsilon": 21.3}
    rows = headline_rows({}, pd.Series({**privacy, "accounting": "exact", "consensus_distance": 6.7}))
    assert rows["metric"].tolist() == [*list(privacy)[:2], "epsilon", "accounting", "consensus_distance"]
    assert rows["beats"].tolist() == ["no", "yes", "", "", ""]  # 20 is not below 20; 17.6 is
    attacked = {"headline": [{"metric": "auc", "baseline": "auc_null_hi", "better": "higher"}]}
    summary = {"auc": 0.8, "auc_null_hi": 0.6, "epsilon": 5.6, "test_accuracy": 0.9, "protocol.rounds": 20}
    rows = headline_rows(attacked, pd.Series(summary))  # the guarantee beside the attack's finding
    assert rows["metric"].tolist() == ["auc", "epsilon", "test_accuracy"]


def test_every_help_fits_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to it; run's help is decpriv's own text
    for command in ("", "run", "list", "show", "diff", "report", "plot", "runs"):
        with contextlib.suppress(SystemExit):  # Hydra's --help exits after printing
            assert main([*([command] if command else []), "--help"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) > 3 and max(map(len, lines)) <= 80, command


def test_list_overview_fits_two_screens_with_every_option_and_the_defaults_starred():
    lines = screen("list")
    assert len(lines) <= 48  # two 24-line screens at 80 columns
    listed = {}
    group = None
    for line in lines[1:-1]:
        group = line[:16].strip() or group
        listed.setdefault(group, []).extend(line[16:].split())
    conf = Path(__file__).parents[1] / "decpriv" / "conf"
    for folder in ("topology", "defense", "attack", "experiment", "setting", "adversary"):
        names = {name.lstrip("*") for name in listed[folder]}
        assert names == {f.stem for f in (conf / folder).glob("*.yaml")}, folder
    starred = {g: [n[1:] for n in names if n.startswith("*")] for g, names in listed.items()}
    assert starred["topology"] == ["ring"] and starred["protocol"] == ["dsgd"] and starred["model"] == ["mlp"]
    assert starred["defense"] == [] and starred["accountant"] == []  # the default run has neither
    topology = "\n".join(screen("list", "topology"))
    assert "Cycle graph" in topology and "n=16" in topology  # descriptions and keys under the group
    assert any(line.split()[:1] == ["*ring"] for line in screen("list", "topology"))


def test_a_sweep_ends_with_one_line_across_its_jobs(tmp_path):
    from decpriv.report.aggregate import across_jobs

    sweep = make_sweep(tmp_path / "s")
    line = across_jobs(sweep, pd.read_csv(sweep / "summary.csv"))
    # completed: 0.70 0.72 0.74 0.50 0.60 against 0.55 0.56 0.57 0.58 0.58: all but 0.50 beat it
    assert line == "across 5 of 6 jobs: auc median 0.7 (0.5-0.74), 4 of 5 beat their baseline"
