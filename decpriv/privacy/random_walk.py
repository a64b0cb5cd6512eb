"""Pairwise network DP of private random-walk SGD (Cyffers, Bellet, Basu, ICML 2024, Theorem).

For T walk steps with Gaussian noise of multiplier s relative to the sensitivity (here s = sigma / 2:
user-level clipping to C moves a gradient by up to 2C, and at the example level one example moves the
clipped sum by at most 2C, amplification by subsampling unclaimed) and s^2 >= 2 alpha (alpha - 1), the
loss of u seen from v is

    eps_{u->v}(alpha) <= alpha T ln T / (s^2 n^2) + (alpha T / (s^2 n)) [-ln(I - W + 11^T/n)]_{uv},

the theorem's O() read with constant 1: an asymptotic statement, not a certified bound, so privacy.csv labels
its pairs ``method`` = ``asymptotic`` (an empirical audit, ``attack=audit``, checks it). The matrix logarithm, -ln(I - W + J/n) = sum_{k>=1} (W^k - J/n)/k,
comes from the eigendecomposition of the symmetric W (log(1 - lambda) on the non-trivial eigenvalues).
Far pairs can make the second term negative; losses are floored at 0.
The (epsilon, delta) of the largest loss uses Canonne, Kamath, Steinke's conversion at the accountant's order
(:func:`decpriv.privacy.sampled_gaussian.conversion`); Mironov's stands beside it (``epsilon_mironov``).
"""

import math
from functools import partial

import numpy as np
import pandas as pd
from scipy.sparse.csgraph import shortest_path

from decpriv.built import Setup
from decpriv.config.types import checked
from decpriv.errors import bad_value
from decpriv.privacy.base import Accountant
from decpriv.privacy.network_dp import distance_figure, loss_vs_distance
from decpriv.privacy.rdp import Delta, RenyiOrder
from decpriv.privacy.sampled_gaussian import conversion
from decpriv.report.findings import Findings

MAX_PAIR_ROWS = 300


def walk_log_matrix(W: np.ndarray) -> np.ndarray:
    """-ln(I - W + 11^T/n) for a symmetric stochastic W (eigendecomposition)."""
    values, vectors = np.linalg.eigh(W)
    top = np.argmax(values)
    logs = -np.log(np.clip(1.0 - values, 1e-300, None))
    logs[top] = 0.0  # the eigenvalue 1 of W becomes 1 - 1 + 1 = 1 in I - W + J/n
    return (vectors * logs) @ vectors.T


def random_walk_loss(W: np.ndarray, steps: int, multiplier: float, alpha: float) -> np.ndarray:
    """(n, n) bound F[u, v] on eps_{u->v}(alpha) (diagonal zero)."""
    n = len(W)
    scale = alpha * steps / multiplier**2
    F = scale * math.log(steps) / n**2 + (scale / n) * walk_log_matrix(W)
    F = np.maximum(F, 0.0)
    np.fill_diagonal(F, 0.0)
    return F


@checked("accountant")
class RandomWalkAccountant(Accountant):
    """Per-pair loss of ``protocol=random_walk defense=ldp`` at Renyi order ``alpha``."""

    name = "random_walk"

    def __init__(self, alpha: RenyiOrder = 2.0, delta: Delta = 1e-5):
        self.alpha, self.delta = alpha, delta

    def check(self, setup: Setup) -> None:
        mechanism = setup.defense.mechanism()
        if not setup.protocol.walks or mechanism is None or not mechanism.locally_private:
            raise bad_value(
                "accountant",
                self.name,
                f"the random-walk bound covers protocol=random_walk with defense=ldp (or dpsgd), not "
                f"protocol={setup.protocol.name} with defense={setup.defense.name}",
                "use protocol=random_walk defense=ldp",
            )
        if mechanism.target is not None:
            raise bad_value(
                "defense.epsilon",
                mechanism.target,
                "the pairwise bound has no single target",
                "set defense.sigma",
            )
        if abs(setup.network.W - setup.network.W.T).max() > 1e-12:
            raise bad_value(
                "gossip_matrix",
                "non-symmetric",
                "the matrix-logarithm bound needs a symmetric W",
                "use gossip_matrix=metropolis_hastings",
            )
        multiplier = mechanism.sigma / 2.0
        if multiplier**2 < 2 * self.alpha * (self.alpha - 1):
            # example level: a user-level defense's other way (DP-SGD is example-level and has no such key)
            level = (
                " defense.level=example (the noise then falls on a clipped batch sum, b times smaller per "
                "gradient than at the user level)"
                if mechanism.level == "user"
                else ""
            )
            raise bad_value(
                "defense.sigma",
                mechanism.sigma,
                f"the theorem needs (sigma/2)^2 >= 2 alpha (alpha - 1) = {2 * self.alpha * (self.alpha - 1):g}",
                f"use defense.sigma={math.ceil(2 * math.sqrt(2 * self.alpha * (self.alpha - 1)) * 100) / 100:g}"
                f"{level} or a smaller accountant.alpha",
            )

    def account(self, setup: Setup) -> Findings:
        network, n = setup.network, setup.network.n
        F = random_walk_loss(
            network.W.toarray(), setup.protocol.rounds, setup.defense.mechanism().sigma / 2.0, self.alpha
        )
        distance = shortest_path(network.adjacency, unweighted=True, directed=False)
        convert = conversion(self.alpha, self.delta)
        mean_loss = F.sum(axis=0) / n
        if n <= MAX_PAIR_ROWS:
            u, v = np.nonzero(~np.eye(n, dtype=bool))
            table = pd.DataFrame(
                {
                    "source": u,
                    "observer": v,
                    "epsilon_rdp": F[u, v],
                    "method": "asymptotic",
                    "distance": distance[u, v].astype(int),
                }
            )
        else:
            table = pd.DataFrame(
                {"source": "mean", "observer": np.arange(n), "epsilon_rdp": mean_loss, "method": "asymptotic"}
            )
        at_delta = np.maximum(table.epsilon_rdp + convert, 0.0)
        table = table.assign(epsilon=at_delta, alpha=self.alpha, delta=self.delta, threat="pairwise_network")
        profile = loss_vs_distance(F, distance)
        summary = {
            "epsilon": max(float(F.max() + convert), 0.0),
            "epsilon_method": f"asymptotic pairwise RDP at order {self.alpha:g} (Canonne et al.'s conversion)",
            "epsilon_mironov": float(F.max() + math.log(1.0 / self.delta) / (self.alpha - 1.0)),
            "adjacency": "replace_one",
            "epsilon_rdp_max": float(F.max()),
            "epsilon_mean_max": float(mean_loss.max()),
            "accounting": "asymptotic",
            "alpha": self.alpha,
            "delta": self.delta,
            "privacy_accountant": self.name,
        }
        title = f"Private random walk: n={n}, T={setup.protocol.rounds}"
        figure = partial(distance_figure, F, distance, profile, float(F.max()), title, "largest pair loss")
        return Findings(
            tables={"privacy": table, "privacy_distance": profile},
            summary=summary,
            figures={"plots/privacy_vs_distance.png": figure},
        )
