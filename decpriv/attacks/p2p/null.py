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


def member_places(labels: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """(K * B, P): where each labelling's members stand in its row's ascending order (0-based), sorted,
    P the most members of any labelling, the rest padded with 2N + 2 (after every place)."""
    k_count, b_count, n = labels.shape
    k, b, i = labels.nonzero(as_tuple=True)  # row-major: each labelling's members are consecutive
    row = k * b_count + b
    counts = labels.sum(-1).flatten()
    first = counts.cumsum(0) - counts
    places = torch.full((k_count * b_count, max(1, int(counts.max()))), 2 * n + 2)
    places[row, torch.arange(len(row)) - first[row]] = torch.argsort(order, 1)[k, i]
    return places.sort(1).values


def statistics(scores: torch.Tensor, valid: torch.Tensor, labels: torch.Tensor, thresholds: int) -> dict:
    """Each statistic, (K, B), for scores (K, N) and B labellings ``labels`` (K, B, N) (True = member).

    advantage: max over ``thresholds`` evenly spaced rho in [min, max] of (TPR + TNR)/2 - 0.5, members
    predicted when score < rho; auc: P(member scores lower) + P(tie)/2; tpr_at_*: the largest TPR whose
    FPR is at most 1% / 0.1%, thresholds between distinct scores (the unthinned ROC curve).

    Members are few (tens of a row's thousands): each labelling is read once, for where its members stand
    in the row's order, and every count of members below a threshold is a search among those places.
    """
    scores = scores.double()
    usable = valid & torch.isfinite(scores)
    # a NaN or infinite score says nothing about membership: all of them tie, ranked after every finite
    # score (least member-like; a model scoring only so is at chance), the padding (NaN) after them
    scores = torch.where(valid, torch.where(usable, scores, torch.inf), torch.nan)
    order = scores.argsort(dim=1, stable=True)
    ordered = scores.gather(1, order)
    labels = labels & valid[:, None, :]
    k_count, b_count, n = labels.shape
    places = member_places(labels, order)  # (K * B, P)
    pos = (places < n).sum(1).reshape(k_count, b_count).double()  # equal across B for permutations
    neg = valid.sum(1, keepdim=True).double() - pos

    def members_below(at: torch.Tensor, right: bool = False) -> torch.Tensor:
        """(K, B, M): members among the ``at`` (K, B, M) lowest of each labelling's row (``right``: ``at + 1``)."""
        found = torch.searchsorted(places, at.reshape(k_count * b_count, -1).contiguous(), right=right)
        return found.reshape(at.shape).double()

    some = usable.any(1)  # the thresholds span the finite scores (none: one threshold no score is below)
    finite = torch.where(some, torch.where(usable, scores, -torch.inf).amax(1), 0.0)
    low = torch.where(some, torch.where(usable, scores, torch.inf).amin(1), 0.0)
    rho = low[:, None] + (finite - low)[:, None] * torch.linspace(0, 1, thresholds, dtype=scores.dtype)
    sorted_ = torch.where(ordered.isnan(), torch.inf, ordered)  # searchsorted reads no NaN
    below = torch.searchsorted(sorted_, rho.contiguous())  # (K, T) scores strictly below rho
    tp_rho = members_below(below[:, None, :].expand(-1, b_count, -1))
    tnr = (neg[..., None] - (below[:, None, :] - tp_rho)) / neg[..., None]
    out = {"advantage": ((tp_rho / pos[..., None] + tnr) / 2).amax(-1) - 0.5}

    # mid-ranks are halves of integers: their sums are exact in any order, so the members' are subtracted
    ranks = mid_ranks(ordered, order)
    ranked = ranks.gather(1, order)  # in the row's order
    row = torch.arange(k_count).repeat_interleave(b_count)[:, None]
    member_rank_sum = torch.where(places < n, ranked[row, places.clamp_max(n - 1)], 0.0).sum(1)
    neg_rank_sum = torch.where(valid, ranks, 0.0).sum(1, keepdim=True) - member_rank_sum.reshape(
        k_count, b_count
    )
    out["auc"] = (neg_rank_sum - neg * (neg + 1) / 2) / (pos * neg)

    ends = valid.gather(1, order) & torch.cat(
        [ordered[:, 1:] != ordered[:, :-1], torch.ones(len(scores), 1, dtype=torch.bool)], 1
    )  # last position of each group of tied scores
    last_end = torch.where(ends, torch.arange(n), -1).cummax(1).values  # (K, N): the last end up to each
    rank_of_member = torch.arange(places.shape[1])
    for name, rate in FPRS.items():
        allowed = most_false_positives(neg, rate)  # (K, B)
        # false positives rise along the order: the allowed thresholds are a prefix, of this length
        before = ((places - rank_of_member <= allowed.reshape(-1, 1)).sum(1)).reshape(k_count, b_count)
        prefix = torch.where(allowed >= 0, (allowed + before).clamp_max(n), 0)
        end = torch.where(prefix > 0, last_end.gather(1, (prefix - 1).clamp_min(0)), -1)
        taken = torch.where(end >= 0, members_below(end[..., None], right=True)[..., 0], 0.0)
        out[name] = taken / pos
    return out


def most_false_positives(neg: torch.Tensor, rate: float) -> torch.Tensor:
    """(K, B): the most false positives f whose rate f / neg, as float64 divides it, is at most ``rate``;
    -1 where none is (no negative)."""
    guess = torch.floor(neg * rate).long()
    best = torch.full_like(guess, -1)
    for step in (-2, -1, 0, 1, 2):  # the product's rounding moves the floor by one at most
        f = (guess + step).clamp_min(0)
        best = torch.where(f / neg <= rate, torch.maximum(best, f), best)
    return best


def shuffled_labels(labels: torch.Tensor, valid: torch.Tensor, count: int, generator: torch.Generator):
    """(K, count, N): ``count`` uniform random relabellings of each row, each keeping the row's number of
    members among its valid entries (ranks of i.i.d. uniform keys, padding ranked last)."""
    keys = rng.uniform((*valid.shape[:1], count, valid.shape[1]), generator, valid.device, torch.float64)
    keys = torch.where(valid[:, None, :], keys, 2.0)
    order = keys.argsort(-1)
    first = (torch.arange(valid.shape[1]) < (labels & valid).sum(1)[:, None, None]).expand_as(order)
    return torch.empty_like(first).scatter_(-1, order, first)  # the lowest keys' places are members


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
