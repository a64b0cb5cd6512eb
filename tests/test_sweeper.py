"""decpriv's checked sweeper (hydra/sweeper=checked, the default): Hydra's grid, the jobs resume keeps left
unlaunched, batches of max_batch_size, each job told the sweep's size and swept keys."""

import json

import pandas as pd
import pytest
from conftest import run_cli
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.decpriv_checked_sweeper.checked_sweeper import launch_blocks

COMMAND_LINES = [
    ["seed=0,1", "topology=ring,complete", "topology.n=6"],
    ["~attack", "seed=range(3)", "adversary.nodes=[0],[1]", "+extra=x", "seed=5"],
    ["name='a,b'", "protocol.lr=0.1,0.3", "protocol=dsgd"],
    ["hydra/launcher=parallel", "data=digits_small,digits", "seed=range(0,4,2)"],
]


@pytest.mark.parametrize("overrides", COMMAND_LINES)
def test_jobs_are_those_of_hydras_basic_sweeper(overrides):
    """Two independent expansions of one command line: decpriv's, and Hydra's own basic sweeper's."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the reference, in the tests only

    from decpriv.report.grid import job_overrides

    parsed = OverridesParser.create().parse_overrides(overrides)
    assert job_overrides(parsed) == BasicSweeper.split_arguments(parsed, None)[0]


def test_the_second_and_third_command_lines_by_hand():
    from decpriv.report.grid import expand

    assert expand(COMMAND_LINES[1]) == [
        ["~attack=null", "seed=5", f"adversary.nodes=[{node}]", "+extra=x"] for node in (0, 1)
    ]  # seed=5 replaces seed=range(3) in its place
    assert [job[1] for job in expand(COMMAND_LINES[2])] == ["protocol.lr=0.1", "protocol.lr=0.3"]


def test_launch_blocks_skip_kept_jobs_and_respect_the_batch_size():
    assert launch_blocks(5, set(), None) == [range(0, 5)]
    assert launch_blocks(5, {1, 2}, None) == [range(0, 1), range(3, 5)]
    assert launch_blocks(5, set(), 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert launch_blocks(5, {0}, 2) == [range(1, 3), range(3, 5)]
    assert launch_blocks(3, {0, 1, 2}, None) == [] and launch_blocks(0, set(), 1) == []


def test_batches_and_resume_launch_only_what_must_run(tmp_path):
    """Three jobs handed over two at a time; job 1's folder then lost: resuming runs job 1 alone."""
    grid = ["-m", "seed=0,1,2", "protocol.rounds=2", "topology.n=6", "~attack", "hydra.sweep.dir=sw"]
    run_cli("run", *grid, "hydra.sweeper.max_batch_size=2", cwd=tmp_path, check=True)
    first = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(first.seed) == [0, 1, 2] and (first.status == "completed").all()
    kept = {j: (tmp_path / "sw" / j / "run.json").read_bytes() for j in ("0", "2")}
    (tmp_path / "sw" / "1" / "run.json").unlink()
    resumed = run_cli("run", *grid, "resume=true", cwd=tmp_path, check=True)
    assert "2 job(s) kept" in resumed.stdout and resumed.stdout.count("job ") == 1  # job 1's line alone
    assert all((tmp_path / "sw" / j / "run.json").read_bytes() == kept[j] for j in kept)
    assert json.loads((tmp_path / "sw" / "1" / "run.json").read_text())["status"] == "completed"
    again = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert again.drop(columns="seconds", errors="ignore").equals(
        first.drop(columns="seconds", errors="ignore")
    )


def test_a_bad_batch_size_is_refused_before_any_job(tmp_path):
    proc = run_cli(
        "run", "-m", "seed=0,1", "hydra.sweeper.max_batch_size=0", "hydra.sweep.dir=sw", cwd=tmp_path
    )
    assert proc.returncode == 2 and "hydra.sweeper.max_batch_size=0" in proc.stderr
    assert not (tmp_path / "sw").exists()
