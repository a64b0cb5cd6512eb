"""Lower bounds on a mechanism's privacy from a test's error counts (Clopper-Pearson limits).

A test that rejects H0 (dataset D0) when its statistic exceeds a threshold has false-positive rate FPR under
D0 and false-negative rate FNR under D1. With FPR_hi, FNR_hi one-sided Clopper-Pearson upper limits:

- Gaussian DP (Dong, Roth, Su, JRSS-B 2022, Def. 2.6): a mu-GDP mechanism has FNR >= Phi(Phi^-1(1 - FPR) - mu)
  for every test, so mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) (Nasr et al., USENIX Security 2023, Sec. 4).
- (epsilon, delta)-DP (Kairouz, Oh, Viswanath, ICML 2015, Thm 2.1; Jagielski et al., NeurIPS 2020, Sec. 3):
  FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta, so
  eps >= max(log((1 - delta - FNR_hi) / FPR_hi), log((1 - delta - FPR_hi) / FNR_hi)).

- Renyi divergence of order alpha, with no assumption on the view: the test's decision is a post-processing
  of the view, so D_alpha(view under D1 || under D0) >= D_alpha(Bern(1 - FNR) || Bern(FPR)) (data
  processing, van Erven and Harremoes, IEEE Trans. Inf. Theory 2014, Thm. 9), smallest at the upper limits.

The thresholds are chosen on held-out trials (no selection bias); ``alpha`` is the error probability each
limit is allowed (Bonferroni over every limit the audit states).
"""

import numpy as np
from scipy.stats import beta, norm


def clopper_pearson_upper(errors: np.ndarray, trials: np.ndarray, alpha: float) -> np.ndarray:
    """One-sided upper limit of a binomial rate at confidence 1 - alpha (1 where every trial erred)."""
    errors, trials = np.asarray(errors, dtype=float), np.asarray(trials, dtype=float)
    full = errors >= trials
    upper = beta.ppf(1.0 - alpha, errors + 1.0, np.maximum(trials - errors, 1.0))
    return np.where(full, 1.0, upper)


def gdp_lower(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
    """Smallest mu consistent with error rates at most (FPR_hi, FNR_hi), floored at 0."""
    return np.maximum(0.0, norm.isf(fpr_hi) - norm.ppf(fnr_hi))


def dp_lower(fpr_hi: np.ndarray, fnr_hi: np.ndarray, delta: float) -> np.ndarray:
    """Smallest epsilon at ``delta`` consistent with error rates at most (FPR_hi, FNR_hi), floored at 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log(np.maximum(1.0 - delta - fnr_hi, 0.0) / fpr_hi)
        two = np.log(np.maximum(1.0 - delta - fpr_hi, 0.0) / fnr_hi)
    return np.maximum(0.0, np.nan_to_num(np.maximum(one, two), nan=0.0, neginf=0.0))


def rates_upper(false_pos, negatives, false_neg, positives, alpha: float):
    """Clopper-Pearson upper limits of (FPR, FNR), each at error probability ``alpha``."""
    return clopper_pearson_upper(false_pos, negatives, alpha), clopper_pearson_upper(
        false_neg, positives, alpha
    )


def bernoulli_renyi(order: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """D_order(Bern(a) || Bern(b)), in nats."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inside = a**order * b ** (1 - order) + (1 - a) ** order * (1 - b) ** (1 - order)
        return np.nan_to_num(np.log(inside) / (order - 1), nan=0.0)


def renyi_lower(order: float, fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
    """Smallest Renyi divergence (either direction) consistent with error rates at most (FPR_hi, FNR_hi)."""
    useful = 1.0 - fnr_hi > fpr_hi
    both = np.maximum(bernoulli_renyi(order, 1 - fnr_hi, fpr_hi), bernoulli_renyi(order, fpr_hi, 1 - fnr_hi))
    return np.where(useful, np.maximum(both, 0.0), 0.0)
