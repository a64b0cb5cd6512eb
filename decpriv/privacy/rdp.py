"""Renyi-DP accountant of the (subsampled) Gaussian mechanism via Google's dp-accounting library
(Mironov, CSF 2017; Mironov, Talwar, Zhang, arXiv:1908.10530, 2019, for the sampled Gaussian).

- ``dpsgd`` (example level): every local step of a node is a Poisson-subsampled Gaussian with rate
  q = b / m_v (m_v its local set size) and noise multiplier sigma (add/remove adjacency, sensitivity C).
  decpriv draws fixed-size batches without replacement; the Poisson analysis is the usual stand-in
  (Opacus, TF Privacy) and is stated in privacy.csv's ``mechanism`` column.
- ``ldp`` / ``cdp`` (user level): each step is a full Gaussian mechanism; replacing a user's data moves
  the clipped gradient by up to 2C, so the noise multiplier relative to the sensitivity is sigma / 2.
  For ``cdp`` the protected object is the average model (central threat model, complete graph).
Composition over T = rounds * local_steps steps, conversion to (epsilon, delta) by dp-accounting.
"""

import math
from typing import Annotated

import numpy as np
import pandas as pd
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant
from scipy.optimize import brentq

from decpriv.built import Setup
from decpriv.config_types import Range, checked
from decpriv.errors import bad_value
from decpriv.privacy.base import Accountant
from decpriv.report.findings import Findings

SIGMA_RANGE = (1e-2, 1e4)
# Orders from 2 up: dp-accounting's fractional orders below 2 fail to converge for large sampling rates.
ORDERS = [*np.linspace(2.0, 10.0, 33), *range(11, 64), 80, 128, 256, 512, 1024]


def gradient_steps(setup: Setup) -> int:
    """Noisy gradient steps a node takes over the run: rounds x local steps (FedAvg's local epochs too)."""
    protocol = setup.protocol
    if hasattr(protocol, "steps_per_round"):
        return protocol.rounds * protocol.steps_per_round(setup.local)
    return protocol.rounds * getattr(protocol, "local_steps", 1)


# What the accountants' keys accept (decpriv.config_types)
Delta = Annotated[float, Range(gt=0, lt=1, what="delta, a probability,", eg="1e-5")]
RenyiOrder = Annotated[float, Range(gt=1, what="a Renyi order")]


def gaussian_epsilon(
    noise_multiplier: float, steps: int, delta: float, rate: float = 1.0
) -> tuple[float, float]:
    """(epsilon, best order) of ``steps`` compositions of the (Poisson-subsampled) Gaussian mechanism."""
    if noise_multiplier == 0:
        return math.inf, math.nan
    event: GaussianDpEvent | PoissonSampledDpEvent = GaussianDpEvent(noise_multiplier)
    if rate < 1.0:
        event = PoissonSampledDpEvent(rate, event)
    accountant = RdpAccountant(orders=ORDERS)
    accountant.compose(SelfComposedDpEvent(event, steps))
    epsilon, order = accountant.get_epsilon_and_optimal_order(delta)
    return float(epsilon), float(order)


def calibrate_noise_multiplier(epsilon: float, delta: float, steps: int, rate: float, scale: float) -> float:
    """The defense's sigma whose run meets (epsilon, delta): root of eps(sigma / scale) = epsilon on log sigma
    (epsilon decreases in sigma). ``scale`` maps sigma to the mechanism's noise multiplier (2 for user level)."""

    def excess(log_sigma: float) -> float:
        return math.log(gaussian_epsilon(math.exp(log_sigma) / scale, steps, delta, rate)[0] / epsilon)

    low, high = (math.log(s) for s in SIGMA_RANGE)
    if excess(high) > 0:
        raise bad_value(
            "defense.epsilon",
            epsilon,
            f"even sigma={SIGMA_RANGE[1]:g} over {steps} steps exceeds this target at delta={delta:g}",
            "raise defense.epsilon or accountant.delta, or run fewer rounds",
        )
    if excess(low) < 0:
        return SIGMA_RANGE[0]
    return math.exp(brentq(excess, low, high, xtol=1e-10))


@checked("accountant")
class RenyiAccountant(Accountant):
    """(epsilon, delta) of a Gaussian defense over the whole run, per node (privacy.csv) and worst case."""

    name = "rdp"

    def __init__(self, delta: Delta = 1e-5):
        self.delta = delta
        self._target: float | None = None

    def schedule(self, setup: Setup) -> tuple[int, np.ndarray, float]:
        """(steps, per-node sampling rate, multiplier scale) of the configured run."""
        protocol = setup.protocol
        steps = gradient_steps(setup)
        sizes = setup.local.mask.sum(1).numpy()
        if setup.defense.mechanism().level == "example" and protocol.batch_size is not None:
            rates = np.minimum(1.0, protocol.batch_size / sizes)
            return steps, rates, 1.0
        return steps, np.ones(len(sizes)), 2.0

    def check(self, setup: Setup) -> None:
        defense = setup.defense
        mechanism = defense.mechanism()
        if mechanism is None or mechanism.on != "gradients" or mechanism.correlated:
            raise bad_value(
                "accountant",
                self.name,
                f"the RDP accountant accounts Gaussian gradient noise, not defense={defense.name}",
                "use defense=dpsgd|ldp|cdp or leave accountant unset",
            )
        if not hasattr(setup.protocol, "batch_size"):
            raise bad_value(
                "protocol",
                setup.protocol.name,
                "gradient noise is only added by SGD protocols",
                "use protocol=dsgd or fedavg",
            )
        if mechanism.central and len(setup.network.edges) != setup.network.n * (setup.network.n - 1) // 2:
            raise bad_value(
                "topology",
                setup.cfg.topology.get("_target_", "?").rsplit(".", 1)[-1],
                "the CDP baseline protects the average, which only the complete graph with uniform W computes",
                "use topology=complete gossip_matrix=uniform, or defense=ldp",
            )
        if mechanism.target is not None:
            steps, rates, scale = self.schedule(setup)
            self._target = mechanism.target
            defense.calibrate(
                calibrate_noise_multiplier(mechanism.target, self.delta, steps, float(rates.max()), scale)
            )

    def account(self, setup: Setup) -> Findings:
        mechanism = setup.defense.mechanism()
        steps, rates, scale = self.schedule(setup)
        multiplier = mechanism.sigma / scale
        unique, inverse = np.unique(rates, return_inverse=True)
        results = [gaussian_epsilon(multiplier, steps, self.delta, float(q)) for q in unique]
        epsilon = np.array([r[0] for r in results])[inverse]
        order = np.array([r[1] for r in results])[inverse]
        central = mechanism.central
        table = pd.DataFrame(
            {
                "source": np.arange(setup.network.n),
                "observer": "average_model" if central else "any",
                "epsilon": epsilon,
                "alpha": order,
                "delta": self.delta,
                "threat": "central" if central else "local",
                "mechanism": "poisson_subsampled_gaussian" if mechanism.level == "example" else "gaussian",
                "sampling_rate": rates,
                "steps": steps,
                "noise_multiplier": multiplier,
            }
        )
        summary = {"epsilon": float(epsilon.max()), "delta": self.delta, "privacy_accountant": self.name}
        if self._target is not None:
            summary["epsilon_target"] = self._target
        return Findings(tables={"privacy": table}, summary=summary)
