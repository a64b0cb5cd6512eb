"""Membership statistics and their shuffled-membership null, all permutations in one batch.

A membership attack's score separates members from non-members only if it beats what the same statistic
reaches when membership is random: with a few dozen members the best of 150 thresholds gains ~0.05
accuracy on pure noise. So every statistic (Pasquini et al. 2023, Sec. 4.1: the best-threshold balanced
accuracy - 0.5; ROC AUC; TPR at low FPR, Carlini et al. 2022) is computed for the true labels and for
``B`` random relabellings of the same pooled scores (a permutation test). Scores are sorted once per
tested model; each relabelling is then a cumulative sum along that order and a dot product with the
mid-ranks (AUC = Mann-Whitney U / (n_pos n_neg)), so no loop runs over permutations.

Conventions: a LOWER score means "member"; ``valid`` masks the padding of rows of unequal length.
"""

import numpy as np
import torch

from decpriv.random import streams as rng

FPRS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0.1pct_fpr": 0.001}
STATISTICS = ("advantage", "auc", *FPRS)


def mid_ranks(ordered: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """1-based ranks of each row, ties sharing their mean rank (scipy's ``rankdata(method="average")``),
    from the row's ascending ``ordered`` values and the ``order`` that sorts it."""
    start = torch.ones_like(ordered, dtype=torch.bool)
    start[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    group = start.cumsum(1) - 1
    position = torch.arange(1, ordered.shape[1] + 1, dtype=torch.float64).expand_as(ordered)
    total = torch.zeros_like(position).scatter_add_(1, group, position)
    count = torch.zeros_like(position).scatter_add_(1, group, torch.ones_like(position))
    return torch.empty_like(position).scatter_(1, order, (total / count.clamp_min(1)).gather(1, group))


def statistics(scores: torch.Tensor, valid: torch.Tensor, labels: torch.Tensor, thresholds: int) -> dict:
    """Each statistic, (K, B), for scores (K, N) and B labellings ``labels`` (K, B, N) (True = member).

    advantage: max over ``thresholds`` evenly spaced rho in [min, max] of (TPR + TNR)/2 - 0.5, members
    predicted when score < rho; auc: P(member scores lower) + P(tie)/2; tpr_at_*: the largest TPR whose
    FPR is at most 1% / 0.1%, thresholds between distinct scores (the unthinned ROC curve).
    """
    scores = scores.double()
    usable = valid & torch.isfinite(scores)
    # a NaN or infinite score says nothing about membership: all of them tie, ranked after every finite
    # score (least member-like; a model scoring only so is at chance), the padding (NaN) after them
    scores = torch.where(valid, torch.where(usable, scores, torch.inf), torch.nan)
    order = scores.argsort(dim=1, stable=True)
    ordered = scores.gather(1, order)
    labels = labels & valid[:, None, :]
    pos = labels.sum(-1).double()  # (K, B): equal across B for permutations, kept general
    neg = valid.sum(1, keepdim=True).double() - pos
    hits = labels.gather(2, order[:, None, :].expand_as(labels))
    tp = torch.nn.functional.pad(
        hits.cumsum(-1), (1, 0)
    ).double()  # (K, B, N + 1): members among the i lowest

    some = usable.any(1)  # the thresholds span the finite scores (none: one threshold no score is below)
    finite = torch.where(some, torch.where(usable, scores, -torch.inf).amax(1), 0.0)
    low = torch.where(some, torch.where(usable, scores, torch.inf).amin(1), 0.0)
    rho = low[:, None] + (finite - low)[:, None] * torch.linspace(0, 1, thresholds, dtype=scores.dtype)
    sorted_ = torch.where(ordered.isnan(), torch.inf, ordered)  # searchsorted reads no NaN
    below = torch.searchsorted(sorted_, rho.contiguous())  # (K, T) scores strictly below rho
    tp_rho = tp.gather(2, below[:, None, :].expand(-1, tp.shape[1], -1))
    tnr = (neg[..., None] - (below[:, None, :] - tp_rho)) / neg[..., None]
    out = {"advantage": ((tp_rho / pos[..., None] + tnr) / 2).amax(-1) - 0.5}

    ranks = mid_ranks(ordered, order)
    neg_rank_sum = torch.einsum("kbn,kn->kb", (~labels & valid[:, None, :]).double(), ranks)
    out["auc"] = (neg_rank_sum - neg * (neg + 1) / 2) / (pos * neg)

    n = scores.shape[1]
    ends = valid.gather(1, order) & torch.cat(
        [ordered[:, 1:] != ordered[:, :-1], torch.ones(len(scores), 1, dtype=torch.bool)], 1
    )  # last position of each group of tied scores
    taken = tp[..., 1:]
    fp = torch.arange(1, n + 1, dtype=torch.float64) - taken
    for name, rate in FPRS.items():
        ok = ends[:, None, :] & (fp / neg[..., None] <= rate)
        out[name] = torch.where(ok, taken, 0.0).amax(-1) / pos
    return out


def shuffled_labels(labels: torch.Tensor, valid: torch.Tensor, count: int, generator: torch.Generator):
    """(K, count, N): ``count`` uniform random relabellings of each row, each keeping the row's number of
    members among its valid entries (ranks of i.i.d. uniform keys, padding ranked last)."""
    keys = rng.uniform((*valid.shape[:1], count, valid.shape[1]), generator, valid.device, torch.float64)
    keys = torch.where(valid[:, None, :], keys, 2.0)
    rank = keys.argsort(-1).argsort(-1)
    return rank < (labels & valid).sum(1)[:, None, None]


def null_summary(observed: np.ndarray, null: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, 95% interval and one-sided permutation p-value (1 + #{null >= observed}) / (B + 1) of
    ``observed`` (...,) against its null draws (..., B)."""
    observed = np.asarray(observed, dtype=float)
    return {
        "null_mean": null.mean(-1),
        "null_lo": np.quantile(null, 0.025, axis=-1),
        "null_hi": np.quantile(null, 0.975, axis=-1),
        "p_value": (1 + (null >= observed[..., None] - 1e-12).sum(-1)) / (null.shape[-1] + 1),
    }
