"""Pairwise Network DP of Muffliato gossip and Muffliato-SGD (Cyffers, Even, Bellet, Massoulie 2022).

The reported loss f(u, v) is the Renyi divergence of v's WHOLE view (every message v sends and receives,
every gossip step of every round) between datasets differing at u, computed exactly for the linear
Gaussian view (:mod:`decpriv.privacy.linear_view`): for Muffliato-SGD, u's noisy contribution of round r
reaches v through every later gossip step, so the rounds do not simply compose per round. When the exact
computation exceeds ``max_flops`` (about n^4 T^2 operations for T > 1 rounds), each pair gets the sound
reach bound instead: the local-DP level times the number of rounds whose contribution can reach v
(column ``method`` = ``bound``).

For comparison the table keeps the published per-round formula (Theorem 1, times T rounds):

    f_thm(u, v) = T (alpha Delta^2 / (2 sigma^2 C^2)) sum_{k<K} sum_{w : {v,w} in E} M_k[w, u]^2 / ||M_k[w, :]||^2,

capped at the local-DP level per round as in the authors' code. It sums per-message divergences of
correlated messages, so it is neither an upper nor a lower bound of the whole view's divergence (3-node
path, K = 2: the far end recovers the other end's noisy value, loss = the level, where f_thm gives 1/3
of it); it is not used for ``epsilon``.
The summary's mean loss is eps_bar_v = (1/n) sum_{u != v} f(u, v) (divisor n).
The (epsilon, delta) of the largest loss uses Canonne, Kamath, Steinke's conversion at the accountant's order
(:func:`decpriv.privacy.sampled_gaussian.conversion`); Mironov's stands beside it (``epsilon_mironov``).
"""

import math
from functools import partial
from typing import Annotated, Literal

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy.sparse.csgraph import shortest_path  # noqa: E402

from decpriv.built import Setup  # noqa: E402
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value  # noqa: E402
from decpriv.graphs.gossip_matrix import spectral_gap  # noqa: E402
from decpriv.graphs.rational import rational_form  # noqa: E402
from decpriv.privacy.base import Accountant  # noqa: E402
from decpriv.privacy.linear_view import ViewLoss, exact_cost, reach_bound, whole_view_loss  # noqa: E402
from decpriv.privacy.rdp import Delta, RenyiOrder  # noqa: E402
from decpriv.privacy.sampled_gaussian import conversion  # noqa: E402
from decpriv.report.findings import Findings  # noqa: E402

MAX_PAIR_ROWS = 300  # above this many nodes privacy.csv holds per-observer means instead of n^2 pairs


def gossip_operators(W: sp.sparray, steps: int, accelerated: bool = False):
    """Yield M_0 = I, M_1, ..., M_{steps-1}: the maps x^0 -> x^k of (Chebyshev-accelerated) gossip, with
    the recursion of :class:`decpriv.protocols.gossip.GossipAveraging` (Montijano et al.)."""
    W = sp.csr_array(W, dtype=np.float64)
    lam = 1.0 - spectral_gap(W) if accelerated else 0.0
    prev = current = np.eye(W.shape[0])
    omega = 1.0
    for t in range(steps):
        yield current
        nxt = W @ current
        if accelerated and t > 0:
            omega = 1.0 / (1.0 - (lam**2) * omega / 4.0) if t > 1 else 2.0 / (2.0 - lam**2)
            nxt = omega * nxt + (1.0 - omega) * prev
        prev, current = current, nxt


def pairwise_loss(
    W: sp.sparray, adjacency: sp.sparray, steps: int, level: float, accelerated: bool = False
) -> np.ndarray:
    """(n, n) matrix F[u, v] = f(u, v) of one noise draw followed by ``steps`` gossip steps, capped at
    ``level`` = alpha Delta^2 / (2 sigma^2 C^2); the diagonal (a node and itself) is zero."""
    A = sp.csr_array(adjacency, dtype=np.float64)
    total = np.zeros(A.shape)
    for M in gossip_operators(W, steps, accelerated):
        squared = M**2
        R = squared / squared.sum(axis=1, keepdims=True)  # R[w, u] = M[w,u]^2 / ||M[w,:]||^2
        total += A @ R  # total[v, u] = sum_{w in N(v)} R[w, u]
    F = np.minimum(level * total.T, level)
    np.fill_diagonal(F, 0.0)
    return F


def loss_vs_distance(F: np.ndarray, distance: np.ndarray) -> pd.DataFrame:
    """Mean / median / max / min privacy loss over the pairs at each shortest-path distance."""
    off = ~np.eye(len(F), dtype=bool)
    frame = pd.DataFrame({"distance": distance[off].astype(int), "loss": F[off]})
    grouped = frame.groupby("distance")["loss"]
    return grouped.agg(["mean", "median", "min", "max", "count"]).reset_index()


def distance_figure(
    F: np.ndarray,
    distance: np.ndarray,
    profile: pd.DataFrame,
    level: float,
    title: str,
    level_label: str = "local-DP level (neighbours)",
    comparison: pd.DataFrame | None = None,
    comparison_label: str = "",
) -> Figure:
    """Privacy loss f(u, v) against hop distance (Muffliato Fig. 2 style): pairs, their mean, the LDP level,
    and optionally the mean of another accounting of the same pairs."""
    off = ~np.eye(len(F), dtype=bool)
    d, f = distance[off], F[off]
    rng = np.random.default_rng(0)
    keep = rng.choice(len(f), size=min(len(f), 20000), replace=False)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    jitter = rng.uniform(-0.15, 0.15, size=len(keep))
    ax.scatter(d[keep] + jitter, np.maximum(f[keep], 1e-12), s=3, alpha=0.25, label="pairs (u, v)")
    ax.plot(profile.distance, profile["mean"], "o-", color="C3", label="mean over pairs")
    if comparison is not None:
        positive = comparison["mean"].where(comparison["mean"] > 0)  # a zero mean has no place on a log axis
        ax.plot(comparison.distance, positive, "s--", color="C2", label=comparison_label)
    ax.axhline(level, color="grey", ls=":", label=level_label)
    ax.set_yscale("log")
    ax.set_ylim(max(1e-8, float(profile["min"].clip(lower=1e-12).min()) / 2), level * 2)
    ax.set_xlabel("shortest-path distance between u and v")
    ax.set_ylabel("privacy loss f(u, v) (Renyi)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@checked("accountant")
class NetworkDPAccountant(Accountant):
    """Pairwise Network DP of Muffliato gossip (``defense=muffliato protocol=gossip``) or of Muffliato-SGD
    (``defense=ldp protocol=dsgd``, K = gossip_steps per round, T rounds), at Renyi order ``alpha``:
    ``method=exact`` the whole view's exact loss, ``bound`` the reach bound, ``auto`` exact when it costs at
    most ``max_flops`` floating-point operations."""

    name = "network_dp"

    def __init__(
        self,
        alpha: RenyiOrder = 10.0,
        delta: Delta = 1e-5,
        method: Literal["auto", "exact", "bound"] = "auto",
        max_flops: Annotated[float, Range(ge=0, what="a cost budget", eg="2e11")] = 2e11,
    ):
        self.alpha, self.delta, self.method, self.max_flops = alpha, delta, method, max_flops

    def check(self, setup: Setup) -> None:
        defense, protocol = setup.defense, setup.protocol
        mechanism = defense.mechanism()
        if mechanism is not None and mechanism.on == "values" and protocol.noised == "values":
            return
        if mechanism is not None and mechanism.local_gaussian and protocol.noised == "gradients":
            if protocol.local_steps != 1:
                raise bad_value(
                    "protocol.local_steps",
                    protocol.local_steps,
                    "Muffliato-SGD adds one noise draw per message",
                    "use protocol.local_steps=1",
                )
            if mechanism.target is not None:
                raise bad_value(
                    "defense.epsilon",
                    mechanism.target,
                    "network DP gives each pair its own loss, so there is no single target to calibrate",
                    "set defense.sigma",
                )
            return
        raise bad_value(
            "accountant",
            self.name,
            "pairwise network DP covers noise added once to gossiped values (defense=muffliato with "
            "protocol=gossip) and user-level gradient noise on D-SGD (defense=ldp with protocol=dsgd), not "
            f"defense={defense.name} with protocol={protocol.name}{mechanism.at_level if mechanism else ''}",
            "change the defense/protocol pair or the accountant",
        )

    def whole_view(self, network, steps: int, draws: int, distance: np.ndarray) -> tuple[ViewLoss, float]:
        """The losses in units of the per-round level by ``method``, and the exact computation's cost."""
        width = 1 + int(network.adjacency.sum(1).max())
        form = rational_form(network.W)
        bits = form.d.bit_length() if form.rows is not None else 0
        cost = exact_cost(network.n, steps, draws, width, bits)
        if self.method == "exact" or (self.method == "auto" and cost <= self.max_flops):
            return whole_view_loss(network.W, network.adjacency, steps, draws, form=form), cost
        exact = np.eye(network.n, dtype=bool)
        reach = reach_bound(distance, steps, draws)
        return ViewLoss(reach, exact, np.full_like(reach, np.nan), float("nan"), "none"), cost

    def account(self, setup: Setup) -> Findings:
        network, sigma = setup.network, setup.defense.mechanism().sigma
        steps, draws, accelerated = setup.protocol.gossip_schedule()
        level = self.alpha * 2.0 / sigma**2  # alpha Delta^2 / (2 sigma^2 C^2) with Delta = 2C
        distance = shortest_path(network.adjacency, unweighted=True, directed=False)
        view, cost = self.whole_view(network, steps, draws, distance)
        F, lower, exact = level * view.loss, level * view.lower, view.exact
        theorem = draws * pairwise_loss(network.W, network.adjacency, steps, level, accelerated)
        profile = loss_vs_distance(F, distance)
        convert = conversion(self.alpha, self.delta)
        n = network.n
        mean_loss = F.sum(axis=0) / n  # eps_bar_v over sources u (divisor n)
        off = ~np.eye(n, dtype=bool)
        if n <= MAX_PAIR_ROWS:
            u, v = np.nonzero(off)
            table = pd.DataFrame(
                {
                    "source": u,
                    "observer": v,
                    "epsilon_rdp": F[u, v],
                    "method": np.where(exact[u, v], "exact", "bound"),
                    "epsilon_rdp_lower": lower[u, v],
                    "epsilon_rdp_theorem1": theorem[u, v],
                    "distance": distance[u, v].astype(int),
                }
            )
        else:
            table = pd.DataFrame(
                {
                    "source": "mean",
                    "observer": np.arange(n),
                    "epsilon_rdp": mean_loss,
                    "method": np.where(exact.all(axis=0), "exact", "bound"),
                    "epsilon_rdp_lower": lower.sum(axis=0) / n,
                    "epsilon_rdp_theorem1": theorem.sum(axis=0) / n,
                }
            )
        at_delta = np.maximum(table.epsilon_rdp + convert, 0.0)
        table = table.assign(epsilon=at_delta, alpha=self.alpha, delta=self.delta, threat="pairwise_network")
        exact_fraction = float(exact[off].mean()) if n > 1 else 1.0
        summary = {
            "epsilon": max(float(F.max() + convert), 0.0),
            "epsilon_method": f"pairwise network RDP at order {self.alpha:g} (Canonne et al.'s conversion)",
            "epsilon_mironov": float(F.max() + math.log(1.0 / self.delta) / (self.alpha - 1.0)),
            "adjacency": "replace_one",
            "epsilon_rdp_max": float(F.max()),
            "epsilon_mean_max": float(mean_loss.max()),
            "epsilon_mean_avg": float(mean_loss.mean()),
            "accounting": "exact" if exact_fraction == 1.0 else "bound" if exact_fraction == 0.0 else "mixed",
            "exact_fraction": exact_fraction,
            "epsilon_mean_max_lower": float((lower.sum(axis=0) / n).max()),
            "rank_margin": view.margin,
            "row_space": view.row_space,
            "accounting_flops": cost,
            "epsilon_mean_max_theorem1": float((theorem.sum(axis=0) / n).max()),
            "ldp_level": draws * level,
            "alpha": self.alpha,
            "delta": self.delta,
            "gossip_steps": steps,
            "privacy_accountant": self.name,
        }
        title = f"Muffliato: n={n}, K={steps}" + (f", T={draws}" if draws > 1 else "")
        figure = partial(
            distance_figure,
            F,
            distance,
            profile,
            draws * level,
            f"{title} (whole view, {summary['accounting']})",
            comparison=loss_vs_distance(theorem, distance),
            comparison_label="mean of the per-round formula (Thm 1 x T; absent where 0)",
        )
        return Findings(
            tables={"privacy": table, "privacy_distance": profile},
            summary=summary,
            figures={"plots/privacy_vs_distance.png": figure},
        )
