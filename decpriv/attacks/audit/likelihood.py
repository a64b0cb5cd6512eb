"""The most powerful test of a linear Gaussian view, learnt on held-out trials (Neyman-Pearson).

Under the two neighbouring datasets the view y (an observer's messages) is Gaussian with the same covariance
Sigma and means differing by s g (g: the view's response to a unit contribution of the source, s = +-C), so
the log-likelihood ratio is monotone in t = g^T Sigma^+ (y - mean of the other nodes' contributions). The
covariance is estimated from the fit trials' noise (y minus the noiseless run of the same values), never
from the accountant's algebra. A wrong Sigma only weakens the test: the thresholds and the error counts come
from trials the estimate never saw.

What the trials cannot resolve stays unseen: a direction whose variance is near float64's rounding (1e-13
of the largest) is dropped from Sigma's estimate like rounding noise, so an accountant that mistakes such a
direction (the float-rank class of error) is not caught here; the rational-arithmetic tests guard it.
"""

from typing import NamedTuple

import numpy as np
import torch
from scipy.stats import norm

from decpriv.attacks.audit.bounds import clopper_pearson_upper, dp_lower, gdp_lower
from decpriv.report.progress import updates

QUANTILES = 199  # candidate thresholds per source, at quantiles of its fit statistics...
TAIL = 60  # ... and at log-spaced ranks into either tail, where a large epsilon's threshold lies


class LinearTest(NamedTuple):
    """Per block the test direction W (B, m, k) for k sources, and c = sum_b w_b^T g_b (the statistic's
    shift per unit contribution)."""

    W: torch.Tensor
    c: torch.Tensor


def noise_factor(noise: torch.Tensor, pooled: bool) -> torch.Tensor:
    """L (rows, r) with L L^T the covariance of the fit noise (B, rows, F) of every recorded row, by one thin
    SVD (stable where rows are nearly dependent; directions below numpy's matrix_rank tolerance dropped).
    ``pooled``: the B blocks carry iid noise, one rows x rows covariance from all of them; otherwise B = 1."""
    B, rows, F = noise.shape
    if not pooled and B != 1:
        raise ValueError("blocks that share noise are audited as one block")
    X = noise.permute(1, 0, 2).reshape(rows, B * F)
    U, s, _ = torch.linalg.svd(X, full_matrices=False)
    keep = s > s[0] * max(X.shape) * torch.finfo(X.dtype).eps
    return U[:, keep] * (s[keep] / (B * F) ** 0.5)


def fit_test(factor: torch.Tensor, response: torch.Tensor) -> LinearTest:
    """Directions Sigma^+ g for an observer's rows: ``factor`` its rows of L (m, r), Sigma = L L^T the
    covariance of each block, ``response`` (B, m, k) the unit responses of its k sources in each block."""
    U, s, _ = torch.linalg.svd(factor, full_matrices=False)
    keep = s > s[0] * max(factor.shape) * torch.finfo(factor.dtype).eps
    U, s = U[:, keep], s[keep]
    W = torch.einsum("mr,r,nr,bnk->bmk", U, 1.0 / s**2, U, response)
    return LinearTest(W, torch.einsum("bmk,bmk->k", W, response))


def statistics(test: LinearTest, noise: torch.Tensor, signs: torch.Tensor, clip: float) -> torch.Tensor:
    """(k, D) statistic of each source's test on each trial: w^T (noise + s g) with s = sign * C."""
    return torch.einsum("bmk,bmd->kd", test.W, noise) + clip * test.c[:, None] * signs


def gaussianity(t: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """(k,) the largest Kolmogorov-Smirnov distance, under either dataset, between each source's standardised
    statistic and N(0, 1): small where a Gaussian view is a fair description of what the test sees; NaN
    where the statistic is constant."""
    worst = np.zeros(len(t))
    for side in (negative, ~negative):
        k = len(t)
        x = t[side].reshape(k, -1)
        spread = x.std(1, keepdims=True)
        z = np.sort((x - x.mean(1, keepdims=True)) / np.where(spread > 0, spread, 1.0), axis=1)
        cdf, n = norm.cdf(z), z.shape[1]
        steps = np.arange(1, n + 1) / n
        distance = np.maximum(steps - cdf, cdf - (steps - 1 / n)).max(1)
        # a constant statistic (the source unseen) has no shape to check
        worst = np.maximum(worst, np.where(spread[:, 0] > 0, distance, np.nan))
    return worst


class Counted(NamedTuple):
    """Held-out error counts (2, 4, k): rows GDP and DP thresholds, columns false positives, negatives, false
    negatives, positives; the thresholds (2, k); the fit statistics' Gaussianity (k,)."""

    counts: np.ndarray
    thresholds: np.ndarray
    ks: np.ndarray


class Thresholds(NamedTuple):
    gdp: np.ndarray  # (k,) the threshold that maximises the GDP bound on the fit trials
    dp: np.ndarray  # (k,) ... the (epsilon, delta) bound


def candidate_ranks(F: int) -> np.ndarray:
    """Ranks among F sorted statistics tried as thresholds: evenly spaced quantiles, and ranks whose tail
    share runs geometrically from 10% down to 50 trials (a high-epsilon test rejects rarely)."""
    even = np.linspace(0, F - 1, QUANTILES + 2).round().astype(int)[1:-1]
    share = np.geomspace(0.1, min(0.1, 50.0 / F), TAIL)  # rarer: too few fit trials to place it
    tails = np.concatenate([(F - 1) * share, (F - 1) * (1 - share)]).round().astype(int)
    return np.unique(np.concatenate([even, tails]))


def choose_thresholds(
    t: torch.Tensor, signs: torch.Tensor, alpha: float, delta: float, eval_trials: int | None = None
) -> Thresholds:
    """Per source, among candidate ranks of its fit statistics, the thresholds whose bounds are largest when
    the fit trials' error rates are projected onto ``eval_trials`` (Clopper-Pearson at ``alpha`` on the
    counts the evaluation would see: the deeper tail a larger evaluation can certify; the learnt tests of
    :func:`heldout_counts` use it, while the linear views' many pairs lose more to the winner's curse than
    they gain: docs/privacy.md). Each source has as many trials under either dataset."""
    t, negative = t.numpy(), signs.numpy() < 0
    k, F = t.shape
    t0 = np.sort(t[negative].reshape(k, -1), axis=1)
    t1 = np.sort(t[~negative].reshape(k, -1), axis=1)
    at = candidate_ranks(F)
    tau = np.sort(t, axis=1)[:, at]  # (k, Q)
    n0, n1 = t0.shape[1], t1.shape[1]
    fp = n0 - np.stack([np.searchsorted(a, b, side="right") for a, b in zip(t0, tau, strict=True)])
    fn = np.stack([np.searchsorted(a, b, side="right") for a, b in zip(t1, tau, strict=True)])
    scale = (eval_trials or F) / F
    fpr = clopper_pearson_upper(fp * scale, n0 * scale, alpha)
    fnr = clopper_pearson_upper(fn * scale, n1 * scale, alpha)
    rows = np.arange(k)
    return Thresholds(
        tau[rows, gdp_lower(fpr, fnr).argmax(1)], tau[rows, dp_lower(fpr, fnr, delta).argmax(1)]
    )


def error_counts(t: np.ndarray, negative: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """(4, k): false positives, negatives (trials under D0), false negatives, positives (under D1) of the
    test that guesses D1 when t > tau; ``negative`` marks the trials under D0."""
    above = t > tau[:, None]
    fp = np.count_nonzero(above & negative, axis=1)
    negatives = np.count_nonzero(negative, axis=1)
    positives = t.shape[1] - negatives
    return np.stack([fp, negatives, positives - (np.count_nonzero(above, axis=1) - fp), positives])


def heldout_counts(
    draw, fit: int, total: int, chunk: int, alpha: float, delta: float, pairs: int, learn=None
):
    """Thresholds chosen on ``fit`` held-out trials, then the error counts over ``total`` more.

    ``draw(name, size, start)`` runs a chunk (``name`` "fit" or "eval.<chunk>", ``start`` its first trial's
    index among the part's trials) and returns its views, on the device it drew them, and (pairs, size)
    signs; the views are the statistics themselves unless ``learn(views, signs)`` fits, on the fit trials
    only, the statistic to use. Statistics come back to the CPU to be counted."""
    views, signs = draw("fit", fit, 0)
    statistic = learn(views, signs) if learn is not None else (lambda v: v)
    t = statistic(views).cpu()
    tau = choose_thresholds(t, signs, alpha, delta, total)
    ks = gaussianity(t.numpy(), signs.numpy() < 0)
    counts = np.zeros((2, 4, pairs), dtype=np.int64)
    for index, start in enumerate(range(0, total, chunk)):
        updates.debug(
            "trials %d-%d of %d (after %d to fit the test)", start, min(total, start + chunk), total, fit
        )
        views, signs = draw(f"eval.{index}", min(chunk, total - start), start)
        t, negative = statistic(views).cpu().numpy(), signs.numpy() < 0
        counts[0] += error_counts(t, negative, tau.gdp)
        counts[1] += error_counts(t, negative, tau.dp)
    return Counted(counts, np.stack([tau.gdp, tau.dp]), ks)
