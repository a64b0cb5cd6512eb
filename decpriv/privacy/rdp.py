"""Renyi-DP accountant of the Gaussian gradient defenses, for the sampler the protocol runs (Mironov, CSF
2017; Mironov, Talwar, Zhang, arXiv:1908.10530, 2019; Wang, Balle, Kasiviswanathan, AISTATS 2019).

- ``dpsgd`` (example level): every local step of node v is a sampled Gaussian, accounted for the defense's
  sampler (:mod:`decpriv.data.sampling`): ``poisson`` at rate q = b / m_v under add/remove adjacency
  (noise multiplier sigma), ``fixed`` (b of m_v without replacement) under replace-one adjacency, where a
  replaced example moves the clipped sum by 2C (multiplier sigma / 2); the full batch is the Gaussian under
  replace-one.
- ``ldp`` / ``cdp`` (user level): each step is a full Gaussian mechanism; replacing a user's data moves
  the clipped gradient by up to 2C, so the noise multiplier relative to the sensitivity is sigma / 2.
  For ``cdp`` the protected object is the average model (central threat model, complete graph).

Composition over T = rounds x local steps, accounted three ways (:mod:`decpriv.privacy.library`):
decpriv's own RDP (:mod:`decpriv.privacy.sampled_gaussian`), dp-accounting's RDP (equal to it, a check) and
dp-accounting's PLD with pessimistic discretisation (an upper bound, tighter where it applies: Poisson and
full batches). Each is sound, so the reported ``epsilon`` is the smallest of them, per node, named in
``epsilon_method``; the others stand beside it in privacy.csv and summary.csv. A target ``defense.epsilon``
is calibrated by RDP (a root of a smooth curve; the discretised PLD is not), so the tightest epsilon of a
calibrated run is at most its target.
"""

import math
from typing import Annotated

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from decpriv.built import Setup
from decpriv.config.types import Range, checked
from decpriv.data.sampling import Sampler, sampler_of
from decpriv.errors import bad_value
from decpriv.privacy.base import Accountant
from decpriv.privacy.library import library_rdp_epsilon, pld_epsilon
from decpriv.privacy.sampled_gaussian import sampled_gaussian_epsilon
from decpriv.report.findings import Findings

SIGMA_RANGE = (1e-2, 1e4)
# how each epsilon was obtained, as the run's first screen names it
PLD_METHOD = "PLD (dp-accounting)"
RDP_METHOD = "RDP (decpriv)"


def gradient_steps(setup: Setup) -> int:
    """Noisy gradient steps a node takes over the run: rounds x local steps (FedAvg's local epochs too)."""
    protocol = setup.protocol
    if hasattr(protocol, "steps_per_round"):
        return protocol.rounds * protocol.steps_per_round(setup.local)
    return protocol.rounds * getattr(protocol, "local_steps", 1)


# What the accountants' keys accept (decpriv.config.types)
Delta = Annotated[float, Range(gt=0, lt=1, what="delta, a probability,", eg="1e-5")]
RenyiOrder = Annotated[float, Range(gt=1, what="a Renyi order")]


def gaussian_epsilon(
    noise_multiplier: float, steps: int, delta: float, rate: float = 1.0, sampler: str = "poisson"
) -> tuple[float, float]:
    """(epsilon, best order) of ``steps`` compositions of the (sampled) Gaussian mechanism; ``sampler`` is
    ``poisson`` or ``without_replacement`` when ``rate`` < 1."""
    return sampled_gaussian_epsilon(
        sampler if rate < 1.0 else "gaussian", rate, noise_multiplier, steps, delta
    )


def calibrate_noise_multiplier(
    epsilon: float, delta: float, steps: int, rates, scale: float, sampler: str = "poisson"
) -> float:
    """The defense's sigma whose run meets (epsilon, delta) at every node: root of
    max_q eps(sigma / scale, q) = epsilon on log sigma over the nodes' distinct sampling ``rates`` (epsilon
    decreases in sigma; it need not grow with q). ``scale`` maps sigma to the mechanism's noise
    multiplier (2 for replace-one)."""
    distinct = np.unique(np.atleast_1d(np.asarray(rates, dtype=float)))

    def excess(log_sigma: float) -> float:
        worst = max(
            gaussian_epsilon(math.exp(log_sigma) / scale, steps, delta, float(q), sampler)[0]
            for q in distinct
        )
        return math.log(max(worst, 1e-300) / epsilon)  # at a large delta a strong noise's epsilon is 0

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


def gradient_schedule(setup: Setup) -> tuple[int, np.ndarray, float, Sampler]:
    """(steps, per-node sampling rate, sensitivity / clip, sampler) of the configured run's gradient noise:
    the user level releases the node's whole batch gradient (replace-one, 2C); the example level a sampled
    sum, moved by C (Poisson, add/remove) or 2C (fixed size, replace-one)."""
    protocol, mechanism = setup.protocol, setup.defense.mechanism()
    steps = gradient_steps(setup)
    if mechanism.level != "example":
        return steps, np.ones(setup.network.n), 2.0, sampler_of("full", None)
    sampler = sampler_of(mechanism.sampler, protocol.batch_size)
    rates = sampler.rates(setup.local, protocol.batch_size).numpy()
    return steps, rates, 1.0 if sampler.adjacency == "add_remove" else 2.0, sampler


def three_ways(analysis: str, q: float, multiplier: float, steps: int, size: int, delta: float):
    """decpriv's (epsilon, order), dp-accounting's RDP epsilon and its PLD epsilon for one sampling rate."""
    epsilon, order = sampled_gaussian_epsilon(analysis, q, multiplier, steps, delta)
    library = library_rdp_epsilon(analysis, q, multiplier, steps, delta, size)
    return epsilon, order, library, pld_epsilon(analysis, q, multiplier, steps, delta)


def sampled_epsilons(
    analysis: str, rates: np.ndarray, multipliers, steps: int, sizes: np.ndarray, delta: float
) -> dict[str, np.ndarray]:
    """privacy.csv's per-node epsilon columns of ``steps`` sampled Gaussian steps at each node's rate and
    noise multiplier: decpriv's RDP (and its order), dp-accounting's RDP and PLD, and the tightest with the
    method that gave it. Each distinct (rate, multiplier) pair is accounted once (PLDs are slow)."""
    multipliers = np.broadcast_to(np.asarray(multipliers, dtype=float), rates.shape)
    pairs, first, inverse = np.unique(
        np.stack([rates, multipliers]), axis=1, return_index=True, return_inverse=True
    )
    found = [
        three_ways(analysis, float(q), float(z), steps, int(sizes[i]), delta)
        for (q, z), i in zip(pairs.T, first, strict=True)
    ]
    own, order, library, pld = (np.array(c)[inverse.ravel()] for c in zip(*found, strict=True))
    tightest = np.fmin(own, pld)  # PLD is NaN where dp-accounting has no event for the sampler
    return {
        "epsilon": tightest,
        "epsilon_method": np.where(pld < own, PLD_METHOD, RDP_METHOD),  # "method" is exact | bound (audit)
        "alpha": order,
        "epsilon_decpriv_rdp": own,
        "epsilon_dp_accounting_rdp": library,
        "epsilon_dp_accounting_pld": pld,
    }


def worst_of(columns: dict[str, np.ndarray]) -> dict[str, float | str]:
    """The summary of :func:`sampled_epsilons`' columns: the worst node's epsilon and method, each
    method's largest value beside it."""
    worst = int(np.argmax(columns["epsilon"]))
    others = ("epsilon_decpriv_rdp", "epsilon_dp_accounting_rdp", "epsilon_dp_accounting_pld")
    return {
        "epsilon": float(columns["epsilon"][worst]),
        "epsilon_method": str(columns["epsilon_method"][worst]),
        **{key: float(np.max(columns[key])) for key in others},
    }


@checked("accountant")
class RenyiAccountant(Accountant):
    """(epsilon, delta) of a Gaussian defense over the whole run, per node (privacy.csv) and worst case."""

    name = "rdp"

    def __init__(self, delta: Delta = 1e-5):
        self.delta = delta
        self._target: float | None = None

    def schedule(self, setup: Setup) -> tuple[int, np.ndarray, float, Sampler]:
        return gradient_schedule(setup)

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
            steps, rates, scale, sampler = self.schedule(setup)
            self._target = mechanism.target
            defense.calibrate(
                calibrate_noise_multiplier(
                    mechanism.target, self.delta, steps, rates, scale, sampler.accounted_as
                )
            )

    def account(self, setup: Setup) -> Findings:
        mechanism = setup.defense.mechanism()
        steps, rates, scale, sampler = self.schedule(setup)
        multiplier, analysis = mechanism.sigma / scale, sampler.accounted_as
        sizes = setup.local.counts.numpy()
        columns = sampled_epsilons(analysis, rates, multiplier, steps, sizes, self.delta)
        central = mechanism.central
        table = pd.DataFrame(
            {
                "source": np.arange(setup.network.n),
                "observer": "average_model" if central else "any",
                **columns,
                "delta": self.delta,
                "threat": "central" if central else "local",
                "mechanism": f"{analysis}_gaussian" if analysis != "gaussian" else "gaussian",
                "sampler": sampler.name,
                "adjacency": sampler.adjacency,
                "sampling_rate": rates,
                "steps": steps,
                "noise_multiplier": multiplier,
            }
        )
        summary = {
            **worst_of(columns),
            "delta": self.delta,
            "privacy_accountant": self.name,
            "adjacency": sampler.adjacency,
        }
        if mechanism.level == "example":  # the user level's guarantee does not depend on the batch drawn
            summary |= {"sampler": sampler.name, "accounted_sampler": sampler.name}
        if self._target is not None:
            summary["epsilon_target"] = self._target
        return Findings(tables={"privacy": table}, summary=summary)
