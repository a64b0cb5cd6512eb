"""The CPU's proxy for the GPU check (docs/simulation.md, "Same numbers on any device"): a float64 run's
tables do not depend on how many threads split its work, and with every sum and contraction taken in
reverse order (benchmarks/reversed_order.py: what another device's kernels do) they stay within the
criterion ``make gpu-check`` holds the device to. Rates are counted as integers, so they are the same
bits whatever the order.

The fast tests run small float64 runs in this process; the slow ones run every command of the check in
worker processes (their sealed attack processes at the same thread count), as the check itself does.
"""

import math
import tempfile
from fractions import Fraction

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.gpu_check import FLOAT64, judge
from benchmarks.reversed_order import ReversedOrder
from decpriv import api
from decpriv.metrics.rates import exact_mean, hit_rate
from decpriv.metrics.training import consensus_distance
from decpriv.report.diff import diff_paths


@pytest.fixture
def threads():
    """Set torch's thread count for a test; restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def test_a_rate_is_the_count_over_the_total_correctly_rounded_in_any_order():
    hits = torch.rand(7, 999, generator=torch.Generator().manual_seed(0)) < 0.37
    mask = torch.rand(7, 999, generator=torch.Generator().manual_seed(1)) < 0.8
    rates = hit_rate(hits, 1, mask)
    expected = [float(Fraction(int((h & m).sum()), int(m.sum()))) for h, m in zip(hits, mask, strict=True)]
    assert rates.dtype == torch.float64 and rates.tolist() == expected
    assert torch.equal(hit_rate(hits.flip(1), 1, mask.flip(1)), rates)
    assert float(hit_rate(hits)) == float(Fraction(int(hits.sum()), hits.numel()))


def test_a_mean_of_rates_does_not_depend_on_their_order():
    values = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e6
    values[::7] *= 1e-9  # magnitudes far apart: a naive sum's rounding depends on the order
    shuffled = values[torch.randperm(1000, generator=torch.Generator().manual_seed(3))]
    assert exact_mean(shuffled) == exact_mean(values) == float(sum(map(Fraction, values.tolist()))) / 1000


def test_the_consensus_distance_does_not_depend_on_the_thread_count(threads):
    """Past torch's grain size (32768 entries) a full float64 sum splits over the threads and rounds
    otherwise; the nodes' terms summed exactly do not. Nodes spread over eight decades, so that a plain
    sum of the terms rounds (a full sum here: 1 ulp apart at 1 and 2 threads, 1 ulp off the exact sum at 1;
    the nodes' terms summed in order: 1 ulp off)."""
    scale = 10.0 ** (torch.arange(64, dtype=torch.float64) % 8)
    theta = (
        torch.randn(64, 5000, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
        * scale[:, None]
    )
    threads(1)
    one = consensus_distance(theta)
    threads(2)
    assert consensus_distance(theta) == one
    centred = ((theta - theta.mean(0)) ** 2).sum(1)
    assert one == 2 * math.fsum(centred.tolist()) / 63


SMALL_F64 = ("protocol.dtype=float64", "~attack", "protocol.rounds=3", "plots=false")


@pytest.mark.slow
def test_a_float64_run_gives_the_same_tables_at_one_and_two_threads_and_reversed_sums(tmp_path, threads):
    """D-SGD at float64 (history: losses, accuracies, consensus distance): 1 and 2 threads identical;
    every sum and product reversed, within the check's float64 criterion (rtol 1e-9)."""
    threads(1)
    api.run(SMALL_F64, tmp_path / "one")
    threads(2)
    api.run(SMALL_F64, tmp_path / "two")
    threads(1)
    with ReversedOrder() as reversed_order:
        api.run(SMALL_F64, tmp_path / "reversed")
    assert all(table.equal for table in diff_paths(tmp_path / "one", tmp_path / "two", 0.0, 0.0))
    assert reversed_order.calls > 50  # it reached the training and the evaluation
    assert judge(FLOAT64, diff_paths(tmp_path / "one", tmp_path / "reversed", 0.0, 0.0))["passed"]


def _check(names: list[str], against: str) -> dict[str, dict]:
    root = tempfile.mkdtemp(prefix="decpriv-same-tables-")
    return {row["command"]: row for row in gpu_check.run_check(names, ("cpu", against), 2, 1, root)}


FLOAT64_COMMANDS = [n for n, c in gpu_check.COMMANDS.items() if c.criterion is FLOAT64]


@pytest.mark.slow
def test_every_float64_command_of_the_check_gives_identical_tables_at_one_and_two_threads():
    rows = _check(FLOAT64_COMMANDS, "cpu@2")
    for name, row in rows.items():
        assert "folders" in row, f"{name}: {row['differing']}"
        changed, structural = gpu_check.changed_columns(diff_paths(*row["folders"], 0.0, 0.0))
        assert [column for column, _, _ in changed] + structural == [], name  # timings aside


@pytest.mark.slow
def test_every_command_of_the_check_meets_its_criterion_with_every_sum_reversed():
    """The check's criteria, earned on the CPU: float64 and float32 commands within their tolerance, the
    chaotic ones' difference within the stated fraction of their seed-to-seed spread."""
    rows = _check(list(gpu_check.COMMANDS), "reversed")
    failing = {name: row["differing"] for name, row in rows.items() if not row["passed"]}
    assert failing == {}
