"""The README says what the code does: its group table is ``decpriv list --format markdown``, its sample
outputs (and docs/privacy.md's audit example) are what the commands print at 80 columns (slow: they run), and its claims about the karate club,
``decpriv report`` and refusals hold."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import DECPRIV, run_cli

from decpriv.report.show import group_table

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
PRIVACY = (ROOT / "docs" / "privacy.md").read_text()  # the audit example lives there


def prose(text: str) -> str:
    return " ".join(text.split())


def block_after(opening: str, text: str = README) -> list[str]:
    """The lines of the code block (of the README, or ``text``) whose text starts with ``opening`` (or
    follows it)."""
    start = text.index(opening)
    fence = text.index("```", start)
    return text[start:fence].splitlines()


def test_the_group_table_is_generated_from_the_yamls():
    assert group_table() in README, "regenerate it: decpriv list --format markdown"


def test_the_karate_claim_counts_the_local_sets():
    from decpriv.api import compose_config
    from decpriv.experiment import build

    setup = build(compose_config(["topology=karate"])[0])
    counts = setup.local.counts.numpy()
    claim = f"{setup.network.n} nodes, about {round(counts.mean())} digits each, {counts.min()} the fewest"
    assert claim in prose(README) and setup.protocol.batch_size == counts.min() == 7


def test_report_is_shown_with_its_folder_and_refuses_without_one():
    assert "`decpriv report`" not in README  # every report command names the sweep
    proc = run_cli("report")
    assert proc.returncode == 2 and "the following arguments are required" in proc.stderr


def test_a_combination_is_refused_after_the_build_with_nothing_written(tmp_path):
    assert "(`model=logistic` on ten classes) is refused after the build" in prose(README)
    proc = run_cli("run", "model=logistic", cwd=tmp_path)
    assert proc.returncode == 2 and "use model=softmax" in proc.stderr
    assert not (tmp_path / "runs").exists()


def run_at_80(tmp_path: Path, *overrides: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "80"}
    command = [str(DECPRIV), "run", *overrides, "hydra.run.dir=r"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.slow
def test_the_first_run_prints_what_the_readme_shows(tmp_path):
    shown = block_after("                decpriv run: completed")
    printed = run_at_80(tmp_path)
    assert [line.rstrip() for line in printed[:-1]] == [line.rstrip() for line in shown[:-1]]
    assert printed[-1] == "run folder: r" and re.fullmatch(r"run folder: runs/[\d-]+/[\d-]+", shown[-1])


@pytest.mark.slow
def test_the_audit_example_prints_what_the_readme_shows(tmp_path):
    command = block_after("decpriv run topology=karate defense=muffliato", PRIVACY)
    overrides = " ".join(command[:2]).replace("\\", "").split()[2:]
    printed = [line.rstrip() for line in run_at_80(tmp_path, *overrides)]
    excerpt = [line.rstrip().removesuffix(" ...") for line in command[2:]]
    at = [next(i for i, line in enumerate(printed) if line.startswith(part)) for part in excerpt]
    assert at == sorted(at)  # every line shown, in the order printed


def test_the_readme_says_where_the_gpu_runs_attacks_computed_as_docs_speed_measured():
    """docs/speed.md measured the H100's `make gpu-check` with every attack computing on the CPU, and the
    later move of the attacks' work to their GPU not yet run on one: the README says the same, nowhere
    that trials or inversions computed in the attack's GPU sandbox."""
    root = Path(__file__).parents[1]
    readme = " ".join(root.joinpath("README.md").read_text().split())
    speed = " ".join(root.joinpath("docs/speed.md").read_text().split())
    assert "every attack computed on the CPU" in readme and "has not run on a GPU yet" in readme
    assert "where audit trials and inversions compute" not in readme
    assert "every attack computed where its inputs were, on the CPU" in speed
    assert "Both are unmeasured through the CLI on a GPU" in speed
