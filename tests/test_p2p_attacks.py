"""Pasquini et al. (2023) attacks end to end through the CLI: exact recovery, discovery, override, echo,
membership inference in DL and FL, and the refusals of bad input."""

import re

import pandas as pd
import pytest

from decpriv.api import compose_config
from decpriv.errors import ConfigError
from decpriv.experiment import build

DPSGD = ("gossip_matrix=uniform", "model=mlp", "protocol=dsgd")


def run(cli, tmp_path, *args):
    proc = cli("run", "hydra.run.dir=out", *args)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    return out, pd.read_csv(out / "summary.csv").iloc[0]


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
    out, s = run(
        cli,
        tmp_path,
        "topology=torus",
        "topology.n=16",
        *DPSGD,
        "attack=neighbour_discovery",
        "adversary.eavesdropper=true",
        "protocol.rounds=3",
        "protocol.batch_size=8",
    )
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
def test_mia_dl_views_and_fl_views(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=torus",
        "topology.n=36",
        *DPSGD,
        "attack=mia",
        "attack.marginalize=true",
        "attack.every=20",
        "adversary.nodes=[0]",
        "protocol.rounds=40",
    )
    table = pd.read_csv(out / "mia.csv")
    assert set(table.view) == {"received", "marginalised", "auto"}
    assert set(table.victim) == {1, 5, 6, 30}  # torus-36 neighbours of node 0
    assert (table.auc.between(0, 1)).all() and (table.advantage.between(0, 0.5)).all()
    assert s.mia_received_advantage > 0.02
    assert (out / "plots" / "mia_vs_generalisation.png").exists()
    fl = tmp_path / "fl"
    fl.mkdir()
    proc = cli(
        "run",
        "hydra.run.dir=fl",
        "protocol=fedavg",
        "topology=complete",
        "topology.n=36",
        "model=mlp",
        "attack=mia",
        "attack.every=20",
        "adversary.eavesdropper=true",
        "protocol.rounds=40",
    )
    assert proc.returncode == 0, proc.stderr
    f = pd.read_csv(tmp_path / "fl" / "summary.csv").iloc[0]
    assert f.mia_fl_update_advantage > f.mia_fl_global_advantage  # the server sees more than a user


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ("topology=karate", "attack=state_override", "adversary.nodes=[0]", "attack.victim=33"),
            "neighbour of attacker 0",
        ),
        (
            ("topology=torus", "attack=state_override", "adversary.nodes=[0]", "attack.victim=1"),
            "neighbours [2, 5, 13]",
        ),
        (("topology=torus", "attack=mia", "adversary.nodes=[0]", "data.test_fraction=0.0"), "held-out"),
        (("topology=torus", "attack=gradient_recovery", "adversary.nodes=[0]"), "adversary.nodes"),
        (("topology=torus", "attack=echo", "attack.variant=loud", "adversary.nodes=[0]"), "attack.variant"),
        (("topology=torus", "attack=mia", "protocol=fedavg", "adversary.nodes=[0]"), "eavesdropper"),
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


def test_mia_quick_views(cli, tmp_path):
    out, s = run(
        cli,
        tmp_path,
        "topology=ring",
        "topology.n=12",
        *DPSGD,
        "attack=mia",
        "attack.marginalize=auto",
        "attack.every=4",
        "adversary.nodes=[0]",
        "protocol.rounds=8",
    )
    table = pd.read_csv(out / "mia.csv")
    assert set(table.view) == {"received", "auto"} and set(table.victim) == {1, 11}
    assert set(table["round"]) == {0, 4, 7}
    assert table.advantage.between(0, 0.5).all() and table.auc.between(0, 1).all()


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
    common = (
        "topology=torus",
        "topology.n=36",
        *DPSGD,
        "attack=mia",
        "attack.every=25",
        "adversary.nodes=[0]",
    )
    _, plain = run(cli, tmp_path, *common, "protocol.rounds=50")
    proc = cli(
        "run",
        "hydra.run.dir=scc",
        *common,
        "protocol.rounds=50",
        "defense=self_centred_clipping",
        "defense.tau=0.1",
    )
    assert proc.returncode == 0, proc.stderr
    clipped = pd.read_csv(tmp_path / "scc" / "summary.csv").iloc[0]
    assert clipped.mia_received_advantage > plain.mia_received_advantage + 0.03


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
