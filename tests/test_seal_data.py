"""The seal against attacks made of data only (issue 45, items 2-4): a pickle planted in decpriv's cache,
an answer that would make the decoder spin or grow the pipeline, findings of NaN and inf that a scorer
could read as a success. Each payload is first shown to work where nothing defends against it."""

import io
import json
import pickle
import re
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import seal_attacks_data as hostile
import torch

from decpriv import api
from decpriv.attacks.audit.attack import refuse_nonfinite
from decpriv.attacks.audit.reconcile import exceeds, refused_note
from decpriv.attacks.inversion.scoring import image_summary, score_batches
from decpriv.attacks.p2p.null import statistics
from decpriv.config import declarations
from decpriv.seal import plain
from decpriv.seal.process import NotPlainResult

SMALL = ["protocol.rounds=3", "seed=3"]


def decoded_within(extra_mib: int, payload: bytes, reader: str) -> subprocess.CompletedProcess:
    """``reader`` (Python reading ``data``, the payload's bytes) in a fresh process whose address space may
    grow by at most ``extra_mib`` MiB past what its imports took: a reader that holds more fails with
    MemoryError (exit 1), whatever it frees afterwards (not a high-water mark of another process)."""
    code = (
        "import io, pickle, resource, sys\n"
        "from decpriv.seal import plain\n"
        "data = sys.stdin.buffer.read()\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (size + {extra_mib} * 2**20,) * 2)\n"
        f"{reader}\n"
    )
    return subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=False)


# decpriv's answers before its reader of primitives: Python's unpickler, then the plain build
UNPICKLED = "plain.build(pickle.loads(data))"
# decpriv's answers now: its budgeted reader of primitives, which refuses each in one sentence (a line each)
READ = (
    "for payload in pickle.loads(data):\n"
    "    try:\n        plain.load(io.BytesIO(payload))\n"
    "    except plain.NotPlain as error:\n        print(error)"
)


@pytest.fixture(scope="module")
def read_within_50_mib() -> list[str]:
    """What decpriv's reader says of each payload (dag, deep, length, memo) in one process that may hold
    50 MiB more than its imports."""
    payloads = [hostile.PAYLOADS[name]() for name in ("dag", "deep", "length")] + [hostile.memo_index()]
    done = decoded_within(50, pickle.dumps(payloads), READ)
    assert done.returncode == 0, done.stderr[-300:]
    return done.stdout.decode().splitlines()


def test_the_payloads_overwhelm_an_unbudgeted_decoder(monkeypatch):
    """The control: 276 bytes stand for a tree of 4 million lists, each built by an unbudgeted walk; a
    10 000-deep nesting passes Python's unpickler; 9 and 11 bytes make it ask for more than 1 GiB."""
    bomb = hostile.dag_bomb()
    assert len(bomb) == 276
    calls = 0
    build = plain.build

    def counted(tree):
        nonlocal calls
        calls += 1
        if calls > 200_000:
            raise OverflowError("still walking")
        return build(tree)

    monkeypatch.setattr(plain, "build", counted)
    with pytest.raises(OverflowError):
        plain.build(pickle.loads(bomb))  # 200 000 of its 16 777 213 parts walked
    monkeypatch.undo()
    deep, depth = pickle.loads(hostile.deep_nesting()), 0
    while deep:
        deep, depth = deep[0], depth + 1
    assert depth == 9_999 > sys.getrecursionlimit()
    for payload in (hostile.memo_index(), hostile.declared_length()):
        done = decoded_within(1024, payload, UNPICKLED)
        assert done.returncode == 1 and b"MemoryError" in done.stderr, done.stderr[-300:]


@pytest.mark.parametrize(
    ("index", "payload", "named"),
    [
        (0, "dag", "value of 16777213 parts .shared ones counted at each use., past the 2000000"),
        (1, "deep", "value nested more than 100 deep"),
        (2, "length", r"answer of at least 10995116277\d\d bytes"),
    ],
)
def test_a_decoder_bomb_is_refused_within_a_second_and_memory_stays_flat(
    read_within_50_mib, index, payload, named
):
    """Read by decpriv in a process that may hold 50 MiB more than its imports: refused in one sentence
    (the control above: Python's unpickler under 1 GiB fails), here within a second."""
    assert re.match(named, read_within_50_mib[index]), read_within_50_mib
    began = time.perf_counter()
    with pytest.raises(plain.NotPlain, match=named):
        plain.load(io.BytesIO(hostile.PAYLOADS[payload]()))
    assert time.perf_counter() - began < 1.0


def test_a_memo_index_costs_nothing(read_within_50_mib):
    """Python's unpickler zeroes a memo of 2**32 entries for it; here the memo is a dict: read within
    50 MiB, refused as a bare tuple (not a tagged plain value)."""
    assert read_within_50_mib[3] == "tuple"


@pytest.fixture
def bomb_conf(tmp_path, monkeypatch):
    """The attack as a user adds one: ./conf/attack/bomb.yaml."""
    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "bomb.yaml").write_text(
        "_target_: seal_attacks_data.Bomb\npayload: dag\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_bomb_from_the_sealed_process_fails_the_run_in_one_sentence(bomb_conf):
    """The same payload from an attack: the run fails in one sentence (its memory: the test above)."""
    sentence = "^attack=bomb: its run returned a value of 16777213 parts .shared ones counted at each use."
    with pytest.raises(NotPlainResult, match=sentence) as raised:
        api.run(["attack=bomb", *SMALL], out_dir="run")
    assert "\n" not in str(raised.value)
    assert json.loads((bomb_conf / "run" / "run.json").read_text())["status"] == "failed"


def test_plain_answers_decode_as_before():
    """A view-sized tensor (9.5 MB), a table, nested containers with shared strings: equal, unchanged."""
    tensor = torch.randn(2_375_000)
    frame = pd.DataFrame({"round": np.arange(40), "view": ["received", "marginalised"] * 20})
    values = {"tensor": tensor, "frame": frame, "tags": ["received"] * 3, "deep": [[[[1.5]]]]}
    back = plain.load(io.BytesIO(plain.dumps(values)))
    assert torch.equal(back["tensor"], tensor) and back["tags"] == ["received"] * 3
    pd.testing.assert_frame_equal(back["frame"], frame)
    assert back["deep"] == [[[[1.5]]]]
    stream = io.BytesIO(plain.dumps(1) + plain.dumps("two"))  # messages back to back, each read whole
    assert plain.load(stream) == 1 and plain.load(stream) == "two"
    with pytest.raises(EOFError):
        plain.load(stream)


# --- item 2: no pickle from a writable place


class Planted:
    """A record whose unpickling runs code: it writes ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (_mark, (self.marker,))


def _mark(marker: str) -> dict:
    with open(marker, "w") as out:
        out.write("planted code ran")
    return {"stamp": declarations.stamp(), "declarations": {}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    declarations._stored.cache_clear()
    yield declarations.cache_file()
    declarations._stored.cache_clear()


def test_a_planted_pickle_would_run_code_when_unpickled(tmp_path):
    """The control: the payload planted below does run its code in whatever process unpickles it."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(Planted(str(marker))))
    assert marker.read_text() == "planted code ran"


def test_a_planted_cache_is_refused_in_one_warning_and_rebuilt(cache, tmp_path, monkeypatch):
    """Planted under the record's name and under the old pickle's: the next run reads neither as code,
    warns once, works, and leaves a record that reads back."""
    marker = tmp_path / "ran"
    cache.parent.mkdir(parents=True)
    payload = pickle.dumps(Planted(str(marker)))
    cache.write_bytes(payload)
    cache.with_name("declarations.pickle").write_bytes(payload)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = api.run(["~attack", *SMALL], out_dir="run")
    assert not marker.exists() and result.status == "completed"
    said = [str(w.message) for w in caught if "declarations" in str(w.message)]
    assert len(said) == 1 and said[0].startswith(f"decpriv's record of plugin declarations {cache} does not")
    assert said[0].endswith("it is ignored and rebuilt; nothing in it was run")
    record = json.loads(cache.read_text())
    assert record["stamp"] == declarations.stamp() and "decpriv.protocols.dsgd.DSGD" in record["declarations"]
    declarations._stored.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert declarations.known("decpriv.protocols.dsgd.DSGD").params["lr"] is not None


@pytest.mark.parametrize(
    "record",
    [
        {"of": "os.system", "args": ["int"]},  # a name outside the allow-list
        {"range": {"gt": 0, "__class__": "x"}},  # metadata with a field Range has not
        "subprocess.Popen",
        {"literal": [{"nested": 1}]},
    ],
)
def test_a_record_naming_anything_else_is_refused(cache, record):
    found = {"name": "f", "params": {"lr": record}, "takes_kwargs": False}
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"stamp": declarations.stamp(), "declarations": {"decpriv.x.f": found}}))
    with pytest.warns(UserWarning, match="does not read as one"):
        assert declarations.known("decpriv.x.f") is None


def test_declarations_round_trip_as_data(cache):
    """Every kind of annotation decpriv's plugins declare comes back equal from the JSON record."""
    from typing import Annotated, Any, Literal

    from decpriv.config.types import Range

    kinds = {
        "lr": Annotated[float, Range(gt=0, what="the learning rate", eg=0.1)],
        "nodes": list[int] | None,
        "shape": tuple[int, ...],
        "mode": Literal["auto", 1, 2.5, True] | None,
        "any": Any,
        "weights": dict[str, float],
        "steps": Annotated[int, Range(ge=1)] | Literal["auto"],
    }
    declarations.remember({"decpriv.x.f": declarations.Declaration("f", kinds, True)})
    declarations._stored.cache_clear()
    assert declarations.known("decpriv.x.f") == declarations.Declaration("f", kinds, True)


# --- item 4: scores that refuse non-finite findings


MIA = ["attack.every=3", "attack.permutations=40", "attack.thresholds=20", "topology.n=8", *SMALL]


def naive_auc(scores: np.ndarray, members: np.ndarray) -> float:
    """The Mann-Whitney AUC by a stable sort, ties by equality: what a scorer that reads NaN as a number
    computes (NaN != NaN, so every NaN is its own rank, in the order the rows came)."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos, neg = members.sum(), (~members).sum()
    return float((ranks[~members].sum() - neg * (neg + 1) / 2) / (pos * neg))


def test_nan_scores_are_membership_for_a_naive_scorer():
    """The control: members listed first, every score NaN: AUC 1.0 ("membership inferred")."""
    members = np.r_[np.ones(17, bool), np.zeros(30, bool)]
    assert naive_auc(np.full(47, np.nan), members) == 1.0


def test_non_finite_membership_findings_score_as_chance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = ["attack=mia", "attack._target_=seal_attacks_data.NonFiniteMembership", "+attack.fill=nans"]
    result = api.run([*overrides, *MIA], out_dir="run")
    summary, table = result.summary, result.tables["mia"]
    assert summary.mia_received_auc == 0.5 and summary.mia_received_advantage == 0.0
    assert not summary.mia_received_auc_above_null and summary.mia_received_fraction_above_null == 0
    assert summary.mia_nonfinite_models == len(table) and not table.finite_model.any()
    assert f"{len(table)} of {len(table)} tested model(s) hold NaN or inf: refused" in summary.verdict
    assert "no view beats its null: membership not inferred" in summary.verdict


def test_non_finite_scores_tie_at_chance_and_finite_ones_score_as_before():
    """Rows of 5 members then 7 non-members: NaN, inf, -inf, members lowest (finite), and the padding of
    a shorter row beside inf scores (which tied with the padding before)."""
    members = torch.zeros(5, 1, 14, dtype=torch.bool)
    members[:, :, :5] = True
    valid = torch.ones(5, 14, dtype=torch.bool)
    valid[4, 12:] = False
    scores = torch.stack(
        [
            torch.full((14,), float("nan")),
            torch.full((14,), float("inf")),
            torch.full((14,), float("-inf")),
            torch.arange(14.0),
            torch.cat([torch.arange(5.0), torch.full((9,), float("inf"))]),
        ]
    )
    out = statistics(scores, valid, members & valid[:, None, :], 150)
    assert out["auc"][:3, 0].tolist() == [0.5] * 3 and out["advantage"][:3, 0].tolist() == [0.0] * 3
    assert out["tpr_at_1pct_fpr"][:3, 0].tolist() == [0.0] * 3
    assert out["auc"][3:, 0].tolist() == [1.0, 1.0] and out["advantage"][3, 0] == pytest.approx(0.5)


@pytest.mark.slow  # an active attack's run: ~5 s more on the loaded 2 cores
def test_non_finite_echo_models_have_no_accuracy(tmp_path, monkeypatch):
    """Refused models have no argmax: a NaN model would predict class 0 for all, and a victim holding
    mostly class 0 would show a large train - test gap, the echo's success."""
    monkeypatch.chdir(tmp_path)
    fake = ["attack=echo", "attack._target_=seal_attacks_data.NonFiniteEcho", "+attack.fill=nans"]
    result = api.run([*fake, "topology=torus", "topology.n=9", "adversary.nodes=[0]", *SMALL], out_dir="run")
    summary, table = result.summary, result.tables["echo"]
    assert table.local_generalisation_error.isna().all() and summary.echo_victim_mia_advantage == 0.0
    assert summary.verdict.endswith(
        f"{len(table)} of {len(table)} tested model(s) hold NaN or inf: refused (no accuracy, MIA at chance), "
        "a failure of the attack."
    )


def dark_truth() -> SimpleNamespace:
    """One victim holding one all-black 8x8 image; the held-out set's mean is mid-grey."""
    x = torch.zeros(1, 1, 1, 8, 8)
    local = SimpleNamespace(
        x=x, y=torch.zeros(1, 1, dtype=torch.long), mask=torch.ones(1, 1, dtype=torch.bool)
    )
    return SimpleNamespace(local=local, dataset=SimpleNamespace(x_test=torch.full((4, 1, 8, 8), 0.5)))


def test_a_zero_filled_reconstruction_would_pass_for_a_dark_image():
    """The control: scoring a NaN reconstruction as zeros (the rule before) recovers a black image."""
    truth = dark_truth()
    zeros = torch.zeros(1, 1, 8, 8)
    scored = score_batches(
        np.array([0]), [zeros], [torch.zeros(1, dtype=torch.long)], [0.0], truth, (0, 1), True
    )
    assert bool(scored.table.recovered.iloc[0])


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_reconstruction_scores_as_the_mean_image(fill):
    truth = dark_truth()
    bad = torch.full((1, 1, 8, 8), fill)
    scored = score_batches(
        np.array([0]), [bad], [torch.zeros(1, dtype=torch.long)], [0.0], truth, (0, 1), True
    )
    row = scored.table.iloc[0]
    assert (
        not row.recovered
        and not row.defined
        and row.psnr == row.mean_image_psnr == pytest.approx(6.0206, 1e-4)
    )
    _, words = image_summary(scored.table)
    assert words.startswith("0 of 1 image(s) recovered")
    assert words.endswith(
        "1 reconstruction(s) held NaN or inf: each scored as the mean example (no attack), a failure of the attack"
    )


def test_a_finite_reconstruction_scores_as_before():
    truth = dark_truth()
    exact = torch.zeros(1, 1, 8, 8)
    scored = score_batches(
        np.array([0]), [exact], [torch.zeros(1, dtype=torch.long)], [0.0], truth, (0, 1), True
    )
    row = scored.table.iloc[0]
    assert row.recovered and row.defined and row.psnr == 100.0 and row.l2_error == 0.0
    assert "NaN" not in image_summary(scored.table)[1]


KNOWLEDGE = ["attack=knowledge_matrix", "topology.n=16", "protocol.rounds=20", "seed=3"]


def test_non_finite_knowledge_values_are_not_reconstructed(tmp_path, monkeypatch):
    """Control beside: the honest attack on the same run reconstructs some honest nodes."""
    monkeypatch.chdir(tmp_path)
    honest = api.run(KNOWLEDGE, out_dir="honest").summary
    assert honest.reconstructed_honest > 0 and honest.nonfinite_values == 0
    fake = ["attack._target_=seal_attacks_data.NonFiniteKnowledge", "+attack.fill=nans"]
    result = api.run([*KNOWLEDGE, *fake], out_dir="fake")
    summary, table = result.summary, result.tables["attack"]
    assert summary.reconstructed_honest == 0 and summary.recovered_images == 0
    assert (
        summary.nonfinite_values == summary.unknowns == len(table)
        and summary.knowledge_rank == honest.knowledge_rank
    )
    assert "counted as not reconstructed (scored as the mean held-out value), a failure of the attack" in (
        summary.verdict
    )


def audit_rows(lower: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "source": [0, 1],
            "observer": [1, 0],
            "epsilon_lower": [0.4, lower],
            "epsilon_lower_assumption_free": [0.3, 0.3],
            "epsilon_dp_lower": [0.2, 0.2],
            "mu_lower": [0.1, 0.1],
            "gdp_false_positives": [3, 4],
        }
    )


def test_a_non_finite_audit_bound_is_no_evidence():
    """Control: an inf lower bound exceeds any accountant's value (the run would fail, accusing it);
    refused, it is no evidence, and the verdict says why. Finite pairs keep their bounds."""
    assert exceeds(float("inf"), 1e6)
    for bad in (float("inf"), float("nan")):
        table = refuse_nonfinite(audit_rows(bad))
        assert table.finite.tolist() == [True, False]
        assert table.epsilon_lower.tolist() == [0.4, 0.0] and table.mu_lower.tolist() == [0.1, 0.0]
        assert refused_note(table) == (
            " 1 of 2 pair(s) came back with NaN or inf in their counts or bounds: each scored as no evidence "
            "(bound 0), a failure of the audit."
        )
    assert (
        refuse_nonfinite(audit_rows(0.5)).finite.all()
        and refused_note(refuse_nonfinite(audit_rows(0.5))) == ""
    )
