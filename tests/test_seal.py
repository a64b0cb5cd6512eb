"""The seal, attacked (issue 35): an attack's code runs in a process where the truth does not exist.

``seal_attacks.Peek`` tries every way in found by an independent check (rebuild the data from the seeds, a
helper outside decpriv/attacks, the caller's frame, the garbage collector, a truthy ``oracle`` attribute,
the run folder's .hydra/config.yaml, ``sim`` through the protocol's frame, smuggling from the precheck
where ``prepare`` ran beside the truth). Run in-process, the same code does find the data (the test can
fail); through the pipeline none of them does; a declared ``attack.oracle=true`` does hand over the truth,
marked in run.json, summary.csv and the view.
"""

import contextlib
import ctypes
import gc
import io
import json
import math
import os
import pickle
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import seal_attacks
import torch
from conftest import run_cli

from decpriv import api, experiment
from decpriv.adversary.behaviour import Forgery
from decpriv.random.streams import ScopedSeeds, Seeds, derive_seed, scoped
from decpriv.report import headline
from decpriv.report.document import run_document
from decpriv.seal import plain, zygote
from decpriv.seal.process import NotPlainResult

OVERRIDES = ["attack=peek", "protocol.rounds=3", "seed=3"]
HOSTILE = "way: ''\nmarker: ''\npipeline: 0\naddress: 0\nsize: 0\nproject: ''\nheartbeat: ''\nsummary: ''\n"


@pytest.fixture
def peek_conf(tmp_path, monkeypatch):
    """The attack as a user adds one: ./conf/attack/peek.yaml; the run folder is ./run (relative)."""
    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "peek.yaml").write_text(
        "# peek: every way in at the truth (tests/seal_attacks.py)\n_target_: seal_attacks.Peek\noracle: false\n"
    )
    for name, target in (("hostile", "Hostile"), ("hostile_forger", "HostileForger"), ("lurker", "Lurker")):
        (tmp_path / "conf" / "attack" / f"{name}.yaml").write_text(
            f"_target_: seal_attacks.{target}\n{HOSTILE}"
        )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def found(run) -> dict[str, float]:
    table = pd.read_csv(run / "peek.csv")
    return dict(zip(table.way, table.found, strict=True)), float(table.truth.iloc[0])


def test_no_way_in_obtains_the_data(peek_conf):
    api.run(OVERRIDES, out_dir="run")
    ways, truth = found(peek_conf / "run")
    assert len(ways) == 10 and not math.isnan(truth)
    own = ways.pop("own stream")  # the attack's own stream works, with the pipeline's numbers
    assert own == pytest.approx(derive_seed(3, "attack.peek"), rel=1e-8)
    assert {way: value for way, value in ways.items() if not math.isnan(value)} == {}
    meta = json.loads((peek_conf / "run" / "run.json").read_text())
    summary = pd.read_csv(peek_conf / "run" / "summary.csv")
    assert meta["attack_oracle"] is False and not summary.attack_oracle.iloc[0]
    assert not summary.peek_declared.iloc[0]  # a truthy class or instance attribute granted nothing


def test_the_same_ways_find_the_data_in_process(peek_conf):
    """The control: without the seal, the frame, gc, protocol-frame and precheck ways reach the data."""
    # an earlier test's refused build leaves its frames (and their LocalData) in an uncollected traceback
    # cycle in this worker, which the gc way would find first
    gc.collect()
    cfg, _ = api.compose_config(OVERRIDES)
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    truth = experiment.ground_truth(setup, outcome)
    table = setup.attack.run(view).set_index("way").found
    expected = float(truth.local.x.double().sum())
    ways = ("caller's frame", "garbage collector", "sim via protocol frame", "smuggled from precheck")
    for way in (*ways, "stored in the context"):
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


# --- issue 39: what crosses back is data; the sealed process sees nothing of the run and dies with it


def hostile(way: str, marker, *more: str, attack: str = "hostile") -> list[str]:
    return [
        f"attack={attack}",
        "protocol.rounds=3",
        "seed=3",
        f"attack.way={way}",
        f"attack.marker={marker}",
        *more,
    ]


def test_the_payloads_do_steal_where_they_are_unpickled(tmp_path):
    """The control: unpickled or constructed in this process (which holds a Truth here), each payload
    does run and writes the private data's fingerprint."""
    cfg, _ = api.compose_config(["protocol.rounds=3", "seed=3"])
    setup = experiment.build(cfg)
    outcome, _ = experiment.simulate(setup)
    truth = experiment.ground_truth(setup, outcome)  # noqa: F841  (what steal finds)
    for kind, make in (
        ("object", lambda m: pickle.loads(pickle.dumps(seal_attacks.Payload(m)))),
        ("warning", lambda m: seal_attacks.HostileWarning(m)),
        ("error", lambda m: pickle.loads(pickle.dumps(seal_attacks.HostileError(m)))),
    ):
        marker = tmp_path / kind
        make(str(marker))
        assert float(marker.read_text()) == pytest.approx(seal_attacks.fingerprint(setup.local)), kind


@pytest.mark.parametrize(
    ("way", "attack", "sentence"),
    [
        (
            "raw result",
            "hostile",
            "attack=hostile: its run returned a seal_attacks.steal, which cannot leave",
        ),
        ("result", "hostile", "attack=hostile: its run returned a seal_attacks.Payload, which cannot leave"),
        ("forgery", "hostile_forger", "its forge returned a seal_attacks.steal, which cannot leave"),
    ],
)
def test_an_object_that_unpickles_into_code_fails_the_run_and_runs_nothing(peek_conf, way, attack, sentence):
    marker = peek_conf / "stolen"
    with pytest.raises(NotPlainResult, match=sentence):
        api.run(hostile(way, marker, attack=attack), out_dir="run")
    assert not marker.exists()  # steal never ran in the pipeline
    assert json.loads((peek_conf / "run" / "run.json").read_text())["status"] == "failed"


def test_warnings_and_errors_cross_as_built_in_types(peek_conf):
    marker = peek_conf / "stolen"
    api.run(hostile("warning", marker), out_dir="run")
    meta = json.loads((peek_conf / "run" / "run.json").read_text())
    assert meta["status"] == "completed" and any(str(marker) in w for w in meta["warnings"])
    # the one line a failed run prints says which attack failed, and where
    with pytest.raises(RuntimeError, match=r"^HostileError: attack=hostile, in attack\.run: ") as raised:
        api.run(hostile("error", marker), out_dir="run2")
    assert type(raised.value) is RuntimeError
    assert not marker.exists()  # neither the warning's class nor the error's unpickling ran here


def test_no_attack_code_runs_beside_the_data_before_the_attack_phase(peek_conf):
    """The pipeline reads the attack's class attributes without running a property, and pickles it for
    its sealed process before any data exists."""
    gc.collect()  # no data of an earlier test left for the pickling to find
    marker = peek_conf / "stolen"
    api.run(hostile("", marker, attack="lurker"), out_dir="run")
    found = pd.read_csv(peek_conf / "run" / "hostile.csv").set_index("way").found
    assert math.isnan(found["pickling"]) and not marker.exists()


def test_a_tensor_subclass_reaches_scoring_as_a_plain_tensor(peek_conf):
    """Its __torch_function__ answers torch.equal with True wherever the subclass survives."""
    assert torch.equal(torch.zeros(3).as_subclass(seal_attacks.Liar), torch.ones(3))
    api.run(hostile("tensor subclass", ""), out_dir="run")
    summary = pd.read_csv(peek_conf / "run" / "summary.csv").iloc[0]
    assert summary.findings_type == "Tensor" and not summary.equal_to_truth


def test_wrapped_membership_findings_cannot_patch_the_scorer(peek_conf):
    from decpriv.attacks.p2p import mia

    scorer = mia.view_summary
    marker = peek_conf / "stolen"
    overrides = ["attack=mia", "attack._target_=seal_attacks.HostileMembership", f"+attack.marker={marker}"]
    with pytest.raises(NotPlainResult, match="attack=mia: its run returned a seal_attacks.patch_scorer"):
        api.run([*overrides, "attack.every=3", "protocol.rounds=3", "seed=3"], out_dir="run")
    assert mia.view_summary is scorer and not marker.exists()


def test_the_attack_collects_its_garbage_beyond_the_zygotes_frozen_imports(peek_conf):
    """The zygote pauses collections while it imports torch (docs/speed.md): the attack forked from it
    collects as usual, and the imports' objects (torch's, several hundred thousand) are frozen out of its
    collections."""
    api.run(hostile("collector", ""), out_dir="run")
    found = pd.read_csv(peek_conf / "run" / "hostile.csv").set_index("way").found["collector"]
    enabled, frozen = found.split()
    assert enabled == "True" and int(frozen) > 100_000


def sealed_in_namespaces() -> bool:
    return zygote.seal_kind() == "bubblewrap"


@pytest.mark.skipif(not sealed_in_namespaces(), reason="no bubblewrap here: the process seal (docs)")
def test_the_sealed_process_sees_no_pipeline_run_folder_or_cache(peek_conf):
    """The pipeline's /proc entries (command line, open files, memory) and the run folder are out of
    reach, a secret in the pipeline's memory stays unread, and nothing can be written for it to read."""
    secret = ctypes.create_string_buffer(b"the pipeline's secret, 32 bytes")
    more = [f"attack.pipeline={os.getpid()}", f"attack.address={ctypes.addressof(secret)}", "attack.size=31"]
    api.run([*hostile("look", ""), *more, f"attack.project={peek_conf}"], out_dir="run")
    found = pd.read_csv(peek_conf / "run" / "hostile.csv", keep_default_na=False).set_index("way").found
    assert found["memory"] == "" and found["fds"] == "" and found["cache"] == ""
    assert found["cmdline"] != Path("/proc/self/cmdline").read_text()
    assert found["run files"] == ""  # the run folder is empty over there
    assert not (peek_conf / "planted.py").exists()  # nothing it writes reaches this side
    assert int(found["processes"]) <= 3  # its own PID namespace: the sandbox's init, zygote and warden
    assert json.loads((peek_conf / "run" / "run.json").read_text())["seal"] == "bubblewrap"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children's children included), from /proc."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            with contextlib.suppress(OSError):
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                todo += children
    return found


def test_a_detached_process_ends_with_the_attack_phase(peek_conf, tmp_path_factory):
    """A daemon (its own session, double-forked) that would rewrite summary.csv: once the run returns,
    nothing is left below the zygote but the zygote itself."""
    beats = tmp_path_factory.mktemp("beats") / "heartbeat"
    summary = peek_conf / "run" / "summary.csv"
    more = [f"attack.heartbeat={beats}", f"attack.summary={summary}", "sandbox.processes=4"]
    api.run([*hostile("daemon", ""), *more], out_dir="run")
    ended, root = time.time(), zygote.warm()._process.pid
    kept = 2 if zygote.seal_kind() == "bubblewrap" else 0  # bubblewrap's init and the zygote
    left = descendants(root)
    while len(left) > kept and time.time() < ended + 2:  # wardens exiting
        time.sleep(0.05)
        left = descendants(root)
    assert len(left) == kept
    time.sleep(1.5)  # the daemon would rewrite summary.csv after 1 s and beat for 4 s
    assert pd.read_csv(summary).status.iloc[0] == "completed" and "findings_type" in pd.read_csv(summary)
    assert not beats.exists() or float(beats.read_text()) < ended


def test_a_plugin_beside_conf_imports_in_the_sealed_process(peek_conf):
    """``cd project && PYTHONPATH=. decpriv run attack=mine``: the module sits in the working folder."""
    (peek_conf / "mine.py").write_text(
        "import pandas as pd\nfrom seal_attacks import Hostile\n\n\nclass Mine(Hostile):\n    name = 'mine'\n"
    )
    (peek_conf / "conf" / "attack" / "mine.yaml").write_text(f"_target_: mine.Mine\n{HOSTILE}")
    tests = str(Path(__file__).parent)
    line = ["run", "attack=mine", "protocol.rounds=3", "hydra.run.dir=run"]
    run_cli(*line, cwd=peek_conf, check=True, pythonpath=[".", tests])
    assert json.loads((peek_conf / "run" / "run.json").read_text())["attack"] == "mine"


def test_plain_data_round_trips_as_its_base_types():
    """What honest attacks return comes back equal, as the base classes; a Parameter as a tensor."""
    frame = pd.DataFrame(
        {"a": [1, 2], "b": ["x", None], "c": pd.Categorical(["u", "v"]), "d": pd.array([1, None], "Int64")}
    )
    values = {
        "nested": (1, 2.5, "s", None, b"b", [True, {3: (4,)}], {5}, frozenset({6}), complex(1, 2)),
        "tensor": torch.arange(6.0).reshape(2, 3),
        "bfloat16": torch.tensor([1.5], dtype=torch.bfloat16),
        "parameter": torch.nn.Parameter(torch.ones(2)),
        "array": np.arange(6).reshape(3, 2),
        "objects": np.array(["a", 1], dtype=object),
        "scalar": np.float32(2.5),
        "frame": frame.set_index(["a", "b"]),
        "series": pd.Series([1.0, 2.0], name="s"),
        "forgery": Forgery(np.array([1]), np.array([2]), torch.ones(1, 2)),
    }
    back = plain.load(io.BytesIO(plain.dumps(values)))
    assert back["nested"] == values["nested"] and type(back["scalar"]) is np.float32
    assert type(back["parameter"]) is torch.Tensor and torch.equal(back["parameter"], torch.ones(2))
    for key in ("tensor", "bfloat16"):
        assert torch.equal(back[key], values[key]) and back[key].dtype == values[key].dtype
    assert np.array_equal(back["array"], values["array"]) and list(back["objects"]) == ["a", 1]
    pd.testing.assert_frame_equal(back["frame"], values["frame"])
    pd.testing.assert_series_equal(back["series"], values["series"])
    assert type(back["forgery"]) is Forgery and torch.equal(back["forgery"].values, torch.ones(1, 2))


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (pickle.dumps(seal_attacks.Payload("x")), "seal_attacks.steal"),
        (pickle.dumps(torch.ones(2)), "torch._utils._rebuild_tensor_v2"),  # even torch's own: no global
        (pickle.dumps(("record", "seal_attacks", "Hostile", ("dict", []))), "seal_attacks.Hostile"),
        (
            pickle.dumps(("record", "decpriv.seal.process", "_answer", ("dict", []))),
            "decpriv.seal.process._answer",
        ),
        (pickle.dumps(("eval", "1")), "a value tagged 'eval'"),
        (b"\x80\x05garbage", "not a pickle of primitives"),
    ],
)
def test_the_decoder_builds_no_code(payload, named):
    with pytest.raises(plain.NotPlain, match=re.escape(named)):
        plain.load(io.BytesIO(payload))


def test_an_attack_whose_module_does_not_import_over_there_fails_in_one_sentence(
    peek_conf, monkeypatch, tmp_path_factory
):
    """A module on a path added after the zygote started (its import path is the one it started with)."""
    zygote.warm()
    late = tmp_path_factory.mktemp("late")
    (late / "late_attack.py").write_text(
        "from seal_attacks import Hostile\n\n\nclass Late(Hostile):\n    name = 'late'\n"
    )
    monkeypatch.syspath_prepend(str(late))
    (peek_conf / "conf" / "attack" / "late.yaml").write_text(f"_target_: late_attack.Late\n{HOSTILE}")
    with pytest.raises(
        RuntimeError, match=r"could not be rebuilt in its sealed process \(ModuleNotFoundError"
    ):
        api.run(["attack=late", "protocol.rounds=3"], out_dir="run")
