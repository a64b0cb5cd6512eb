"""Speed paths that must not change results: SSIM through separable window matrices, one build per run,
the parallel sweep's precheck in its workers, figures drawn only when written (``plots=false``)."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import run_cli

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.cli import main
from decpriv.cli.job import HydraJob
from decpriv.metrics import images


def _ssim_by_convolution(recovered: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """Wang et al. 2004, Eq. (13) over the reflection-padded image, written as the 2-D convolution."""
    r, t = recovered.double(), true.double()
    pad = min(5, min(t.shape[-2:]) - 1)
    offsets = torch.arange(-pad, pad + 1, dtype=torch.float64)
    gauss = torch.exp(-((offsets / 1.5) ** 2) / 2)
    gauss = gauss / gauss.sum()
    channels = t.shape[1]
    window = torch.outer(gauss, gauss).expand(channels, 1, 2 * pad + 1, 2 * pad + 1)
    padded = F.pad(torch.cat([r, t, r * r, t * t, r * t]), (pad,) * 4, mode="reflect")
    mu_r, mu_t, rr, tt, rt = F.conv2d(padded, window, groups=channels).split(len(t))
    var_r, var_t, cov = (rr - mu_r**2).clamp(min=0), (tt - mu_t**2).clamp(min=0), rt - mu_r * mu_t
    c1, c2 = 0.01**2, 0.03**2
    index = ((2 * mu_r * mu_t + c1) * (2 * cov + c2)) / ((mu_r**2 + mu_t**2 + c1) * (var_r + var_t + c2))
    return index.flatten(1).mean(1)


def test_ssim_window_matrices_equal_the_reflect_padded_convolution():
    gen = torch.Generator().manual_seed(3)
    for shape in [(7, 1, 8, 8), (2, 3, 4, 5), (3, 2, 16, 11), (1, 1, 2, 3)]:
        x = torch.rand(*shape, generator=gen, dtype=torch.float64)
        y = (x + 0.3 * torch.randn(*shape, generator=gen, dtype=torch.float64)).clamp(0, 1)
        assert torch.allclose(images.ssim(y, x, (0.0, 1.0)), _ssim_by_convolution(y, x), rtol=0, atol=1e-13)


SMALL = ["protocol.rounds=4", "topology.n=8"]


def _tables(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.glob("*.csv"))}


def test_a_run_builds_its_setup_once_and_writes_what_two_builds_wrote(tmp_path, monkeypatch, capsys):
    builds = []
    real_build = experiment.build
    monkeypatch.setattr(experiment, "build", lambda cfg, **kw: builds.append(1) or real_build(cfg, **kw))
    assert main(["run", *SMALL, f"hydra.run.dir={tmp_path / 'once'}"]) == 0
    assert len(builds) == 1  # the precheck's setup is the run's
    meta = json.loads((tmp_path / "once" / "run.json").read_text())
    assert meta["status"] == "completed" and meta["wall_seconds"]["build"] > 0
    monkeypatch.setattr(HydraJob, "_prebuilt_of", lambda self, cfg: None)  # as before: precheck, then build
    assert main(["run", *SMALL, f"hydra.run.dir={tmp_path / 'twice'}"]) == 0
    assert len(builds) == 3
    once, twice = _tables(tmp_path / "once"), _tables(tmp_path / "twice")
    assert len(once) >= 4 and once == twice


def test_plots_false_writes_the_same_tables_and_no_picture(tmp_path):
    command = ["run", *SMALL, "attack=knowledge_matrix", "protocol=gossip", "topology.n=12"]
    assert main([*command, f"hydra.run.dir={tmp_path / 'drawn'}"]) == 0
    assert main([*command, "plots=false", f"hydra.run.dir={tmp_path / 'bare'}"]) == 0
    drawn, bare = tmp_path / "drawn", tmp_path / "bare"
    pictures = sorted(p.relative_to(drawn).as_posix() for p in drawn.rglob("*.png"))
    assert pictures == [
        "plots/knowledge_graph.png",
        "plots/training.png",
        "reconstructions/knowledge_inputs.png",
    ]
    assert not list(bare.rglob("*.png"))
    tables, bare_tables = _tables(drawn), _tables(bare)
    summaries = [pd.read_csv(io.BytesIO(t.pop("summary.csv"))) for t in (tables, bare_tables)]
    assert tables == bare_tables and len(tables) >= 3
    assert summaries[0].plots.tolist() == [True] and summaries[1].plots.tolist() == [False]
    pd.testing.assert_frame_equal(summaries[0].drop(columns="plots"), summaries[1].drop(columns="plots"))
    timings = json.loads((drawn / "run.json").read_text())["wall_seconds"]
    assert timings["evaluate"] < timings["write"]  # drawing is writing: evaluate keeps to the numbers


def test_a_picture_that_fails_to_draw_leaves_no_table_looking_complete(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("no ink")

    monkeypatch.setattr(experiment, "training_curves", broken)
    with pytest.raises(SystemExit) as stop:
        main(["run", *SMALL, "~attack", f"hydra.run.dir={tmp_path / 'r'}"])
    assert stop.value.code == 1
    assert sorted(f.name for f in (tmp_path / "r").glob("*.csv")) == ["summary.csv"]
    assert pd.read_csv(tmp_path / "r" / "summary.csv").status.tolist() == ["failed"]
    assert "no ink" in capsys.readouterr().err


def test_a_kept_setup_is_used_only_for_its_own_config():
    cfg, choices = compose_config(SMALL)
    other, _ = compose_config([*SMALL, "seed=1"])
    job = HydraJob(experiment.precheck(cfg, choices))
    assert job._prebuilt_of(other) is None
    assert job._prebuilt_of(cfg) is None  # taken (and dropped) by the mismatch above
    job = HydraJob(experiment.precheck(cfg, choices))
    prebuilt = job._prebuilt_of(cfg)
    assert prebuilt is not None and prebuilt.setup.network.n == 8 and prebuilt.seconds > 0
    assert job._prebuilt_of(cfg) is None  # used once


@pytest.mark.slow
def test_parallel_sweep_writes_the_sequential_tables(tmp_path):
    grid = ["-m", *SMALL, "seed=0,1", "topology=ring,complete"]
    run_cli("run", *grid, "hydra.sweep.dir=seq", cwd=tmp_path, check=True)
    run_cli(
        "run",
        *grid,
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=2",
        "hydra.sweep.dir=par",
        cwd=tmp_path,
        check=True,
    )
    for job in range(4):
        sequential, parallel = _tables(tmp_path / "seq" / str(job)), _tables(tmp_path / "par" / str(job))
        assert len(sequential) >= 4 and sequential == parallel


def test_parallel_sweep_refuses_a_bad_job_in_its_workers_before_any_job(tmp_path):
    bad = run_cli(
        "run",
        "-m",
        "protocol.rounds=4",
        "topology.n=8,-1",
        "hydra/launcher=parallel",
        "hydra.sweep.dir=bad",
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "topology.n=-1" in bad.stderr


def test_digits_read_without_scikit_learn_equal_load_digits():
    import subprocess
    import sys

    code = "import sys; from decpriv.data.datasets import digits; from decpriv.random.streams import Seeds; digits(Seeds(0)); print('sklearn' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )
    from sklearn.datasets import load_digits

    from decpriv.data.datasets import digits
    from decpriv.random.streams import Seeds

    raw = load_digits()
    ours = digits(Seeds(5))
    order = Seeds(5).numpy("data.split").permutation(len(raw.target))
    train = order[int(round(0.25 * len(order))) :]
    assert torch.equal(ours.x_train, torch.as_tensor((raw.images / 16.0).astype("float32")[train][:, None]))
    assert torch.equal(ours.y_train, torch.as_tensor(raw.target[train].astype("int64")))


def test_a_prechecked_sweep_composes_each_job_once_more_only_to_run_it(tmp_path, monkeypatch):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    composed = []
    real = ConfigLoaderImpl.load_sweep_config
    monkeypatch.setattr(
        ConfigLoaderImpl, "load_sweep_config", lambda self, *a, **k: composed.append(1) or real(self, *a, **k)
    )
    assert main(["run", "-m", *SMALL, "seed=0,1,2", f"hydra.sweep.dir={tmp_path / 'sw'}"]) == 0
    assert len(composed) == 3  # Hydra's own re-validation of the batch (3 more) is skipped
    assert "validate_batch_is_legal" not in BasicSweeper.__dict__  # and restored afterwards
    assert len(list((tmp_path / "sw").glob("*/summary.csv"))) == 3
