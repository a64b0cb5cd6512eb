"""decpriv's own Renyi-DP of the Gaussian mechanism on a sampled batch, at integer orders, and its conversion
to (epsilon, delta). Google's dp-accounting computes the same quantities (:mod:`decpriv.privacy.library`);
the tests hold the two to 1e-6.

- ``poisson`` (add/remove adjacency): each example joins the batch independently with rate q; Mironov,
  Talwar, Zhang (arXiv:1908.10530, 2019), Sec. 3.3, integer alpha:
  A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 sigma^2)),  RDP = log A_alpha / (alpha - 1).
  Every term is positive: a log-sum-exp in float64 is exact to rounding.
- ``without_replacement`` (replace-one adjacency): a uniform batch of fixed size, q = b / m; Wang, Balle,
  Kasiviswanathan (AISTATS 2019), Thm. 9 with the Gaussian's forward differences (their Thm. 27):
  A_alpha = 1 + q^2 C(alpha, 2) min(4 (e^{eps(2)} - 1), 2 e^{eps(2)})
            + sum_{j >= 3} q^j C(alpha, j) min(4 sqrt(|D^{2 floor(j/2)}| |D^{2 ceil(j/2)}|), 2 e^{(j - 1) eps(j)}),
  eps(j) = j / (2 sigma^2) the Gaussian's RDP and D^k the k-th forward difference at 0 of
  s(x) = exp((x - 1) x / (2 sigma^2)). The alternating sums of D^k cancel massively when sigma is large, so
  they are summed in mpmath at a precision that covers the cancellation.
- ``gaussian``: the full-batch (or user-level) mechanism, RDP alpha / (2 sigma^2).

``sigma`` is the noise multiplier relative to the adjacency's sensitivity (sigma C / C for add/remove,
sigma C / 2C for replace-one). The conversion is Canonne, Kamath, Steinke (NeurIPS 2020), Prop. 12:
epsilon = RDP(alpha) + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1), minimised over the orders.
"""

import math
from functools import lru_cache

import mpmath
import numpy as np
from scipy.special import gammaln, logsumexp

# Integer orders only: both closed forms above hold at integers (fractional orders would need a series).
ORDERS = (*range(2, 65), 80, 96, 128, 160, 192, 256)


def log_binomial(n: int, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def poisson_rdp(q: float, sigma: float, alpha: int) -> float:
    """RDP at integer ``alpha`` of the Poisson-subsampled Gaussian (Mironov et al. 2019, Sec. 3.3)."""
    if q >= 1.0:
        return alpha / (2 * sigma**2)
    k = np.arange(alpha + 1)
    terms = (
        log_binomial(alpha, k) + k * math.log(q) + (alpha - k) * math.log1p(-q) + (k * k - k) / (2 * sigma**2)
    )
    return float(logsumexp(terms)) / (alpha - 1)


@lru_cache(maxsize=64)
def forward_differences(sigma: float) -> tuple[float, ...]:
    """log |D^k s(0)| for k = 0..max order, s(x) = exp((x - 1) x / (2 sigma^2)), in mpmath.

    The alternating sum of D^k cancels down to about c^(k/2) k! / (k/2)! (c = 1 / (2 sigma^2), the terms'
    polynomial part) from terms up to 2^k s(k): the working precision keeps those digits spare."""
    top = 2 * math.ceil(max(ORDERS) / 2)
    c = 1.0 / (2 * sigma**2)
    digits = top * math.log10(2) + top / 2 * max(0.0, -math.log10(c)) + 40
    with mpmath.workdps(int(digits)):
        row = [mpmath.exp(mpmath.mpf(c) * (x - 1) * x) for x in range(top + 1)]
        logs = []
        for _ in range(top + 1):  # the difference table: row k holds D^k s at 0, 1, ...
            logs.append(float(mpmath.log(abs(row[0]))) if row[0] != 0 else -math.inf)
            row = [b - a for a, b in zip(row, row[1:], strict=False)]
    return tuple(logs)


def without_replacement_rdp(q: float, sigma: float, alpha: int) -> float:
    """RDP at integer ``alpha`` of the Gaussian on a fixed-size batch drawn without replacement
    (Wang, Balle, Kasiviswanathan 2019, Thm. 9 and 27), replace-one adjacency."""
    if q >= 1.0:
        return alpha / (2 * sigma**2)
    eps2 = 1.0 / sigma**2
    log_d = forward_differences(float(sigma))
    terms = [0.0, 2 * math.log(q) + float(log_binomial(alpha, 2))]
    terms[1] += min(math.log(4) + eps2 + math.log(-math.expm1(-eps2)), eps2 + math.log(2))
    for j in range(3, alpha + 1):
        paired = math.log(4) + 0.5 * (log_d[2 * (j // 2)] + log_d[2 * math.ceil(j / 2)])
        single = math.log(2) + (j - 1) * j / (2 * sigma**2)
        terms.append(j * math.log(q) + float(log_binomial(alpha, j)) + min(paired, single))
    return float(logsumexp(terms)) / (alpha - 1)


def rdp_curve(sampler: str, q: float, sigma: float, orders=ORDERS) -> np.ndarray:
    """One step's RDP at each order; ``sampler`` is poisson, without_replacement or gaussian."""
    if sigma == 0:
        return np.full(len(orders), math.inf)
    if sampler == "gaussian" or q >= 1.0:
        return np.array([a / (2 * sigma**2) for a in orders])
    one = {"poisson": poisson_rdp, "without_replacement": without_replacement_rdp}[sampler]
    curve = np.array([one(q, sigma, a) for a in orders])
    if sampler == "without_replacement":
        # Wang et al.'s bound exceeds the unsampled Gaussian's as q nears 1, and a batch drawn without
        # looking at the data can only help (Renyi divergence is jointly quasi-convex): each order takes both
        curve = np.minimum(curve, [a / (2 * sigma**2) for a in orders])
    return curve


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon at ``delta`` of a Gaussian shift of ``mu`` noise standard deviations (mu-GDP),
    the root of delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (Balle, Wang, ICML 2018,
    Thm. 8; Dong, Roth, Su 2022, Cor. 2.13): what an (epsilon, delta) accountant owes a Gaussian view."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps: float) -> float:
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    if mu <= 0 or excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2
    return float(brentq(excess, 0.0, high, xtol=1e-12))


def conversion(alpha: float, delta: float) -> float:
    """What (alpha, r)-RDP adds to r for (epsilon, delta)-DP: Canonne, Kamath, Steinke (NeurIPS 2020),
    Prop. 12, below Mironov's log(1/delta) / (alpha - 1) (CSF 2017, Prop. 3) at every order."""
    return math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1)


def epsilon_of_rdp(rdp: np.ndarray, delta: float, orders=ORDERS) -> tuple[float, float]:
    """(epsilon, best order) at ``delta`` (Canonne, Kamath, Steinke 2020, Prop. 12)."""
    a = np.asarray(orders, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        eps = rdp + np.log1p(-1 / a) - np.log(delta * a) / (a - 1)
    eps = np.where(np.isnan(eps), np.inf, eps)
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), float(a[best])


def sampled_gaussian_epsilon(
    sampler: str, q: float, sigma: float, steps: int, delta: float
) -> tuple[float, float]:
    """(epsilon, best order) of ``steps`` compositions of the sampled Gaussian of multiplier ``sigma``."""
    if sigma == 0:
        return math.inf, math.nan
    return epsilon_of_rdp(steps * rdp_curve(sampler, q, sigma), delta)
