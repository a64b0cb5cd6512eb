"""``device=cuda`` gives the CPU's tables within each command's stated criterion: every protocol, every
attack family, an audit and each accountant (benchmarks/gpu_check.py lists the commands and criteria:
``python3 -m benchmarks.gpu_check --dry``).

Skipped without a visible GPU: CI runs on the CPU, where tests/test_same_tables.py earns the criteria
(threads, reversed sums, the seed spread) and tests/test_device_independence.py checks the rules that make
the draws equal. ``make gpu-check`` runs the same comparisons in parallel, printing each row as it is done.
"""

import dataclasses

import pytest
import torch
from torch.func import grad

from benchmarks.gpu_check import COMMANDS, compare
from decpriv.attacks.inversion import InversionConfig, invert
from decpriv.data.datasets import digits
from decpriv.device import repeatable_cuda
from decpriv.models.architectures import cnn
from decpriv.random.streams import Seeds

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cuda_reproduces_the_cpu_tables_within_the_command_criterion(tmp_path, name):
    row = compare(name, str(tmp_path))
    assert row["passed"], f"{name} ({row['criterion']}): {row['differing']} (measure {row['measure']:.2e})"
    cuda_summary = next((tmp_path / name).glob("1_cuda_seed0")) / "summary.csv"
    assert "cuda" in cuda_summary.read_text().splitlines()[1]  # the device that ran is recorded


@pytest.mark.parametrize("optimiser", ["adam", "lbfgs"])
def test_the_inversion_graph_replays_the_eager_objective_bit_for_bit(optimiser):
    """The CUDA graph records the eager kernels: the same reconstruction, iterate for iterate."""
    repeatable_cuda()  # as a run sets it: no autotuned or atomic kernels, so eager repeats itself too
    data, model = digits(Seeds(0)), cnn((1, 8, 8), 10).on("cuda")
    theta = model.init(1, 0)[0].to("cuda")
    x, y = data.x_train[:1].cuda(), data.y_train[:1].cuda()
    target = grad(model.loss)(theta, x, y)
    config = InversionConfig(cost="sim", optimiser=optimiser, iterations=12, lr=0.1, restarts=16)
    runs = [
        invert(model, theta, target, (1, 8, 8), 10, 1, y, (0.0, 1.0), dataclasses.replace(config, graphs=g))
        for g in (False, True)
    ]
    assert torch.equal(runs[0].x, runs[1].x) and torch.equal(runs[0].history, runs[1].history)


def test_the_sealed_attack_computes_on_the_runs_gpu(tmp_path, monkeypatch):
    """Where the sealed process started CUDA, attacks are told so (the DP-SGD audit draws its trials there),
    and run.json's attack_device is that device."""
    import json

    import pandas as pd

    from decpriv import api

    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "escape.yaml").write_text("_target_: sandbox_attacks.Escape\nways: []\n")
    monkeypatch.chdir(tmp_path)
    api.run(["attack=escape", "attack.ways=[computes]", "protocol.rounds=2", "device=cuda"], out_dir="run")
    found = pd.read_csv(tmp_path / "run" / "escape.csv").set_index("way").outcome
    assert found["computes"] == "ok cuda"
    assert json.loads((tmp_path / "run" / "run.json").read_text())["attack_device"] == "cuda"


def test_an_attack_process_on_the_gpu_inverts_cpu_inputs_there():
    """CPU inputs (what crosses into the sealed process) go to the attack's GPU and come back: the same
    reconstruction as inverting CUDA inputs directly."""
    from decpriv.device import set_attack_device

    repeatable_cuda()
    data, model = digits(Seeds(0)), cnn((1, 8, 8), 10)
    theta = model.init(1, 0)[0]
    x, y = data.x_train[:1], data.y_train[:1]
    target = grad(model.loss)(theta, x, y)
    config = InversionConfig(cost="sim", optimiser="adam", iterations=12, lr=0.1, restarts=16)
    direct = invert(
        model.on("cuda"), theta.cuda(), target.cuda(), (1, 8, 8), 10, 1, y.cuda(), (0.0, 1.0), config
    )
    set_attack_device("cuda")
    try:
        moved = invert(model, theta, target, (1, 8, 8), 10, 1, y, (0.0, 1.0), config)
    finally:
        set_attack_device("cpu")
    assert torch.equal(moved.x, direct.x.cpu()) and torch.equal(moved.objectives, direct.objectives.cpu())
    found = [getattr(moved, f.name) for f in dataclasses.fields(moved)]
    assert all(t.device.type == "cpu" for t in found if torch.is_tensor(t))  # all of it crosses back as data
