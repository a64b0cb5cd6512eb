"""``device=cuda`` gives the CPU's tables within each command's stated criterion: every protocol, every
attack family, an audit and each accountant (benchmarks/gpu_check.py lists the commands and criteria:
``python3 -m benchmarks.gpu_check --dry``).

Skipped without a visible GPU: CI runs on the CPU, where tests/test_same_tables.py earns the criteria
(threads, reversed sums, the seed spread) and tests/test_device_independence.py checks the rules that make
the draws equal. ``make gpu-check`` runs the same comparisons in parallel, printing each row as it is done.
"""

import pytest
import torch

from benchmarks.gpu_check import COMMANDS, compare

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cuda_reproduces_the_cpu_tables_within_the_command_criterion(tmp_path, name):
    row = compare(name, str(tmp_path))
    assert row["passed"], f"{name} ({row['criterion']}): {row['differing']} (measure {row['measure']:.2e})"
    cuda_summary = next((tmp_path / name).glob("1_cuda_seed0")) / "summary.csv"
    assert "cuda" in cuda_summary.read_text().splitlines()[1]  # the device that ran is recorded
