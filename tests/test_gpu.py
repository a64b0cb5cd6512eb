"""``device=cuda`` gives the CPU's tables: every protocol, every attack family, an audit and each accountant
(benchmarks/gpu_check.py lists the commands and the tolerances: float64 to 1e-9, float32 to the stated
spread of a reduction taken in another order).

Skipped without a visible GPU: CI runs on the CPU, where tests/test_device_independence.py checks the
rules that make these equal. ``make gpu-check`` runs the same comparisons four at a time, then the GPU
benchmarks, and prints one table.
"""

import pytest
import torch

from benchmarks.gpu_check import COMMANDS, compare

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cuda_reproduces_the_cpu_tables(tmp_path, name):
    row = compare(name, str(tmp_path))
    assert row["equal"], f"{name}: {row['differing']} (largest relative difference {row['max_rel_diff']:.2e})"
    summary = tmp_path / name / "1_cuda" / "summary.csv"
    assert "cuda" in summary.read_text().splitlines()[1]  # the device that ran is recorded
