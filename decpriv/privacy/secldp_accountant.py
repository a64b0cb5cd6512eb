"""The SecLDP accountant (Allouah et al. 2024, Sec. 4): (epsilon, delta) of DECOR and of its LDP / CDP
baselines under a threat model, with calibration of the noise to a target epsilon by root finding.

User level: one step of node i is a Gaussian view of Renyi slope c_i (secldp_bounds), composed over T steps
in closed form. Example level (App. D.1): the clipped per-example sum is released through the same
covariance Sigma_H; whitened, node i's step is the Gaussian mechanism with noise multiplier
z_i = 1 / (Delta sqrt([Sigma_H^-1]_ii)) = sqrt(2 / c_i) C / Delta on a batch sampled at rate q_i, so it is
accounted as the sampled Gaussian (Poisson: Delta = C, add/remove; fixed size: Delta = 2C, replace-one),
by decpriv's RDP and dp-accounting's PLD, the tighter reported (:mod:`decpriv.privacy.rdp`).

Threats: ``eavesdropper`` (sees every message, H = V), ``curious`` (each single user j, H = V \\ {j}, worst
j), ``collusion`` (every coalition of ``collusion`` users, worst one). Baselines use the same conversion so
a sweep compares the three at equal nominal epsilon (Allouah et al., ICML 2024, Sec. 4): LDP has slope 2 / sigma^2,
CDP protects the average with the LDP run's sigma.
"""

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402
from scipy.optimize import brentq  # noqa: E402

from decpriv.built import Setup  # noqa: E402
from decpriv.config.types import checked
from decpriv.defenses.decor import CdpExcess  # noqa: E402
from decpriv.errors import ConfigError, bad_value  # noqa: E402
from decpriv.privacy.base import Accountant  # noqa: E402
from decpriv.privacy.rdp import (  # noqa: E402
    RDP_METHOD,
    Delta,
    calibrate_noise_multiplier,
    gradient_schedule,
    gradient_steps,
    sampled_epsilons,
    worst_of,
)
from decpriv.privacy.sampled_gaussian import (  # noqa: E402
    gaussian_dp_epsilon,
    sampled_gaussian_epsilon,
)
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

EXACT_METHOD = "exact Gaussian view"


def plain_gaussian(sampler) -> bool:
    """Every step a plain Gaussian view (the user level, or the example level's whole local set): nothing
    sampled to amplify, so T steps compose into one Gaussian."""
    return sampler.name == "full"


def epsilon_vs_sigma_cor(
    adjacency,
    sigma_cdp: float,
    sigma_cor: float,
    clip: float,
    epsilon_of: Callable[[float], float],
    threat: tuple[str, int],
) -> pd.DataFrame:
    """DECOR Fig. 2: exact and Theorem-1 epsilon over a grid of sigma_cor around the configured one;
    ``epsilon_of`` maps a per-step slope to the run's epsilon, ``threat`` is (threat, collusion)."""
    grid = np.geomspace(max(sigma_cor, clip) / 100, max(sigma_cor, clip) * 100, 25)
    honest = honest_connectivities(adjacency, *threat)
    rows = []
    for cor in grid:
        slope = float(worst_slopes(adjacency, sigma_cdp, cor, clip, *threat).max())
        bound = threat_bound(adjacency, sigma_cdp, cor, clip, *threat, honest)
        rows.append({"sigma_cor": cor, "epsilon": epsilon_of(slope), "epsilon_bound": epsilon_of(bound)})
    return pd.DataFrame(rows)


def sigma_cor_figure(
    curve: pd.DataFrame, sigma_cor: float, epsilon: float, limits: dict[str, float], method: str
) -> Figure:
    """``method``: how each slope became an epsilon (the run's headline method where it is cheap)."""
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.loglog(curve.sigma_cor, curve.epsilon, "o-", ms=3, label="SecLDP, exact covariance")
    ax.loglog(curve.sigma_cor, curve.epsilon_bound, "--", label="Theorem 1 bound (worst honest subgraph)")
    for label, value in limits.items():
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        ax.annotate(label, (curve.sigma_cor.iloc[0], value), fontsize=8, va="bottom")
    star = "this run" if method == EXACT_METHOD else "this run (summary.csv leads with the tightest)"
    ax.plot([sigma_cor], [epsilon], "r*", ms=12, label=star)
    ax.set_xlabel("sigma_cor")
    ax.set_ylabel(f"epsilon ({method})")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(FormatStrFormatter("%g"))  # 4, 6, 10, 20 rather than 4x10^0 beside 10
    ax.set_title("DECOR: epsilon vs correlated noise (fixed sigma_cdp)")
    # the curve falls from the top left: the bottom left is free, above the CDP limit's label
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 0.08))
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

    @staticmethod
    def unread(node: Any) -> dict[str, str]:
        """``defense.cdp_excess`` (DECOR's) is replaced by a given ``accountant.cdp_excess``."""
        if node.get("cdp_excess") is None:
            return {}
        return {"defense.cdp_excess": f"beside accountant.cdp_excess={node.cdp_excess}, which replaces it"}

    def steps(self, setup: Setup) -> int:
        return gradient_steps(setup)

    def check(self, setup: Setup) -> None:
        defense, n = setup.defense, setup.network.n
        mechanism = defense.mechanism()
        if mechanism is None or mechanism.on != "gradients" or defense.name not in ("decor", "ldp", "cdp"):
            raise bad_value(
                "accountant",
                self.name,
                f"SecLDP accounts Gaussian gradient noise (decor, ldp, cdp), not defense={defense.name}",
                "use defense=decor|ldp|cdp, or another accountant",
            )
        if not hasattr(setup.protocol, "batch_size"):
            raise bad_value(
                "protocol", setup.protocol.name, "DECOR noise is added to SGD gradients", "use protocol=dsgd"
            )
        check_threat(self.threat, self.collusion, n)
        if self.threat == "collusion" and mechanism.correlated and self.collusion >= n - 1:
            raise bad_value("accountant.collusion", self.collusion, "no two honest users remain", "lower it")
        self._refuse_unused_excess(defense)
        target_slope = None if mechanism.target is None else self.slope_for_target(setup, mechanism.target)
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
        try:
            sigma_cor = calibrate_sigma_cor(
                setup.network.adjacency, sigma_cdp, defense.clip, target_slope, self.threat, self.collusion
            )
        except ConfigError:
            if defense.sigma_cdp is not None:  # the user's own sigma_cdp: the sentence names it
                raise
            key = "accountant.cdp_excess" if self.cdp_excess else "defense.cdp_excess"
            needed = self._least_private(setup, target_slope) * math.sqrt(n) / sigma_ldp
            raise bad_value(
                key,
                self.cdp_excess or defense.cdp_excess,
                f"the private noise it calibrates (sigma_cdp {sigma_cdp:.4g}) is too small for any correlated "
                f"noise to reach the target under threat={self.threat}: correlated noise only hides a node "
                f"among the others, and here it needs {key} above {needed:.3g} however large sigma_cor",
                f"use {key}={math.ceil(needed * 1.1 * 10) / 10:g}, or raise the epsilon target",
            ) from None
        defense.calibrate(sigma_cdp, sigma_cor)

    def _refuse_unused_excess(self, defense: object) -> None:
        """``accountant.cdp_excess`` picks DECOR's sigma_cdp only when it is calibrated: beside a given
        sigma_cdp, or with no target, it would be recorded and do nothing."""
        if self.cdp_excess is None or defense.name != "decor":
            return
        if defense.sigma_cdp is not None or defense.epsilon is None:
            beside = (
                f"defense.sigma_cdp={defense.sigma_cdp:g} is given"
                if defense.sigma_cdp is not None
                else "defense.epsilon=null calibrates nothing"
            )
            raise bad_value(
                "accountant.cdp_excess",
                self.cdp_excess,
                f"it sets sigma_cdp when the accountant calibrates it, and {beside}, so it would do nothing",
                "drop one of the two",
            )

    def _least_private(self, setup: Setup, target_slope: float, high: float = 1e6) -> float:
        """The sigma_cdp whose worst slope meets the target with sigma_cor at ``high`` C (the least private
        noise any correlated noise can work with), by Brent's method on log sigma_cdp."""
        clip, adjacency = setup.defense.clip, setup.network.adjacency

        def excess(log_cdp: float) -> float:
            slopes = worst_slopes(
                adjacency, math.exp(log_cdp), high * clip, clip, self.threat, self.collusion
            )
            return math.log(slopes.max() / target_slope)

        return math.exp(brentq(excess, math.log(1e-6 * clip), math.log(high * clip), xtol=1e-10))

    def slope_for_target(self, setup: Setup, target: float) -> float:
        """The per-step Renyi slope c (user-level units, 2 C^2 [Sigma^-1]_ii) whose run meets ``target``."""
        steps, rates, scale, sampler = gradient_schedule(setup)
        if plain_gaussian(sampler):
            return slope_for_epsilon(target, steps, self.delta)
        z = calibrate_noise_multiplier(target, self.delta, steps, rates, 1.0, sampler.accounted_as)
        return 2.0 / (scale * z) ** 2

    def epsilon_of_slope(self, setup: Setup) -> tuple[Callable[[float], float], str]:
        """The run's epsilon at the worst node as a function of its per-step slope, and the method's name:
        the headline's (exact) for Gaussian steps; decpriv's RDP for sampled ones (a PLD a point is slow)."""
        steps, rates, scale, sampler = gradient_schedule(setup)
        if plain_gaussian(sampler):

            def exact(slope: float) -> float:
                return gaussian_dp_epsilon(math.sqrt(2 * steps * slope), self.delta)

            return exact, EXACT_METHOD
        q = float(rates.max())

        def sampled(slope: float) -> float:
            multiplier = math.sqrt(2.0 / slope) / scale
            return sampled_gaussian_epsilon(sampler.accounted_as, q, multiplier, steps, self.delta)[0]

        return sampled, RDP_METHOD

    def node_epsilons(self, setup: Setup, slopes: np.ndarray) -> tuple[dict, dict]:
        """privacy.csv's per-node columns and the summary's method keys, for the run's privacy unit."""
        steps, rates, scale, sampler = gradient_schedule(setup)
        if plain_gaussian(sampler):
            return self.gaussian_views(slopes, steps)
        multipliers = np.sqrt(2.0 / slopes) / scale
        sizes = setup.local.counts.numpy()
        columns = sampled_epsilons(sampler.accounted_as, rates, multipliers, steps, sizes, self.delta)
        columns |= {"sampling_rate": rates, "noise_multiplier": multipliers}
        summary = worst_of(columns) | {"accounted_sampler": sampler.name, "adjacency": sampler.adjacency}
        return columns, summary

    def gaussian_views(self, slopes: np.ndarray, steps: int) -> tuple[dict, dict]:
        """User level: T adaptive Gaussian steps of slope c are one Gaussian view, mu = sqrt(2 T c) (Dong,
        Roth, Su 2022, Cor. 3.3), whose exact epsilon leads; the Renyi closed form that calibration inverts
        (secldp_bounds.slope_for_epsilon) stands beside it, as the paper's accountant reports."""
        unique = np.unique(slopes)
        at = np.searchsorted(unique, slopes)
        exact = np.array([gaussian_dp_epsilon(math.sqrt(2 * steps * c), self.delta) for c in unique])[at]
        renyi = np.array([epsilon_from_slope(c, steps, self.delta) for c in unique])[at]
        columns = {
            "epsilon": exact,
            "epsilon_method": EXACT_METHOD,
            "alpha": [optimal_order(c, steps, self.delta) for c in slopes],
            "epsilon_renyi_slope": renyi,
        }
        summary = {"epsilon_method": EXACT_METHOD, "epsilon_renyi_slope": float(renyi.max())}
        return columns, summary | {"adjacency": "replace_one"}

    def account(self, setup: Setup) -> Findings:
        defense, network = setup.defense, setup.network
        n, mechanism = network.n, defense.mechanism()
        summary: dict[str, float | str] = {
            "delta": self.delta,
            "privacy_accountant": self.name,
            "threat": self.threat,
            "privacy_level": mechanism.level,
        }
        figures, tables = {}, {}
        if mechanism.correlated:
            slopes = self.correlated_view(setup, summary, figures, tables)
        else:
            slopes = np.full(n, 2.0 / mechanism.sigma**2)
        columns, method = self.node_epsilons(setup, slopes)
        summary.update(method)
        central = mechanism.central
        observer = "average_model" if central else self.threat
        if self.threat == "collusion" and not central:
            observer = f"collusion_{self.collusion}"
        tables["privacy"] = pd.DataFrame(
            {
                "source": np.arange(n),
                "observer": observer,
                **columns,
                "delta": self.delta,
                "threat": "central" if central else self.threat,
                "slope": slopes,
                "steps": self.steps(setup),
            }
        )
        summary.update(epsilon=float(np.max(columns["epsilon"])), slope=float(slopes.max()))
        if self._target is not None:
            summary["epsilon_target"] = self._target
        return Findings(tables=tables, summary=summary, figures=figures)

    def correlated_view(self, setup: Setup, summary: dict, figures: dict, tables: dict) -> np.ndarray:
        """DECOR's per-node worst slopes under the threat, with Theorem 1's bound and Fig. 2's curve."""
        defense, n, A = setup.defense, setup.network.n, setup.network.adjacency
        noise = (defense.sigma_cdp, defense.sigma_cor, defense.clip, self.threat, self.collusion)
        slopes = worst_slopes(A, *noise)
        summary.update(algebraic_connectivity=algebraic_connectivity(A), slope_bound=threat_bound(A, *noise))
        epsilon_of, method = self.epsilon_of_slope(setup)
        curve = epsilon_vs_sigma_cor(
            A, defense.sigma_cdp, defense.sigma_cor, defense.clip, epsilon_of, noise[3:]
        )
        ldp = epsilon_of(2.0 * defense.clip**2 / defense.sigma_cdp**2)
        cdp = epsilon_of(2.0 * defense.clip**2 / (n * defense.sigma_cdp**2))
        figures["plots/epsilon_vs_sigma_cor.png"] = partial(
            sigma_cor_figure,
            curve,
            defense.sigma_cor,
            epsilon_of(float(slopes.max())),
            {"sigma_cor = 0 (LDP)": ldp, "sigma_cor -> inf (CDP)": cdp},
            method,
        )
        tables["epsilon_vs_sigma_cor"] = curve.assign(sigma_cdp=defense.sigma_cdp, method=method)
        return slopes
