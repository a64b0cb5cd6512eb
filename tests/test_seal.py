"""The seal, attacked (issue 35): an attack's code runs in a process where the truth does not exist.

``seal_attacks.Peek`` tries every way in found by an independent check (rebuild the data from the seeds, a
helper outside decpriv/attacks, the caller's frame, the garbage collector, a truthy ``oracle`` attribute,
the run folder's .hydra/config.yaml, ``sim`` through the protocol's frame, smuggling from the precheck
where ``prepare`` ran beside the truth). Run in-process, the same code does find the data (the test can
fail); through the pipeline none of them does; a declared ``attack.oracle=true`` does hand over the truth,
marked in run.json, summary.csv and the view.
"""

import json
import math
import pickle

import pandas as pd
import pytest

from decpriv import api, experiment
from decpriv.report import headline
from decpriv.report.document import run_document
from decpriv.rng import ScopedSeeds, Seeds, derive_seed, scoped

OVERRIDES = ["attack=peek", "protocol.rounds=3", "seed=3"]


@pytest.fixture
def peek_conf(tmp_path, monkeypatch):
    """The attack as a user adds one: ./conf/attack/peek.yaml; the run folder is ./run (relative)."""
    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "peek.yaml").write_text(
        "# peek: every way in at the truth (tests/seal_attacks.py)\n_target_: seal_attacks.Peek\noracle: false\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def found(run) -> dict[str, float]:
    table = pd.read_csv(run / "peek.csv")
    return dict(zip(table.way, table.found, strict=True)), float(table.truth.iloc[0])


def test_no_way_in_obtains_the_data(peek_conf):
    api.run(OVERRIDES, out_dir="run")
    ways, truth = found(peek_conf / "run")
    assert len(ways) == 9 and not math.isnan(truth)
    own = ways.pop("own stream")  # the attack's own stream works, with the pipeline's numbers
    assert own == pytest.approx(derive_seed(3, "attack.peek"), rel=1e-8)
    assert {way: value for way, value in ways.items() if not math.isnan(value)} == {}
    meta = json.loads((peek_conf / "run" / "run.json").read_text())
    summary = pd.read_csv(peek_conf / "run" / "summary.csv")
    assert meta["attack_oracle"] is False and not summary.attack_oracle.iloc[0]
    assert not summary.peek_declared.iloc[0]  # a truthy class or instance attribute granted nothing


def test_the_same_ways_find_the_data_in_process(peek_conf):
    """The control: without the seal, the frame, gc, protocol-frame and precheck ways reach the data."""
    cfg, _ = api.compose_config(OVERRIDES)
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    truth = experiment.ground_truth(setup, outcome)
    table = setup.attack.run(view).set_index("way").found
    expected = float(truth.local.x.double().sum())
    for way in ("caller's frame", "garbage collector", "sim via protocol frame", "smuggled from precheck"):
        assert table[way] == pytest.approx(expected), way


def test_a_declared_oracle_gets_the_truth_and_is_marked(peek_conf):
    api.run([*OVERRIDES, "attack.oracle=true"], out_dir="run")
    ways, truth = found(peek_conf / "run")
    assert ways["truthy attribute"] == pytest.approx(truth)  # view.oracle: the truth, handed over
    assert math.isnan(ways["rebuild from seeds"]) and math.isnan(ways["run folder / config"])
    meta = json.loads((peek_conf / "run" / "run.json").read_text())
    summary = pd.read_csv(peek_conf / "run" / "summary.csv")
    assert meta["attack_oracle"] is True and summary.attack_oracle.iloc[0]
    assert summary.peek_declared.iloc[0]
    assert headline.ORACLE_NOTE in run_document(peek_conf / "run").facts  # decpriv report (and show) say so


def test_scoped_seeds_hold_no_root():
    """The attack's streams carry no root seed, refuse other names, and pickle to a handle the sealed
    process serves (none outside it)."""
    seeds = ScopedSeeds(scoped(Seeds(7), "attack."), "attack.")
    assert not hasattr(seeds, "root")
    assert seeds.seed("attack.x") == Seeds(7).seed("attack.x")
    with pytest.raises(PermissionError):
        seeds.seed("partition")
    with pytest.raises(PermissionError):
        seeds._source("partition")
    shipped = pickle.loads(pickle.dumps(seeds))
    assert b"partition" not in pickle.dumps(seeds) and not hasattr(shipped, "root")
    with pytest.raises(PermissionError, match="no pipeline serves"):
        shipped.seed("attack.x")
