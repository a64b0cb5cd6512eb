"""The attack's headline (decpriv/report/headline.py): declared once per attack, resolved into run.json,
and read first by every view (the run table, decpriv runs, show, report and plot)."""

import importlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import run_cli

from decpriv.attacks.base import Attack
from decpriv.report.headline import Headline, beats, cell, of_run, resolve
from decpriv.report.sweep_plots import plot

CONF = Path(__file__).parent.parent / "decpriv" / "conf" / "attack"


def test_resolve_expands_views_and_fills_their_baselines():
    declared = (
        Headline("mia_*_auc", "mia_*_auc_null_hi", "higher", "shuffled membership"),
        Headline("recovery_median_cosine", 0.0),
        Headline("absent_metric", "absent_baseline"),
        Headline("mia_*_auc", None),  # matches what the first declaration took: not repeated
    )
    names = ["train_loss", "mia_received_auc", "mia_received_auc_null_hi", "mia_fl_global_auc"]
    names += ["recovery_median_cosine"]
    found = resolve(declared, names)
    assert [(e["metric"], e["baseline"]) for e in found] == [
        ("mia_received_auc", "mia_received_auc_null_hi"),
        ("mia_fl_global_auc", None),  # its null was not measured: no baseline rather than a wrong one
        ("recovery_median_cosine", 0.0),
    ]
    assert beats(found[0], 0.6, 0.55) and not beats(found[0], 0.5, 0.55)
    assert beats({"better": "lower"}, 0.01, 1.0) and beats(found[0], 0.6, None) is None
    assert cell(found[0], 0.56754, 0.54215) == "0.5675 vs 0.5422 ✓"
    assert cell({"better": "lower"}, 2.0, 1.0) == "2 vs 1 ✗"
    with pytest.raises(ValueError):
        Headline("x", better="up")


def test_a_run_without_a_declared_headline_is_read_by_its_training_metric():
    meta = {"metrics": ["nodes", "train_loss", "test_accuracy"]}
    assert [e["metric"] for e in of_run(meta)] == ["test_accuracy"]
    assert of_run({"metrics": ["train_loss"]})[0]["better"] == "lower"


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_attack_declares_a_headline_with_a_baseline(path):
    target = yaml.safe_load(path.read_text())["_target_"]
    module, name = target.rsplit(".", 1)
    attack = getattr(importlib.import_module(module), name)
    assert issubclass(attack, Attack) and attack.headline, f"{target} declares no headline"
    assert any(entry.baseline is not None for entry in attack.headline), target


def test_run_table_runs_and_show_lead_with_the_attack(tmp_path):
    small = ["topology.n=8", "protocol.rounds=5"]
    proc = run_cli("run", *small, "hydra.run.dir=r", cwd=tmp_path, check=True)
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    summary = pd.read_csv(tmp_path / "r" / "summary.csv").iloc[0]
    assert meta["attack"] == "mia"
    entries = meta["headline"]
    assert entries and all(e["baseline"] == e["metric"] + "_null_hi" for e in entries)
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("│")]
    first = [r[1] for r in rows]
    assert first[: len(entries)] == [e["metric"] for e in entries]  # the attack first ...
    assert first[len(entries)] == "test_accuracy"  # ... then training
    for entry, row in zip(entries, rows, strict=False):
        assert float(row[5]) == pytest.approx(summary[entry["baseline"]], rel=1e-5)
        assert row[7] == ("yes" if summary[entry["metric"]] > summary[entry["baseline"]] else "no")
    assert "baseline: 97.5% point of a shuffled-membership null" in proc.stdout
    index = run_cli("runs", "--root", str(tmp_path), "--format", "csv", check=True)
    table = pd.read_csv(io.StringIO(index.stdout))
    assert list(table.columns[:6]) == ["run", "status", "value", "baseline", "better", "headline"]
    assert table.attack[0] == "mia" and table.headline[0] == entries[0]["metric"]
    assert table.baseline[0] == pytest.approx(summary[entries[0]["baseline"]])


def test_plot_draws_categories_apart_integers_as_integers_and_the_null_band():
    table = pd.DataFrame(
        {
            "topology": ["ring", "torus", "ring", "torus"],
            "seed": [0, 0, 1, 1],
            "auc": [0.7, 0.6, 0.72, 0.62],
            "auc_null_lo": [0.4, 0.4, 0.41, 0.41],
            "auc_null_hi": [0.55, 0.56, 0.55, 0.56],
        }
    )
    entry = {"metric": "auc", "baseline": "auc_null_hi", "better": "higher", "against": "shuffled"}
    axis = plot(table, "topology", "auc", baseline=entry).axes[0]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["ring", "torus"]
    assert all(line.get_linestyle() == "None" for line in axis.lines if len(line.get_xdata()) == 2)
    assert len(axis.collections) >= 2  # a band under each category
    assert any("its null, 2.5-97.5%" in t.get_text() for t in axis.get_legend().get_texts())
    axis = plot(table, "seed", "auc", ["topology"], baseline=entry).axes[0]
    ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_a_run_that_has_not_converged_says_so_in_one_line():
    from decpriv.report.convergence import convergence_note

    rounds = list(range(0, 100, 5))
    settled = pd.DataFrame({"round": rounds, "train_loss": [1 / (r + 1) + 0.3 for r in rounds]})
    settled["consensus_distance"] = [0.0] + [0.2 / (1 + r) for r in rounds[1:]]
    assert convergence_note(settled) is None
    falling = settled.assign(train_loss=[2.0 - r / 100 for r in rounds])  # 1.2 -> 1.05 over rounds 80-95
    assert convergence_note(falling) == (
        "not converged: train_loss still fell from 1.2 to 1.05 over rounds 80-95 (7% of its first value)"
        " (more rounds, or a smaller learning rate)."
    )
    growing = settled.assign(consensus_distance=[0.0] + [0.3 * 1.05**i for i in range(19)])  # 16% per fifth
    assert convergence_note(growing) is None
    drifting = settled.assign(consensus_distance=[0.0] + [0.3 * 1.2**i for i in range(19)])
    assert "consensus distance still grew from 4.62 to 7.99 over rounds 80-95" in convergence_note(drifting)
    assert "\n" not in convergence_note(drifting)


def test_the_default_run_shows_an_attack_that_beats_its_baseline(tmp_path):
    """`decpriv run` with nothing else: an MLP trained by D-SGD on ~17 digits a node, and a curious node
    whose membership AUC clears the 97.5% of its shuffled null on both views, picture included."""
    proc = run_cli("run", "hydra.run.dir=r", cwd=tmp_path, check=True)
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    summary = pd.read_csv(tmp_path / "r" / "summary.csv").iloc[0]
    assert [e["metric"] for e in meta["headline"]] == ["mia_received_auc", "mia_marginalised_auc"]
    for entry in meta["headline"]:
        assert summary[entry["metric"]] > summary[entry["baseline"]] + 0.1
    assert summary.test_accuracy > 0.85 and "not converged" not in proc.stdout
    assert "membership inferred from 2 of 2 view(s)" in " ".join(proc.stdout.split())
    assert (tmp_path / "r" / "plots" / "mia_vs_generalisation.png").stat().st_size > 20_000


def test_list_gives_every_option_whole_at_80_columns_the_default_marked_and_whole_keys_for_a_group():
    from rich.console import Console

    from decpriv.report.show import config_options, print_groups

    stream = io.StringIO()
    print_groups(Console(file=stream, width=80))
    lines = stream.getvalue().splitlines()
    text = " ".join(stream.getvalue().split())
    assert max(map(len, lines)) <= 80 and len(lines) <= 48  # the overview: options only, two screens
    words = {w for line in lines for w in line.split()}
    assert {"*ring", "*dsgd", "*mlp", "*curious", "*dsgd_default"} <= words
    assert "submitit_local" in text and sum(w.startswith("*") and w != "*" for w in words) == 8
    for group in sorted({g for g, _, _ in config_options()}):  # decpriv list GROUP
        stream = io.StringIO()
        print_groups(Console(file=stream, width=80), [group])
        lines = stream.getvalue().splitlines()
        text = " ".join(stream.getvalue().split())
        assert max(map(len, lines)) <= 80
        assert all(" ".join(d.split()) in text for g, _, d in config_options() if g == group)  # never cut
    stream = io.StringIO()
    print_groups(Console(file=stream, width=80), ["data"])
    text = " ".join(stream.getvalue().split())
    assert "downloaded on first use by torchvision (its mirrors and md5 checksums) into data.root" in text
