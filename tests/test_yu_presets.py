"""Yu 2023 reproduced from the CLI: the user's command, and the E1 presets' claims (slow)."""

import time

import pandas as pd
import pytest
from conftest import run_cli


def sweep(cwd, *args):
    run_cli("run", "-m", *args, "hydra.sweep.dir=sw", cwd=cwd, check=True)
    return pd.read_csv(cwd / "sw" / "summary.csv")


@pytest.mark.slow
def test_the_users_command_recovers_digits_from_pdmm_messages(tmp_path):
    """`decpriv run protocol=pdmm attack=diffgrad`, bare: subspace perturbation on, one sample per
    victim, inputs recovered from the eavesdropped Delta z far above the no-attack baseline."""
    start = time.perf_counter()
    proc = run_cli("run", "protocol=pdmm", "attack=diffgrad", "hydra.run.dir=run", cwd=tmp_path, check=True)
    seconds = time.perf_counter() - start
    row = pd.read_csv(tmp_path / "run" / "summary.csv").iloc[0]
    assert row["z_std"] > 0 and row["partition"] == "one_per_node"
    assert row["pdmm_max_residual"] <= row["protocol.tol"]
    assert row["attack_psnr"] >= 25 and row["attack_psnr"] > row["attack_mean_image_psnr"] + 10
    assert "verdict: diffgrad" in proc.stdout
    assert seconds < 120  # 8 s on an idle 2-core machine; generous for a loaded one


@pytest.mark.slow
def test_e1_error_falls_with_t_max_and_fedsgd_is_flat_and_lower(tmp_path):
    pdmm = sweep(tmp_path, "experiment=yu_e1_t_max").sort_values("attack.t_max")
    errors = pdmm["attack_l2_error"].to_numpy()
    assert (errors[1:] < errors[:-1]).all()
    assert errors[-1] < 1e-3 * errors[0]
    run_cli("run", "experiment=yu_e1_fedsgd", "hydra.run.dir=fed", cwd=tmp_path, check=True)
    fedsgd = pd.read_csv(tmp_path / "fed" / "summary.csv").iloc[0]["attack_l2_error"]
    assert fedsgd < errors.min()


@pytest.mark.slow
def test_e1_fewer_inner_steps_give_more_privacy(tmp_path):
    table = sweep(tmp_path, "experiment=yu_e1_k_max").sort_values("protocol.k_max")
    errors = table["attack_l2_error"].to_numpy()
    assert (errors[1:] < errors[:-1]).all()
    assert errors[0] > 1e6 * errors[-1]


@pytest.mark.slow
def test_e1_quantisation_stops_the_fall(tmp_path):
    table = sweep(tmp_path, "experiment=yu_e1_quantize", "defense.cell=0.001,0.1", "attack.t_max=500,2000")
    error = table.set_index(["defense.cell", "attack.t_max"])["attack_l2_error"]
    assert error[(0.001, 2000)] > 0.5 * error[(0.001, 500)]  # the fall stops (0.27 at 500, 0.41 at 2000)
    for cell in (0.001, 0.1):
        assert error[(cell, 2000)] > 1e-2  # unquantised: 1.4e-5 at t_max = 2000 (yu_e1_t_max)
    assert error[(0.1, 2000)] > error[(0.001, 2000)]


@pytest.mark.slow
def test_e2_one_sample_nodes_are_recovered_and_larger_sets_are_harder(tmp_path):
    table = sweep(tmp_path, "experiment=yu_e2_digits", "partition.per_node=1,2", "attack.victims=2")
    psnr = table.set_index("partition.per_node")["attack_psnr"]
    baseline = table.set_index("partition.per_node")["attack_mean_image_psnr"]
    assert psnr[1] >= 20 and psnr[1] > baseline[1] + 10
    assert psnr[2] < psnr[1] - 10


@pytest.mark.slow
def test_e3_centralized_fl_leaks_more_than_decentralized_at_every_local_set_size(tmp_path):
    table = sweep(tmp_path, "experiment=yu_e3", "partition.per_node=1,2", "attack.victims=2")
    cells = table.set_index(["setting", "partition.per_node"])
    for n_i in (1, 2):
        central, decentral = cells.loc[("yu_centralized", n_i)], cells.loc[("yu_decentralized", n_i)]
        assert central["attack_psnr"] > decentral["attack_psnr"] + 10
        assert central["attack_ssim"] > decentral["attack_ssim"]
        assert central["attack_label_accuracy"] >= decentral["attack_label_accuracy"]
