"""The GPU check's comparator holds each command to its stated criterion (benchmarks/gpu_check.py): float64
and float32 tolerances, a named column's own criterion, and the fraction of the seed-to-seed spread for
the chaotic optimisations. Synthetic tables, each made to pass or to fail one criterion."""

import math

import pandas as pd
import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import CHAOTIC, FLOAT32, FLOAT64, SOLVER_RESIDUAL, Criterion, judge
from decpriv.report.diff import compare_tables

BASE = pd.DataFrame({"round": [1, 2, 3], "loss": [2.5, 1.25, 0.625], "acc": [0.5, 0.75, 0.875]})


def diff(a: pd.DataFrame, b: pd.DataFrame, name: str = "history") -> list:
    """What the check reads: every changed cell (rtol 0), as ``diff_paths`` gives it for two folders."""
    return [compare_tables(name, a, b, None, 0.0, 0.0)]


def moved(column: str, by: float, table: pd.DataFrame = BASE, relative: bool = True) -> pd.DataFrame:
    out = table.copy()
    out[column] = out[column] * (1 + by) if relative else out[column] + by
    return out


def test_identical_tables_pass_every_criterion_with_nothing_measured():
    for criterion in (FLOAT64, FLOAT32, CHAOTIC, Criterion("exact")):
        found = judge(criterion, diff(BASE, BASE.copy()), [diff(BASE, moved("loss", 0.1))])
        assert found == {"passed": True, "measure": 0.0, "differing": ""}


@pytest.mark.parametrize(
    ("criterion", "inside", "outside"),
    [(FLOAT64, 4e-10, 4e-9), (FLOAT32, 4e-4, 4e-3)],
    ids=["float64", "float32"],
)
def test_a_relative_tolerance_passes_below_it_and_fails_above(criterion, inside, outside):
    passing = judge(criterion, diff(BASE, moved("loss", inside)))
    assert passing["passed"] and passing["measure"] == pytest.approx(inside / (1 + inside))
    failing = judge(criterion, diff(BASE, moved("loss", outside)))
    assert not failing["passed"] and failing["differing"].startswith("history.loss")
    assert failing["measure"] == pytest.approx(outside / (1 + outside))  # relative to the larger


def test_exact_fails_on_the_last_bit():
    found = judge(Criterion("exact"), diff(BASE, moved("acc", 1e-16, relative=False)))
    assert not found["passed"] and "history.acc" in found["differing"]


def test_a_number_near_zero_is_measured_against_the_absolute_floor_not_relatively():
    """1e-17 against 2e-17 is a relative difference of 0.5 but far inside atol 1e-12: it passes and is
    measured against atol / rtol (1e-3), not reported as 0.5."""
    a = BASE.assign(loss=[1e-17, 1.0, 1.0])
    found = judge(FLOAT64, diff(a, a.assign(loss=[2e-17, 1.0, 1.0])))
    assert found["passed"] and found["measure"] == pytest.approx(1e-14)


def test_text_rows_and_columns_only_one_side_has_always_fail():
    texts = BASE.assign(outcome=["a", "b", "c"])
    for criterion in (FLOAT32, CHAOTIC):
        assert not judge(criterion, diff(texts, texts.assign(outcome=["a", "x", "c"])))["passed"]
        assert "rows added/removed" in judge(criterion, diff(BASE, BASE.iloc[:2]))["differing"]
        assert "one side only" in judge(criterion, diff(BASE, BASE.assign(extra=1.0)))["differing"]


def test_the_seed_spread_criterion_compares_the_device_with_another_seed_column_by_column():
    """The device moves loss by 0.01 (absolute); another seed moves it by 0.2: a ratio of 0.05, inside
    0.1 x the spread. Where the seeds move it by only 0.05, the ratio 0.2 fails."""
    device = diff(BASE, moved("loss", 0.01, relative=False))
    wide = [diff(BASE, moved("loss", 0.2, relative=False)), diff(BASE, moved("loss", -0.1, relative=False))]
    found = judge(CHAOTIC, device, wide)
    assert found["passed"] and found["measure"] == pytest.approx(0.05)
    narrow = [diff(BASE, moved("loss", 0.05, relative=False))]
    found = judge(CHAOTIC, device, narrow)
    assert not found["passed"] and found["measure"] == pytest.approx(0.2)
    assert found["differing"] == "history.loss (0.2)"


def test_a_column_that_no_seed_moves_may_not_move_on_the_device():
    found = judge(CHAOTIC, diff(BASE, moved("acc", 1e-9)), [diff(BASE, moved("loss", 0.3))])
    assert not found["passed"] and math.isinf(found["measure"]) and "history.acc" in found["differing"]


def test_a_named_column_is_held_to_its_own_criterion():
    """pdmm_centralized's solver residual: any value below the solver's tolerance matches; the other
    columns stay at float64's."""
    a = BASE.assign(local_residual=[6e-10, 4e-9, 5e-9])
    b = a.assign(local_residual=[8.6e-10, 4e-9, 5e-9])
    columns = {"history.local_residual": SOLVER_RESIDUAL}
    assert not judge(FLOAT64, diff(a, b))["passed"]
    assert judge(FLOAT64, diff(a, b), columns=columns)["passed"]
    assert not judge(FLOAT64, diff(a, b.assign(local_residual=[3e-8, 4e-9, 5e-9])), columns=columns)["passed"]
    assert not judge(FLOAT64, diff(a, moved("loss", 1e-6, a)), columns=columns)["passed"]


def test_every_command_states_a_criterion_an_estimate_and_why(capsys):
    """``--dry`` lists every command with its criterion, its reason and its estimated time, and the
    whole check's estimate fits five minutes on 16 cores."""
    assert gpu_check.main(["--dry", "--workers", "8"]) == 0
    out = capsys.readouterr().out
    for name, command in gpu_check.COMMANDS.items():
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert command.criterion.text() in line and command.criterion.why in line
    assert {c.criterion.kind for c in gpu_check.COMMANDS.values()} == {"rtol", "seed_spread"}
    total = sum(c.runs * c.estimate_s for c in gpu_check.COMMANDS.values())
    assert total / 8 + gpu_check.STARTUP_S < 300


def test_the_machine_its_timings_and_the_verdict_sentence_are_not_compared():
    """They differ between any two devices (the verdict restates compared numbers in words)."""
    a = BASE.assign(device="cpu", attack_device="cpu", audit_seconds=1.0, verdict="AUC 0.61")
    b = a.assign(device="cuda", attack_device="cuda", audit_seconds=2.0, verdict="AUC 0.62")
    assert judge(Criterion("exact"), diff(a, b))["passed"]
