"""Pasquini et al. (2023) attacks end to end through the CLI: exact recovery, discovery, override, echo,
membership inference in DL and FL, and the refusals of bad input."""

import re

import numpy as np
import pandas as pd
import pytest
from conftest import DPSGD, NEIGHBOUR_DISCOVERY

from decpriv.api import compose_config
from decpriv.errors import ConfigError
from decpriv.experiment import build


def run(cli, tmp_path, *args, folder="out"):
    proc = cli("run", f"hydra.run.dir={folder}", *args)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / folder
    return out, pd.read_csv(out / "summary.csv").iloc[0]


def sweep(cli, tmp_path, *args):
    """A preset's own -m sweep; the sweep's summary.csv, one row per job."""
    proc = cli("run", "-m", "hydra.sweep.dir=sweep", *args)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert (table.status == "completed").all()
    return table


def above_null(s, key):
    """The statistic beats the 97.5th percentile of its shuffled-membership null."""
    return s[key] > s[f"{key}_null_hi"]


def clearly_more(a, b, key, key_b=None):
    """a's statistic exceeds b's by more than the two nulls' 95% half-widths combined (a difference of
    two independent null draws spreads by the root sum of squares)."""
    key_b = key_b or key
    margin = np.hypot(
        a[f"{key}_null_hi"] - a[f"{key}_null_mean"], b[f"{key_b}_null_hi"] - b[f"{key_b}_null_mean"]
    )
    return a[key] - b[key_b] > margin


def test_gradient_recovery_is_exact_full_batch(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=karate",
        *DPSGD,
        "attack=gradient_recovery",
        "adversary.nodes=[0,33]",
        "protocol.rounds=3",
        "protocol.batch_size=null",
        "protocol.dtype=float64",
    )
    table = pd.read_csv(out / "gradient_recovery.csv")
    skipped = pd.read_csv(out / "gradient_recovery_skipped.csv")
    assert set(table.condition) == {"initial", "system_knowledge"}
    assert set(table["round"]) == {0, 1, 2}
    assert s.recovery_max_relative_error < 1e-10
    # node 16 hangs off 5 and 6 only, which are not corrupt: 5 and 6 cannot be recovered
    assert {5, 6} <= set(skipped.victim) and not set(skipped.victim) & set(table.victim)


def test_gradient_recovery_minibatch_is_a_noisy_full_gradient(cli, tmp_path):
    _, s = run(
        cli,
        tmp_path,
        "topology=karate",
        *DPSGD,
        "attack=gradient_recovery",
        "adversary.nodes=[0,33]",
        "protocol.rounds=2",
        "protocol.batch_size=4",
    )
    assert not s.recovery_full_batch and 0.2 < s.recovery_median_cosine < 0.999


def test_neighbour_discovery_torus16_eavesdropper(cli, tmp_path):
    out, s = run(cli, tmp_path, *NEIGHBOUR_DISCOVERY)
    assert s.discovery_trials == 32  # 16 victims x 2 rounds with a previous round
    assert s.discovery_exact_rate >= 0.9 and s.discovery_final_exact_rate == 1.0


@pytest.mark.parametrize("rushing", [True, False])
def test_state_override_controls_the_victims(cli, tmp_path, rushing):
    out, s = run(
        cli,
        tmp_path,
        "topology=karate",
        *DPSGD,
        "attack=state_override",
        f"attack.rushing={rushing}",
        "attack.target=zeros",
        "adversary.nodes=[0,33]",
        "protocol.rounds=8",
    )
    assert s.override_victims == 24
    if rushing:
        assert s.override_min_controlled_fraction > 1 - 1e-5
    else:
        assert 0.5 < s.override_min_controlled_fraction < 0.999
        # two paths: the override replayed from the transcript at the last round is the measured one
        replay = pd.read_csv(out / "override_rounds.csv")
        last = replay[replay["round"] == replay["round"].max()].controlled_fraction.min()
        assert last == pytest.approx(s.override_min_controlled_fraction, abs=1e-6)
        assert s.override_worst_round_controlled_fraction <= s.override_min_controlled_fraction


@pytest.mark.slow
def test_echo_raises_victim_generalisation_error(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=torus",
        "topology.n=36",
        *DPSGD,
        "attack=echo",
        "adversary.nodes=[0]",
        "protocol.rounds=60",
        "attack.every=10",
    )
    assert s.echo_victim == 1
    assert s.echo_victim_local_generalisation_error > 2 * s.echo_others_local_generalisation_error
    assert (out / "plots" / "echo_generalisation.png").stat().st_size > 10_000


@pytest.mark.slow
def test_preset_fig3_dl_leaks_more_than_fl(cli, tmp_path):
    """Pasquini et al. Fig. 3 (pasquini_fig3_torus36 + pasquini_fig3_fl, ~1.5 min on 2 cores): curious
    D-PSGD nodes beat the null on the received and marginalised updates; the FedAvg server (every update)
    too, but a FedAvg user attacking the global model gains clearly less than the DL neighbour."""
    out, dl = run(cli, tmp_path, "experiment=pasquini_fig3_torus36")
    table = pd.read_csv(out / "mia.csv")
    assert set(table.view) == {"received", "marginalised", "auto"} and table.victim.nunique() >= 12
    assert (table.members == 16).all() and (table.non_members == 16).all()
    for view in ("received", "marginalised"):
        assert above_null(dl, f"mia_{view}_auc") and above_null(dl, f"mia_{view}_advantage")
    assert (out / "plots" / "mia_vs_generalisation.png").exists()
    _, fl = run(cli, tmp_path, "experiment=pasquini_fig3_fl", folder="fl")
    assert above_null(fl, "mia_fl_update_auc")  # the server sees each update
    assert clearly_more(dl, fl, "mia_marginalised_auc", "mia_fl_global_auc")  # DL neighbour vs FL user
    assert clearly_more(fl, fl, "mia_fl_update_auc", "mia_fl_global_auc")  # server vs user


@pytest.mark.slow
def test_preset_fig3_social32_leaks_above_the_null(cli, tmp_path):
    """Pasquini et al. Fig. 3, social-32 (pasquini_fig3_social32, ~1 min on 2 cores)."""
    _, s = run(cli, tmp_path, "experiment=pasquini_fig3_social32")
    for view in ("received", "marginalised"):
        assert above_null(s, f"mia_{view}_auc") and above_null(s, f"mia_{view}_advantage")


@pytest.mark.slow
def test_preset_fig4_denser_graphs_leak_less(cli, tmp_path):
    """Pasquini et al. Fig. 4 (pasquini_fig4_regular36 -m, four runs, ~4 min on 2 cores): the marginalised
    updates' AUC falls with the degree, and d = 3 beats d = 24 by more than their nulls allow."""
    table = sweep(cli, tmp_path, "experiment=pasquini_fig4_regular36").sort_values("topology.d")
    assert table["topology.d"].tolist() == [3, 6, 12, 24]
    auc = table.mia_marginalised_auc.to_numpy()
    assert np.corrcoef(table["topology.d"], auc)[0, 1] < -0.8
    sparse, dense = table.iloc[0], table.iloc[-1]
    assert above_null(sparse, "mia_marginalised_auc") and above_null(sparse, "mia_received_auc")
    assert clearly_more(sparse, dense, "mia_marginalised_auc")


@pytest.mark.slow
def test_preset_fig18_more_users_leak_more(cli, tmp_path):
    """Pasquini et al. Figs. 18/20 (pasquini_fig18_sparse -m: torus-16/36/64 with |X|/n samples each,
    ~3 min on 2 cores): the AUC grows with n at degree 4, torus-64 beats torus-16 beyond the nulls."""
    table = sweep(cli, tmp_path, "experiment=pasquini_fig18_sparse").sort_values("topology.n")
    assert table["topology.n"].tolist() == [16, 36, 64]
    assert table.mia_marginalised_auc.is_monotonic_increasing
    small, large = table.iloc[0], table.iloc[-1]
    assert above_null(large, "mia_marginalised_auc") and above_null(large, "mia_received_auc")
    assert clearly_more(large, small, "mia_marginalised_auc")


@pytest.mark.slow
def test_preset_appb_discovery_far_above_chance(cli, tmp_path):
    """Pasquini et al. App. B (pasquini_appb_discovery): exact neighbourhoods in >= 95% of trials, where
    guessing one of the searched subsets would succeed once in 2^15."""
    out, s = run(cli, tmp_path, "experiment=pasquini_appb_discovery")
    table = pd.read_csv(out / "neighbour_discovery.csv")
    chance = float((1 / table.candidates).mean())
    assert chance <= 2.0**-15 and s.discovery_exact_rate >= 0.95 and s.discovery_final_exact_rate == 1.0


@pytest.mark.slow
def test_preset_fig11_echo_raises_generalisation_and_membership(cli, tmp_path):
    """Pasquini et al. Figs. 11-12 (pasquini_fig11_echo -m, two runs, ~1 min on 2 cores): the marginalised
    echo raises the victim's local generalisation error > 2x the other neighbours' (paper ~4x) and more
    than the received echo, by driving its local train accuracy to 1, the ceiling; membership inference on the victim's updates is above its shuffled-membership
    null and above the other neighbours'."""
    table = sweep(cli, tmp_path, "experiment=pasquini_fig11_echo").set_index("attack.variant")
    marg, received = table.loc["marginalised"], table.loc["received"]
    assert marg.echo_victim_local_generalisation_error > 2 * marg.echo_others_local_generalisation_error
    assert marg.echo_victim_local_generalisation_error > received.echo_victim_local_generalisation_error
    job = tmp_path / "sweep" / str(int(np.flatnonzero(table.index == "marginalised")[0]))
    echo = pd.read_csv(job / "echo.csv")
    final = echo[echo["round"] == echo["round"].max()]
    last = final[final.view == "echo_victim"].iloc[0]
    assert last.auc > last.auc_null_hi and last.advantage > last.advantage_null_hi
    assert last.auc > final[final.view == "other_neighbour"].auc.mean()
    # why ~2.3x and not the paper's ~4x: the victim has memorised its whole set, its error is at its ceiling
    # 1 - test accuracy (0.372 on digits; CIFAR-100's test accuracy leaves far more room)
    assert last.local_train_accuracy == 1
    assert last.local_generalisation_error == pytest.approx(1 - last.test_accuracy)
    assert (final[final.view == "other_neighbour"].local_train_accuracy < 1).all()


@pytest.mark.slow
def test_preset_fig16_override_rushing_and_not(cli, tmp_path):
    """Pasquini et al. Fig. 16 / App. D (pasquini_fig16_override -m, 12 jobs, ~3 min): with the paper's
    optimiser (SGD, momentum 0.9, lr 0.1; 186 s on 2 busy cores) a rushing attacker controls every coverable victim's state
    exactly at every round; a non-rushing one, cancelling the previous round's updates, misses one round's
    movement of the neighbours: >= 96% of every victim's state at every round (worst: 96.2% at round 20,
    while momentum builds up), then above the paper's 98.7% as training settles (99.2% at 50, 99.7% at 100)."""
    table = sweep(cli, tmp_path, "experiment=pasquini_fig16_override")
    assert (table.override_victims == 24).all() and len(table) == 12
    rushing = table[table["attack.rushing"]].set_index("protocol.rounds")
    late = table[~table["attack.rushing"]].set_index("protocol.rounds").override_min_controlled_fraction
    assert (rushing.override_min_controlled_fraction > 1 - 1e-5).all()
    assert (late > 0.96).all() and (late < 1 - 1e-5).all()
    assert late.loc[100] > 0.987 and late.loc[100] > late.loc[20]  # approaching 100% at the end
    assert late.loc[100] == table[~table["attack.rushing"]].override_min_controlled_fraction.max()
    # Fig. 16 at every round: the 100-round run replayed (worst 96.22-96.29% at rounds 17-20, seeds 0-4)
    every = table[~table["attack.rushing"]].set_index("protocol.rounds").loc[100]
    assert every.override_worst_round_controlled_fraction > 0.962 and 15 <= every.override_worst_round <= 25


@pytest.mark.slow
def test_preset_fig9_active_inversion(cli, tmp_path):
    """Pasquini et al. Fig. 9 (pasquini_fig9_active_inversion): >= 6 of each 8-sample batch read exactly."""
    _, s = run(cli, tmp_path, "experiment=pasquini_fig9_active_inversion")
    assert s.active_inversion_victims == 24 and s.active_inversion_batch_size == 8
    assert s.active_inversion_mean_samples_recovered >= 6


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            (
                "topology=karate",
                "data=digits",
                "attack=state_override",
                "adversary.nodes=[0]",
                "attack.victim=33",
            ),
            "neighbour of attacker 0",
        ),
        (
            ("topology=torus", "attack=state_override", "adversary.nodes=[0]", "attack.victim=1"),
            "neighbours [2, 5, 13]",
        ),
        (("topology=torus", "attack=mia", "adversary.nodes=[0]", "data.test_fraction=0.0"), "held-out"),
        (("topology=torus", "attack=gradient_recovery", "adversary.nodes=[0]"), "adversary.nodes"),
        (("topology=torus", "attack=echo", "attack.variant=loud", "adversary.nodes=[0]"), "attack.variant"),
        (("topology=torus", "attack=mia", "protocol=fedavg", "adversary.nodes=[0]"), "use adversary=server"),
        (
            ("attack=mia", "protocol=fedavg", "adversary=server", "attack.marginalize=true"),
            "attack.marginalize",
        ),
        (
            ("attack=mia", "protocol=fedavg", "adversary=server", "attack.marginalize=auto"),
            "attack.marginalize",
        ),
        (("topology=torus", "attack=mia", "attack.permutations=10", "adversary.nodes=[0]"), "at least 40"),
    ],
)
def test_bad_input_refused_before_running(args, words):
    cfg, _ = compose_config(["gossip_matrix=uniform", "model=mlp", *args])
    with pytest.raises(ConfigError, match=re.escape(words)):
        build(cfg)


def test_bad_input_exit_2_from_the_cli(cli):
    proc = cli(
        "run",
        "hydra.run.dir=out",
        "topology=torus",
        "attack=state_override",
        "adversary.nodes=[0]",
        "attack.victim=1",
    )
    assert proc.returncode == 2 and "attack.victim=1" in proc.stderr


@pytest.mark.parametrize("lr", [0.5, 1e-6])
def test_mia_balanced_and_beside_its_null(cli, tmp_path, lr):
    """A node's 16-sample training set leaks through the updates it sends (AUC ~0.75 after 8 rounds, far
    above the shuffled-membership null); with a learning rate of 1e-6 the models never leave the common
    initialisation and the attack stays inside the null."""
    out, s = run(
        cli,
        tmp_path,
        "topology=ring",
        "topology.n=12",
        *DPSGD,
        "attack=mia",
        "attack.marginalize=auto",
        "attack.every=4",
        "attack.non_members=balanced",
        "adversary.nodes=[0,6]",
        "partition.per_node=16",
        "protocol.rounds=8",
        f"protocol.lr={lr}",
    )
    table = pd.read_csv(out / "mia.csv")
    assert set(table.view) == {"received", "auto"} and set(table.victim) == {1, 5, 7, 11}
    assert set(table["round"]) == {0, 4, 7}
    assert (table.members == 16).all() and (table.non_members == 16).all()  # balanced
    for stat in ("advantage", "auc", "tpr_at_1pct_fpr"):
        assert (table[f"{stat}_null_lo"] <= table[f"{stat}_null_mean"]).all()
        assert (table[f"{stat}_null_mean"] <= table[f"{stat}_null_hi"]).all()
        assert table[f"{stat}_p_value"].between(1 / 201 - 1e-9, 1).all()
    last = table[(table.view == "auto") & (table["round"] == 7)]
    # auto is summarised only when at the last round it is not the received models again
    assert ("mia_auto_auc" in s) == bool(last.marginalised.any())
    for view in ("received", "auto") if "mia_auto_auc" in s else ("received",):
        for stat in ("advantage", "auc"):
            key = f"mia_{view}_{stat}"
            assert s[f"{key}_above_null"] == above_null(s, key) == (lr == 0.5), (
                key,
                s[key],
                s[f"{key}_null_hi"],
            )
    if lr == 0.5:
        assert s.mia_received_auc > 0.7 and s.mia_received_auc_p_value < 0.01
    else:
        assert abs(s.mia_received_auc - 0.5) < 0.1 and s.mia_received_auc_p_value > 0.05
    assert (out / "plots" / "mia_vs_generalisation.png").exists()


def test_recovered_gradient_inverts_to_a_training_image(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=karate",
        *DPSGD,
        "attack=gradient_recovery",
        "attack.invert=2",
        "adversary.nodes=[0,33]",
        "protocol.rounds=1",
        "protocol.batch_size=1",
    )
    table = pd.read_csv(out / "gradient_inversion.csv")
    assert len(table) == 2 and (table.nearest_mse < 1e-6).all()
    assert (out / "reconstructions" / "gradient_recovery.png").exists()


@pytest.mark.slow
def test_self_centred_clipping_amplifies_membership_leakage(cli, tmp_path):
    """He et al.'s clipping keeps nodes near their own models (Pasquini et al. App. A.1): the received
    updates' AUC rises above the null and above the undefended run's by more than the nulls allow."""
    common = (
        "topology=torus",
        "topology.n=36",
        *DPSGD,
        "attack=mia",
        "attack.every=25",
        "adversary.count=6",
        "protocol.rounds=50",
    )
    _, plain = run(cli, tmp_path, *common)
    _, clipped = run(cli, tmp_path, *common, "defense=self_centred_clipping", "defense.tau=0.1", folder="scc")
    assert above_null(clipped, "mia_received_auc") and above_null(clipped, "mia_received_advantage")
    assert clearly_more(clipped, plain, "mia_received_auc")


def test_active_inversion_reads_the_batch_exactly(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=karate",
        *DPSGD,
        "attack=active_inversion",
        "adversary.nodes=[0,33]",
        "protocol.rounds=2",
        "protocol.batch_size=8",
        "protocol.dtype=float64",
    )
    table = pd.read_csv(out / "active_inversion.csv")
    assert s.active_inversion_victims == 24 and len(table) == 24
    assert (table.distinct_samples_recovered <= 8).all() and s.active_inversion_mean_samples_recovered >= 6
    assert (out / "reconstructions" / "active_inversion.png").exists()
