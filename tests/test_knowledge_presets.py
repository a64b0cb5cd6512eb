"""El Mrini et al. 2024 presets: each one's claim, asserted on a run of the preset (slow ones at reduced
scale), and the pieces they rely on (the authors' Fig. 2 horizon, connected draws, the conv-net panel)."""

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from decpriv.api import run
from decpriv.attacks.knowledge.sweeps import erdos_renyi_mean_degree, fig2_horizon


def test_fig2_horizon_is_the_authors():
    """T = int(min(n p_20 / |A|, n / 2)), p_20 = n p / 20: it grows with n (the previous rule gave n p / |A|,
    6 steps at n = 100, n p = 6, one attacker)."""
    assert fig2_horizon(100, 6, 1) == 30
    assert fig2_horizon(100, 6, 3) == 10
    assert fig2_horizon(20, 6, 1) == 6
    assert fig2_horizon(60, 3, 2) == 4
    assert [fig2_horizon(n, 4, 1) for n in (20, 40, 60, 80, 100)] == [4, 8, 12, 16, 20]


def test_sparse_erdos_renyi_draws_until_connected_and_records_tries():
    """ER(100, 3/100) is connected about once in 150 draws: the 100-draw budget failed 36 of the 60 jobs of
    Fig. 2 at n = 100, n p = 3. Draws are deterministic from the seed and their count is recorded."""
    tries = []
    for seed in range(3):
        graph = erdos_renyi_mean_degree(100, 3, seed)
        assert nx.is_connected(graph) and graph.number_of_nodes() == 100
        again = erdos_renyi_mean_degree(100, 3, seed)
        assert set(again.edges) == set(graph.edges) and again.graph["tries"] == graph.graph["tries"]
        tries.append(graph.graph["tries"])
    assert max(tries) > 100


def test_conv_net_panel_inverts_recovered_gradients(tmp_path):
    """model=cnn is no longer refused: the gradients of every target are recovered from D-GD and handed to
    inverting gradients (a few iterations here: the wiring, not the image quality)."""
    result = run(
        [
            "experiment=elmrini_fig4",
            "model=cnn",
            "protocol.lr=1e-6",
            "topology.n=4",
            "protocol.rounds=5",
            "attack.iterations=5",
            "attack.restarts=1",
        ],
        out_dir=tmp_path / "out",
    )
    table = result.tables["attack"]
    targets = table[~table.attacker]
    assert targets.reconstructed.all() and (targets.gradient_error < 1e-3).all()
    assert np.isfinite(targets.psnr).all() and {"mean_image_psnr", "success"} <= set(table)


@pytest.mark.slow
def test_fig2_claim(cli, tmp_path):
    """Reduced Fig. 2 (n in {20, 60, 100}, n p in {3, 6}, 1 or 3 attackers, 5 graphs: 60 jobs): no job fails,
    nothing is left undecided, the fraction grows with n p, stays high with n at n p = 6 and grows with the
    attackers at n p = 3."""
    cli(
        "run",
        "-m",
        "experiment=elmrini_fig2",
        "topology.n=20,60,100",
        "topology.mean_degree=3,6",
        "adversary.count=1,3",
        "seed=range(5)",
        "hydra.sweep.dir=sweep",
        check=True,
    )
    s = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert len(s) == 60 and (s.status == "completed").all()
    assert (s.knowledge_decided_by != "undecided").all()
    mean = s.groupby(["topology.mean_degree", "adversary.count", "topology.n"]).fraction_reconstructed.mean()
    assert mean[6, 1, 100] > 0.8 > 0.2 > mean[3, 1, 100]
    assert min(mean[6, 1, n] for n in (20, 60, 100)) > 0.75
    assert mean[3, 3, 100] > mean[3, 1, 100]


@pytest.mark.slow
def test_fig4_claim(cli, tmp_path):
    """The attacker at end 0 of the 31-node line recovers all 30 inputs, the far end included, each closer
    to the truth than the mean image."""
    cli("run", "experiment=elmrini_fig4", "hydra.run.dir=out", check=True)
    table = pd.read_csv(tmp_path / "out" / "attack.csv")
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").iloc[0]
    targets = table[~table.attacker]
    assert table.attacker.sum() == 1 and table.loc[0, "attacker"]
    assert len(targets) == 30 and targets.reconstructed.all() and summary.success_rate == 1
    far = targets[targets.distance_to_attacker == 30].iloc[0]
    assert far.psnr > far.mean_image_psnr + 10


@pytest.mark.slow
def test_fig4_conv_net_panel_in_part(tmp_path):
    """The conv-net panel with the authors' CNN widths and inversion settings, on a 4-node line: most
    targets (2 of 3 measured, median 14.9 dB) clear the mean image (11.5 dB) by the 3 dB margin."""
    from decpriv.api import run

    # in process: on a loaded machine the run outlasts the CLI helper's 600 s limit
    summary = run(
        ["experiment=elmrini_fig4_cnn", "topology.n=4", "protocol.rounds=10"], tmp_path / "out"
    ).summary
    assert summary.fraction_reconstructed_honest == 1 and summary.recovered_images >= 2
    assert summary.median_psnr > summary.median_mean_image_psnr + 3


@pytest.mark.slow
def test_fig5_claim(cli, tmp_path):
    """El Mrini et al. Fig. 5, the preset's whole sweep (every node of the Florentine graph the single
    attacker, 10 seeds, T = 7, lr 1e-5; 333 s on 2 busy cores), scored as the authors' released script
    scores it: per target, the PSNR (peak 1) of the images standardised by the data's standard deviation,
    averaged over the seeds, >= 10 dB. Ten positions reconstruct every other node; the four leaves and
    Salviati (whose other neighbour is a leaf) hear the rest of the graph through one node, at most T = 7
    equations for 14 unknowns, and stay below 60%. The constant mean image meets none of it, while the pixel
    PSNR >= 10 dB (what decpriv reported as the paper's 99%) is met by that constant on most digits."""
    cli("run", "-m", "experiment=elmrini_fig5", "hydra.sweep.dir=sweep", check=True)
    sweep = tmp_path / "sweep"
    s = pd.read_csv(sweep / "summary.csv")
    assert len(s) == 150 and (s.status == "completed").all()
    targets = pd.concat(
        pd.read_csv(sweep / str(job) / "attack.csv").assign(position=nodes)
        for job, nodes in zip(s.job, s["adversary.nodes"], strict=True)
    )
    targets = targets[~targets.attacker]
    by_seed = targets.groupby(["position", "node"])
    success = (by_seed.psnr_standardised.mean() >= 10).groupby("position").mean()
    baseline = (by_seed.mean_image_psnr_standardised.mean() >= 10).groupby("position").mean()
    bounded = {f"[{v}]" for v in (0, 9, 10, 13, 14)}  # Acciaiuoli, Salviati, Pazzi, Ginori, Lamberteschi
    assert (success.drop(list(bounded)) == 1).all()
    assert (success[list(bounded)] < 0.6).all()
    assert success.mean() == pytest.approx(0.79, abs=0.03)
    assert (baseline == 0).all()
    assert (targets.mean_image_psnr >= 10).mean() > 0.9  # the pixel criterion does not tell them apart
    assert (s.success_rate <= s.fraction_reconstructed_honest).all()
