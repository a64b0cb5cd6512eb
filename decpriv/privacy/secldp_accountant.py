"""The SecLDP accountant (Allouah et al. 2024, Sec. 4): user-level (epsilon, delta) of DECOR and of its LDP /
CDP baselines under a threat model, with calibration of the noise to a target epsilon by root finding.

Threats: ``eavesdropper`` (sees every message, H = V), ``curious`` (each single user j, H = V \\ {j}, worst
j), ``collusion`` (every coalition of ``collusion`` users, worst one). Baselines use the same conversion so
a sweep compares the three at equal nominal epsilon (Allouah et al., ICML 2024, Sec. 4): LDP has slope 2 / sigma^2,
CDP protects the average with the LDP run's sigma.
"""

import math
from functools import partial

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from decpriv.built import Setup  # noqa: E402
from decpriv.config_types import checked
from decpriv.defenses.decor import CdpExcess  # noqa: E402
from decpriv.errors import bad_value  # noqa: E402
from decpriv.privacy.base import Accountant  # noqa: E402
from decpriv.privacy.rdp import Delta, gradient_steps  # noqa: E402
from decpriv.privacy.secldp_bounds import (  # noqa: E402
    Threat,
    algebraic_connectivity,
    calibrate_sigma_cor,
    check_threat,
    epsilon_from_slope,
    honest_connectivities,
    optimal_order,
    slope_for_epsilon,
    threat_bound,
    worst_slopes,
)
from decpriv.report.findings import Findings  # noqa: E402


def epsilon_vs_sigma_cor(
    adjacency,
    sigma_cdp: float,
    sigma_cor: float,
    clip: float,
    steps: int,
    delta: float,
    threat: str,
    collusion: int,
) -> pd.DataFrame:
    """DECOR Fig. 2: exact and Theorem-1 epsilon over a grid of sigma_cor around the configured one."""
    grid = np.geomspace(max(sigma_cor, clip) / 100, max(sigma_cor, clip) * 100, 25)
    honest = honest_connectivities(adjacency, threat, collusion)
    rows = []
    for cor in grid:
        slope = float(worst_slopes(adjacency, sigma_cdp, cor, clip, threat, collusion).max())
        bound = threat_bound(adjacency, sigma_cdp, cor, clip, threat, collusion, honest)
        rows.append(
            {
                "sigma_cor": cor,
                "epsilon": epsilon_from_slope(slope, steps, delta),
                "epsilon_bound": epsilon_from_slope(bound, steps, delta),
            }
        )
    return pd.DataFrame(rows)


def sigma_cor_figure(
    curve: pd.DataFrame, sigma_cor: float, epsilon: float, limits: dict[str, float]
) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.loglog(curve.sigma_cor, curve.epsilon, "o-", ms=3, label="SecLDP (exact)")
    ax.loglog(curve.sigma_cor, curve.epsilon_bound, "--", label="Theorem 1 bound (worst honest subgraph)")
    for label, value in limits.items():
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        ax.annotate(label, (curve.sigma_cor.iloc[0], value), fontsize=8, va="bottom")
    ax.plot([sigma_cor], [epsilon], "r*", ms=12, label="this run")
    ax.set_xlabel("sigma_cor")
    ax.set_ylabel("epsilon")
    ax.set_title("DECOR: epsilon vs correlated noise (fixed sigma_cdp)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@checked("accountant")
class SecLDPAccountant(Accountant):
    """Per-node SecLDP of decor / ldp / cdp over T = rounds * local_steps steps.

    ``cdp_excess`` picks DECOR's (sigma_cdp, sigma_cor) couple on the target's iso-epsilon curve
    (sigma_cdp = cdp_excess x sigma_ldp / sqrt(n), replacing ``defense.cdp_excess``): the couple is not
    unique and Allouah et al. (ICML 2024, App. D.2) tune it with the learning rate and the clip. It lives
    here so one sweep can tune it beside cdp / ldp, which have a single noise level and ignore it.
    """

    name = "secldp"

    def __init__(
        self,
        delta: Delta = 1e-5,
        threat: Threat = "eavesdropper",
        collusion: int = 2,
        cdp_excess: CdpExcess | None = None,  # null: the defense's
    ):
        self.delta, self.threat, self.collusion = delta, threat, collusion
        self.cdp_excess = cdp_excess
        self._target: float | None = None

    def steps(self, setup: Setup) -> int:
        return gradient_steps(setup)

    def check(self, setup: Setup) -> None:
        defense, n = setup.defense, setup.network.n
        mechanism = defense.mechanism()
        if mechanism is None or mechanism.on != "gradients" or mechanism.level != "user":
            raise bad_value(
                "accountant",
                self.name,
                f"SecLDP accounts user-level Gaussian noise (decor, ldp, cdp), not defense={defense.name}",
                "use defense=decor|ldp|cdp, or another accountant",
            )
        if not hasattr(setup.protocol, "batch_size"):
            raise bad_value(
                "protocol", setup.protocol.name, "DECOR noise is added to SGD gradients", "use protocol=dsgd"
            )
        check_threat(self.threat, self.collusion, n)
        if self.threat == "collusion" and mechanism.correlated and self.collusion >= n - 1:
            raise bad_value("accountant.collusion", self.collusion, "no two honest users remain", "lower it")
        target_slope = (
            None
            if mechanism.target is None
            else slope_for_epsilon(mechanism.target, self.steps(setup), self.delta)
        )
        self._target = mechanism.target
        if not mechanism.correlated:
            if target_slope is not None:
                defense.calibrate(math.sqrt(2.0 / target_slope))
            return
        if target_slope is None:
            if defense.sigma_cdp == 0:
                raise bad_value(
                    "defense.sigma_cdp",
                    0,
                    "with no private noise the correlated noise cancels in the sum of all messages, so the "
                    "eavesdropper learns the exact sum of clipped gradients and SecLDP is infinite",
                    "set defense.sigma_cdp > 0",
                )
            return
        sigma_ldp = defense.clip * math.sqrt(2.0 / target_slope)
        sigma_cdp = (
            defense.sigma_cdp
            if defense.sigma_cdp is not None
            else (self.cdp_excess or defense.cdp_excess) * sigma_ldp / math.sqrt(n)
        )
        if sigma_cdp <= 0:
            raise bad_value(
                "defense.sigma_cdp",
                sigma_cdp,
                "SecLDP needs private noise",
                "set defense.sigma_cdp > 0 or null",
            )
        sigma_cor = calibrate_sigma_cor(
            setup.network.adjacency, sigma_cdp, defense.clip, target_slope, self.threat, self.collusion
        )
        defense.calibrate(sigma_cdp, sigma_cor)

    def account(self, setup: Setup) -> Findings:
        defense, network = setup.defense, setup.network
        n, steps = network.n, self.steps(setup)
        summary: dict[str, float | str] = {
            "delta": self.delta,
            # the closed form that calibration inverts (secldp_bounds.slope_for_epsilon)
            "epsilon_method": "Renyi slope at the best order (Mironov's conversion)",
            "adjacency": "replace_one",
            "privacy_accountant": self.name,
            "threat": self.threat,
        }
        figures = {}
        tables = {}
        mechanism = defense.mechanism()
        if mechanism.correlated:
            A = network.adjacency
            slopes = worst_slopes(
                A, defense.sigma_cdp, defense.sigma_cor, defense.clip, self.threat, self.collusion
            )
            a = algebraic_connectivity(A)
            bound = threat_bound(
                A, defense.sigma_cdp, defense.sigma_cor, defense.clip, self.threat, self.collusion
            )
            summary.update(algebraic_connectivity=a, slope_bound=bound)
            curve = epsilon_vs_sigma_cor(
                A,
                defense.sigma_cdp,
                defense.sigma_cor,
                defense.clip,
                steps,
                self.delta,
                self.threat,
                self.collusion,
            )
            epsilon = epsilon_from_slope(float(slopes.max()), steps, self.delta)
            ldp = epsilon_from_slope(2.0 * defense.clip**2 / defense.sigma_cdp**2, steps, self.delta)
            cdp = epsilon_from_slope(2.0 * defense.clip**2 / (n * defense.sigma_cdp**2), steps, self.delta)
            figures["plots/epsilon_vs_sigma_cor.png"] = partial(
                sigma_cor_figure,
                curve,
                defense.sigma_cor,
                epsilon,
                {"sigma_cor = 0 (LDP)": ldp, "sigma_cor -> inf": cdp},
            )
            tables["epsilon_vs_sigma_cor"] = curve.assign(sigma_cdp=defense.sigma_cdp)
        else:
            slopes = np.full(n, 2.0 / mechanism.sigma**2)
        epsilon = np.array([epsilon_from_slope(s, steps, self.delta) for s in np.unique(slopes)])
        eps_nodes = epsilon[np.searchsorted(np.unique(slopes), slopes)]
        central = mechanism.central
        observer = "average_model" if central else self.threat
        if self.threat == "collusion" and not central:
            observer = f"collusion_{self.collusion}"
        tables["privacy"] = pd.DataFrame(
            {
                "source": np.arange(n),
                "observer": observer,
                "epsilon": eps_nodes,
                "alpha": [optimal_order(s, steps, self.delta) for s in slopes],
                "delta": self.delta,
                "threat": "central" if central else self.threat,
                "slope": slopes,
                "steps": steps,
            }
        )
        summary.update(epsilon=float(eps_nodes.max()), slope=float(slopes.max()))
        if self._target is not None:
            summary["epsilon_target"] = self._target
        return Findings(tables=tables, summary=summary, figures=figures)
