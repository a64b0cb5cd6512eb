"""DECOR and its LDP / CDP baselines at the example level (Allouah et al., ICML 2024, Sec. 6 (c), App. D.1):
the SecLDP view whitened into a sampled Gaussian, checked against dp-accounting on a covariance solved by
hand; calibration; and the default run that `defense=decor` alone now trains."""

import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting.pld import PLDAccountant

from decpriv.api import compose_config, run
from decpriv.experiment import build

COMPLETE = ("topology=complete", "topology.n=8", "~attack", "protocol.rounds=30", "protocol.batch_size=4")


def complete_graph_precision(n: int, sigma_cdp: float, sigma_cor: float) -> float:
    """[Sigma^-1]_ii for Sigma = sigma_cdp^2 I + sigma_cor^2 (n I - 11^T): eigenvalue sigma_cdp^2 on the
    all-ones vector and sigma_cdp^2 + n sigma_cor^2 on its complement, each carrying 1/n and 1 - 1/n of e_i."""
    return 1 / (n * sigma_cdp**2) + (1 - 1 / n) / (sigma_cdp**2 + n * sigma_cor**2)


def pld(q: float, z: float, steps: int, delta: float) -> float:
    accountant = PLDAccountant(value_discretization_interval=1e-3)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    accountant.compose(event, steps)
    return accountant.get_epsilon(delta)


def accounted(*overrides: str):
    setup = build(compose_config([*COMPLETE, *overrides])[0])
    findings = setup.accountant.account(setup)
    return setup, findings.tables["privacy"], findings.summary


def test_example_level_decor_is_the_sampled_gaussian_of_its_whitened_noise():
    noise = ("defense.epsilon=null", "defense.sigma_cdp=2", "defense.sigma_cor=3")
    setup, table, summary = accounted("defense=decor", *noise)
    z = 1 / math.sqrt(complete_graph_precision(8, 2.0, 3.0))  # clip 1, Poisson: a sample moves the sum by C
    rates = 4 / setup.local.counts.numpy()
    assert np.allclose(table.noise_multiplier, z, rtol=1e-9) and np.allclose(table.sampling_rate, rates)
    for q, epsilon in zip(table.sampling_rate, table.epsilon_dp_accounting_pld, strict=True):
        assert epsilon == pytest.approx(pld(q, z, 30, 1e-5), rel=1e-9)
    assert np.allclose(table.epsilon_decpriv_rdp, table.epsilon_dp_accounting_rdp, rtol=1e-6)
    assert (table.epsilon == np.fmin(table.epsilon_decpriv_rdp, table.epsilon_dp_accounting_pld)).all()
    assert summary["adjacency"] == "add_remove" and summary["privacy_level"] == "example"
    # a fixed-size batch: replace-one, a replaced sample moves the sum by 2C; dp-accounting has no PLD for it
    _, fixed, summary = accounted("defense=decor", *noise, "defense.sampler=fixed")
    assert (
        np.allclose(fixed.noise_multiplier, z / 2, rtol=1e-9) and fixed.epsilon_dp_accounting_pld.isna().all()
    )
    assert summary["adjacency"] == "replace_one" and (fixed.epsilon > table.epsilon).all()


def test_example_level_ldp_reads_the_same_under_secldp_and_rdp():
    """Two accountants, two routes to the multiplier (slope 2/sigma^2 back to z; sigma / sensitivity)."""
    overrides = ("defense=ldp", "defense.level=example", "defense.sigma=1.5")
    _, secldp, _ = accounted(*overrides, "accountant=secldp")
    _, renyi, _ = accounted(*overrides, "accountant=rdp")
    assert np.allclose(secldp.epsilon, renyi.epsilon, rtol=1e-12)
    assert np.allclose(secldp.noise_multiplier, 1.5, rtol=1e-12)


def test_calibrated_example_level_decor_spends_its_target_and_no_more():
    setup, table, summary = accounted("defense=decor", "defense.epsilon=4", "topology=ring", "topology.n=10")
    assert setup.defense.sigma_cor > 0 and setup.defense.sigma_cdp > 0
    assert table.epsilon_decpriv_rdp.max() == pytest.approx(4.0, rel=1e-4)
    assert summary["epsilon"] <= 4.0 * (1 + 1e-4)  # PLD can only tighten it


def test_defense_decor_alone_trains_the_default_run(tmp_path):
    """Issue 40: user-level DECOR at epsilon 10 left the default MLP at test accuracy 0.12 (train loss 3282);
    the example level (the paper's choice for its network) trains it. Measured: 0.626, 0.70, 0.74 on seeds
    0-2 (LDP at the same epsilon: 0.43-0.52)."""
    result = run(["defense=decor", "~attack", "plots=false"], tmp_path / "decor")
    assert result.summary["epsilon"] <= 10 and result.summary["privacy_level"] == "example"
    assert result.summary["accountant"] == "secldp"  # unset in the config: the defense's own, as it ran
    assert result.summary["test_accuracy"] > 0.5 and result.summary["train_loss"] < 2.0


@pytest.mark.slow
def test_decor_sits_between_cdp_and_ldp_at_the_example_level(tmp_path):
    """Allouah et al. 2024, Fig. 1(c), on the default run at epsilon 10 (seeds 0-2): CDP ~ DECOR on the
    complete graph > DECOR torus > DECOR ring >> LDP. Measured: 0.795, 0.787, 0.760, 0.687, 0.474."""
    runs = {
        "cdp": ("defense=cdp",),
        "decor complete": ("defense=decor", "topology=complete"),
        "decor torus": ("defense=decor", "topology=torus"),
        "decor ring": ("defense=decor",),
        "ldp": ("defense=ldp",),
    }
    accuracy = {}
    for name, overrides in runs.items():
        values = []
        for seed in range(3):
            folder = tmp_path / f"{name}-{seed}".replace(" ", "_")
            common = ["defense.level=example", "defense.epsilon=10", "~attack", "plots=false", f"seed={seed}"]
            values.append(run([*overrides, *common], folder).summary["test_accuracy"])
        accuracy[name] = float(np.mean(values))
    table = pd.Series(accuracy)
    assert table["cdp"] - 0.05 < table["decor complete"]
    assert table["decor complete"] > table["decor torus"] > table["decor ring"] > table["ldp"] + 0.1, table


def test_fixed_size_batches_meet_the_target_at_every_node():
    """Wang et al.'s bound for a batch drawn without replacement passes the unsampled Gaussian's as q nears
    1: calibrated at the largest rate (1), the nodes at 16/17 read 11.71 against a target of 10. Each
    order now takes the smaller of the two, and calibration meets the target at the worst rate."""
    for defense in (("defense=ldp", "defense.level=example"), ("defense=decor",)):
        overrides = (
            *defense,
            "defense.sampler=fixed",
            "defense.epsilon=10",
            "topology=ring",
            "topology.n=16",
        )
        setup, table, summary = accounted(*overrides, "protocol.batch_size=16")
        assert len(set(table.sampling_rate)) > 1  # 16/17 and 1 on the default data
        assert table.epsilon.max() <= 10 * (1 + 1e-6) and summary["adjacency"] == "replace_one"


def test_the_sampled_bound_never_exceeds_the_unsampled_gaussian():
    """The curve is the order-wise smaller of the two bounds (the first assertion holds by construction);
    what can fail: Wang et al.'s bound alone does pass the Gaussian's near q = 1, so the minimum is needed
    there, and at small q the curve is that bound unchanged, its amplification kept."""
    from decpriv.privacy.sampled_gaussian import ORDERS, rdp_curve, without_replacement_rdp

    gaussian = np.array(ORDERS) / (2 * 1.2**2)
    for q in (0.05, 0.5, 16 / 17):
        curve = rdp_curve("without_replacement", q, 1.2)
        assert (curve <= gaussian + 1e-15).all()
    assert rdp_curve("without_replacement", 0.05, 1.2)[0] < 0.5 * 2 / (2 * 1.2**2)  # amplified at small q
    raw = np.array([without_replacement_rdp(16 / 17, 1.2, a) for a in ORDERS])
    assert (raw > gaussian).any()
    small = np.array([without_replacement_rdp(0.05, 1.2, a) for a in ORDERS[:8]])
    assert np.array_equal(rdp_curve("without_replacement", 0.05, 1.2, ORDERS[:8]), small)
