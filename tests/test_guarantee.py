"""Privacy numbers first: a run's first screen names the tightest sound epsilon, its delta, the method that
gave it and the neighbouring relation, with the other methods' values beside it, for every accountant."""

import math

import pandas as pd
import pytest
from scipy.stats import norm

from decpriv.api import run
from decpriv.cli import main
from decpriv.privacy.library import pld_epsilon
from decpriv.privacy.sampled_gaussian import conversion
from decpriv.report.guarantee import guarantee_line


def gaussian_delta(epsilon: float, sigma: float) -> float:
    """The exact delta(epsilon) of one Gaussian of multiplier sigma (Balle, Wang, ICML 2018, Thm. 8)."""
    a = 1 / (2 * sigma)
    return norm.cdf(a - epsilon * sigma) - math.exp(epsilon) * norm.cdf(-a - epsilon * sigma)


def test_the_conversion_is_below_mironovs_and_sound_for_the_gaussian():
    # alpha = 2, delta = 1e-5 by hand: log(1/2) - log(2e-5) = log(25000) against log(1e5)
    assert conversion(2, 1e-5) == pytest.approx(math.log(25000), rel=1e-12)
    for alpha in (1.5, 2, 8, 32):
        assert conversion(alpha, 1e-5) < math.log(1e5) / (alpha - 1)
        for sigma in (0.8, 2.0, 10.0):  # Renyi alpha / (2 sigma^2), converted: delta is met exactly
            epsilon = alpha / (2 * sigma**2) + conversion(alpha, 1e-5)
            assert gaussian_delta(epsilon, sigma) <= 1e-5


def test_dpsgd_leads_with_pld_at_its_delta_sampler_and_adjacency(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    main(["run", "experiment=dpsgd_digits", "~attack", "protocol.rounds=5", "plots=false",
          f"hydra.run.dir={tmp_path / 'r'}"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "run folder: r"  # relative to the working directory, as a sweep's folders are
    tmp_path = tmp_path / "r"
    table = pd.read_csv(tmp_path / "privacy.csv")
    q, sigma = table.sampling_rate.max(), table.noise_multiplier.iloc[0]
    pld = pld_epsilon("poisson", q, sigma, 5, 1e-5)  # the same composition, computed here
    text = " ".join(" ".join(lines[:24]).split())  # the first screen, unwrapped
    assert f"privacy: epsilon {round(pld, 4):g} at delta 1e-05 by PLD (dp-accounting);" in text
    assert "sampler poisson, adjacency add_remove; also RDP (decpriv)" in text
    rdp = float(text.split("also RDP (decpriv) ")[1].split(",")[0])
    assert rdp > pld and rdp == pytest.approx(table.epsilon_decpriv_rdp.max(), abs=1e-4)


def test_network_dp_leads_with_the_tighter_conversion_of_its_renyi_loss(tmp_path):
    overrides = ["topology=karate", "defense=muffliato", "accountant=network_dp", "accountant.alpha=2"]
    overrides += ["protocol.rounds=2", "data=gaussian_classes", "partition=one_per_node", "~attack"]
    summary = run([*overrides, "plots=false"], tmp_path).summary
    assert summary["epsilon"] == pytest.approx(summary["epsilon_rdp_max"] + math.log(25000), rel=1e-9)
    assert summary["epsilon_mironov"] == pytest.approx(summary["epsilon_rdp_max"] + math.log(1e5), rel=1e-9)
    line = guarantee_line(summary)
    assert line.startswith(f"privacy: epsilon {round(summary['epsilon'], 4):g} at delta 1e-05 by pairwise")
    assert "adjacency replace_one; also Mironov's conversion" in line


def test_no_accountant_no_line():
    assert guarantee_line({"test_accuracy": 0.9, "sampler": "poisson"}) is None
