"""Start-up cost: a run imports only what it uses (torchmetrics pulls in torchvision: seconds per process;
scipy.optimize, only for matching reconstructions to their images, 0.1 s)."""

import subprocess
import sys


def test_a_knowledge_matrix_run_does_not_import_torchmetrics_or_scipy_optimize():
    code = (
        "import sys, decpriv.cli, decpriv.experiment, decpriv.attacks.knowledge.attack, decpriv.metrics.images; "
        "print(sorted(m for m in ('torchmetrics', 'torchvision', 'scipy.optimize') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
