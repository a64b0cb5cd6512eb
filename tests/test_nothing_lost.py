"""Nothing lost, nothing unrecorded: a resumed run never replaces another config's run, a sweep never runs
one job twice, and the run folder records what ran (issue 40's first half)."""

from pathlib import Path

import pytest
from conftest import QUICK, refused

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_into_a_run_of_another_config_is_refused_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *QUICK, "hydra.run.dir=r"]) == 0
    capsys.readouterr()
    before = _files(tmp_path / "r")
    assert "summary.csv" in before
    said = refused(capsys, "run", *QUICK, "seed=1", "hydra.run.dir=r", "resume=true")
    assert said == (
        "error: hydra.run.dir='r': resume=true finishes the run this folder holds, and it ran without those "
        "overrides where this command runs seed=1; repeat that run's command line with resume=true, or "
        "choose a new folder for this one."
    )
    said = refused(capsys, "run", *QUICK[:-2], "protocol=gossip", "hydra.run.dir=r", "resume=true")
    assert "it ran ~attack plots=false where this command runs protocol=gossip;" in said
    assert _files(tmp_path / "r") == before
    # its own config, with keys that change no digest: skipped, and nothing rewritten (not even .hydra/)
    assert main(["run", *QUICK, "hydra.run.dir=r", "resume=true", "name=other", "debug=true"]) == 0
    assert "skipped: already completed" in capsys.readouterr().out
    assert _files(tmp_path / "r") == before


@pytest.mark.parametrize(
    "swept, says",
    [
        ("seed=0,0", "seed=0,0: seed lists 0 twice, so the sweep would run the same job twice"),
        ("seed=0,1,0.0", "seed=0,1,0.0: seed lists 0 twice (as 0.0), so"),
        ("topology=ring,torus,ring", "topology lists ring twice"),
    ],
)
def test_a_sweep_that_lists_a_value_twice_is_refused_before_any_job(
    tmp_path, monkeypatch, capsys, swept, says
):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", "-m", swept, *QUICK)
    assert not list(tmp_path.iterdir())


def test_a_preset_sweep_whose_command_line_repeats_a_value_isrefused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("conf/experiment").mkdir(parents=True)
    sweep = "# @package _global_\nhydra:\n  sweeper:\n    params:\n      seed: range(3)\n"
    Path("conf/experiment/seeds.yaml").write_text(sweep)
    said = refused(capsys, "run", "-m", "experiment=seeds", "seed=4,4", *QUICK)
    assert "seed lists 4 twice" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]


def test_a_federated_run_records_what_it_read_of_its_topology(tmp_path, monkeypatch, capsys):
    """FedSGD reads of its graph only n (and a star's centre, the server): a ring and a complete graph train
    the same model, and summary.csv says so beside ``topology=ring``."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    summaries, histories = {}, {}
    for topology in ("ring", "complete", "star"):
        line = [
            "run",
            "protocol=fedsgd",
            f"topology={topology}",
            "topology.n=6",
            *QUICK[::2],
            f"hydra.run.dir={topology}",
        ]
        assert main(line) == 0
        summaries[topology] = pd.read_csv(f"{topology}/summary.csv").iloc[0]
        histories[topology] = pd.read_csv(f"{topology}/history.csv")
    pd.testing.assert_frame_equal(histories["ring"], histories["complete"])  # the ring's edges unread
    assert summaries["ring"].topology == "ring"
    assert summaries["ring"].topology_read == summaries["complete"].topology_read
    assert summaries["ring"].topology_read == "n only: 6 clients of an implicit server, no edge read"
    assert summaries["star"].topology_read == "star: node 0 the server, 5 clients"
    assert not histories["star"].equals(histories["ring"])  # five clients, not six: another model


def test_batch_size_auto_is_recorded_as_the_size_that_ran(tmp_path, monkeypatch, capsys):
    """``auto`` is min(16, the smallest local set): 40 nodes share the default 270 digits' training split,
    so it settles below 16; summary.csv, run.json and ``show`` give that number, resume still finds the run."""
    import json

    import pandas as pd
    from conftest import build

    monkeypatch.chdir(tmp_path)
    line = ["protocol.rounds=2", "topology.n=40", "~attack", "plots=false"]
    smallest = int(build(*line).local.counts.min())  # the build alone, no run folder
    assert 1 <= smallest < 16
    assert main(["run", *line, "hydra.run.dir=b"]) == 0
    assert pd.read_csv("b/summary.csv").loc[0, "protocol.batch_size"] == smallest
    settled = json.loads(Path("b/run.json").read_text())["settled"]
    assert settled == {"protocol.batch_size": {"requested": "auto", "ran": smallest}}
    capsys.readouterr()
    assert main(["show", "b"]) == 0
    assert f"batch_size={smallest} (auto)" in " ".join(capsys.readouterr().out.split())
    assert main(["run", *line, "hydra.run.dir=b", "resume=true"]) == 0  # the digest is the request's
    assert "skipped: already completed" in capsys.readouterr().out
