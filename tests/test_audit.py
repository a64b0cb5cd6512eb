"""attack=audit: lower bounds from error counts, a 3-node path solved by hand, a weakened accountant caught,
uncovered pairs refused."""

import copy
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from scipy.stats import norm

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.attacks.audit.bounds import clopper_pearson_upper, dp_lower, gdp_lower
from decpriv.attacks.audit.mechanisms import PAIR_STREAM, GradientTrials
from decpriv.attacks.audit.reconcile import AuditFailed
from decpriv.errors import ConfigError
from decpriv.privacy.network_dp import NetworkDPAccountant
from decpriv.random.streams import Seeds

# Muffliato on the path 0 - 1 - 2, sigma = 2: a pair whose view holds the source's noisy value has
# mu = 2C / (sigma C) = 1, Renyi loss alpha mu^2 / 2 = 1 at alpha = 2
PATH3 = (
    "topology=line",
    "topology.n=3",
    "protocol=gossip",
    "defense=muffliato",
    "defense.sigma=2",
    "accountant=network_dp",
    "accountant.alpha=2",
    "data=gaussian_classes",
    "partition=one_per_node",
    "attack=audit",
    "attack.trials=20000",
    "attack.fit_trials=10000",
    "plots=false",
)


def audited(tmp_path, *overrides, accountant=None) -> pd.DataFrame:
    cfg = compose_config([*PATH3, *overrides])[0]
    setup = experiment.build(cfg)
    if accountant is not None:
        setup.accountant = accountant
    prebuilt = experiment.Prebuilt(OmegaConf.to_container(cfg), setup, 0.0, [])
    experiment.run(cfg, tmp_path, prebuilt=prebuilt)
    return pd.read_csv(tmp_path / "audit.csv").set_index(["source", "observer"])


def test_clopper_pearson_and_gaussian_dp_bounds_by_hand():
    # no error in N trials: the upper limit solves (1 - p)^N = alpha
    assert clopper_pearson_upper(np.array([0]), np.array([1000]), 0.05)[0] == pytest.approx(
        1 - 0.05 ** (1 / 1000)
    )
    assert clopper_pearson_upper(np.array([1000]), np.array([1000]), 0.05)[0] == 1.0
    # a Gaussian shift of mu thresholded at mu / 2 errs with Phi(-mu / 2) either way
    rate = norm.cdf(-0.75)
    assert gdp_lower(np.array([rate]), np.array([rate]))[0] == pytest.approx(1.5)
    assert gdp_lower(np.array([0.6]), np.array([0.6]))[0] == 0.0
    # (epsilon, delta): FPR + e^eps FNR >= 1 - delta
    assert dp_lower(np.array([0.1]), np.array([0.05]), 0.0)[0] == pytest.approx(np.log(0.9 / 0.05))


def test_path_by_hand_one_step(tmp_path):
    table = audited(tmp_path, "protocol.rounds=1")
    # neighbours see the source's noisy value: mu = 1, the accountant's 1 (Renyi, alpha = 2)
    for pair in ((0, 1), (1, 0), (1, 2), (2, 1)):
        row = table.loc[pair]
        assert row.epsilon_accountant == pytest.approx(1.0)
        assert 0.7 <= row.epsilon_lower <= 1.0
        assert row.mu_lower <= 1.0
    # one step: the ends never see each other's value, and the test finds nothing there
    assert table.loc[(0, 2)].epsilon_accountant == pytest.approx(0.0)
    assert table.loc[(0, 2)].epsilon_lower == 0.0
    summary = pd.read_csv(tmp_path / "summary.csv").iloc[0]
    assert 0.7 * summary.audit_epsilon_accountant <= summary.audit_epsilon <= summary.audit_epsilon_accountant
    assert summary.audit_trials == 20000


def test_path_by_hand_two_steps(tmp_path):
    # the end 2 sees x_1, x_2 and then x_1' = (x_0 + x_1 + x_2) / 3: it recovers x_0, mu = 1
    row = audited(tmp_path, "protocol.rounds=2").loc[(0, 2)]
    assert row.epsilon_accountant == pytest.approx(1.0)
    assert 0.7 <= row.epsilon_lower <= 1.0


class OverstatedNoise(NetworkDPAccountant):
    """A deliberately unsound accountant: it accounts twice the noise the defense adds."""

    def account(self, setup):
        louder = copy.copy(setup.defense)
        louder.sigma *= 2
        return super().account(replace(setup, defense=louder))


def test_weakened_accountant_fails_the_run(tmp_path):
    with pytest.raises(AuditFailed, match=r"accountant=network_dp under-reports source \d seen by \d"):
        audited(tmp_path, "protocol.rounds=1", accountant=OverstatedNoise(alpha=2.0))
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "failed"
    assert not (tmp_path / "audit.csv").exists() and not (tmp_path / "privacy.csv").exists()
    assert pd.read_csv(tmp_path / "summary.csv").status.iloc[0] == "failed"


def test_uncovered_pairs_are_refused():
    overrides = ["protocol=fedavg", "defense=ldp", "accountant=rdp"]
    cfg = compose_config(["topology.n=6", "protocol.rounds=3", *overrides, "attack=audit"])[0]
    with pytest.raises(ConfigError, match=r"attack='audit': .*not audited yet"):
        experiment.build(cfg)


def test_decor_secrets_are_the_pairs_stream_the_defense_draws():
    setup = experiment.build(
        compose_config(["defense=decor", "defense.level=user", "topology.n=6", "protocol.rounds=2"])[0]
    )
    seeds = Seeds(7)
    defense = copy.copy(setup.defense)
    defense.bind(
        SimpleNamespace(
            network=setup.network, seeds=seeds, device=torch.device("cpu"), protocol=setup.protocol
        )
    )
    trials = GradientTrials(setup, 1)
    drawn = defense.sigma_cor * torch.randn(
        (len(setup.network.edges), 50), generator=seeds.torch(PAIR_STREAM)
    )
    expected = defense.correlated(6, 50, torch.float32)
    assert torch.allclose(trials.incidence.float() @ drawn, expected, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        ("defense=ldp", "accountant=rdp", "defense.sigma=3"),
        ("defense=cdp", "accountant=rdp", "topology=complete", "gossip_matrix=uniform", "defense.sigma=3"),
        (
            "defense=decor",
            "defense.level=user",
            "accountant=secldp",
            "accountant.threat=curious",
            "defense.epsilon=5",
        ),
    ],
)
def test_gradient_noise_audit_is_sound_and_reaches_the_exact_accountant(tmp_path, overrides):
    cfg = compose_config(
        [
            "topology.n=6",
            "protocol.rounds=4",
            *overrides,
            "attack=audit",
            "attack.trials=20000",
            "plots=false",
        ]
    )[0]
    experiment.run(cfg, tmp_path)
    summary = pd.read_csv(tmp_path / "summary.csv").iloc[0]
    assert 0.7 * summary.audit_epsilon_accountant <= summary.audit_epsilon <= summary.audit_epsilon_accountant


def test_random_walk_audit_covers_every_pair_below_the_bound(tmp_path):
    overrides = ["protocol=random_walk", "defense=ldp", "defense.sigma=4", "accountant=random_walk"]
    cfg = compose_config(
        [
            "topology.n=6",
            "protocol.rounds=30",
            *overrides,
            "attack=audit",
            "attack.trials=6000",
            "plots=false",
        ]
    )[0]
    experiment.run(cfg, tmp_path)
    table = pd.read_csv(tmp_path / "audit.csv")
    assert len(table) == 30 and (table.epsilon_lower <= table.epsilon_accountant).all()
    # the model a neighbour last held carries the source's steps: some neighbour pair is detected
    assert table[table.distance == 1].epsilon_dp_lower.max() > 0


def test_path_audit_can_be_rederived_from_its_table(tmp_path):
    from test_dpsgd_sampler import rederived

    table = audited(tmp_path, "protocol.rounds=1").reset_index()
    rederived(table, order=2.0)
    # the Gaussian-view bound is alpha mu^2 / 2, the assumption-free one never above it here
    assert np.allclose(table.epsilon_lower, table.mu_lower**2, rtol=1e-12)
    assert (table.epsilon_lower_assumption_free <= table.epsilon_lower + 1e-12).all()
    seen = table.gaussianity_ks.notna()
    assert seen.sum() == 4 and (table.gaussianity_ks[seen] < 0.05).all()
