"""Membership scores and their evaluation (Pasquini et al. 2023, Sec. 4.1; Song and Mittal 2021).

A lower score means "more likely a member". The attack's advantage is the best balanced accuracy over
``thresholds`` evenly spaced thresholds minus 0.5 (the paper's M(Theta, X, O) - 0.5 with |X| = |O|);
AUC and TPR at low FPR come from scikit-learn's ROC curve.
"""

from typing import Literal

import torch

from decpriv.metrics.rates import hit_rate

EPS = 1e-5  # as in the authors' code: keeps log(0) finite for confident predictions


def modified_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mentr(x, y) = -(1 - p_y) log(p_y) - sum_{j != y} p_j log(1 - p_j) (Song and Mittal 2021, Eq. 12)."""
    p = logits.softmax(-1)
    onehot = torch.nn.functional.one_hot(y, p.shape[-1]).to(torch.bool)
    p_y = p.gather(-1, y[..., None]).squeeze(-1)
    others = torch.where(onehot, torch.zeros_like(p), p * torch.log(1 - p + EPS))
    return -(1 - p_y) * torch.log(p_y + EPS) - others.sum(-1)


def loss_score(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the true label (Yeom et al. 2018's loss-threshold attack)."""
    return -torch.log_softmax(logits, -1).gather(-1, y[..., None]).squeeze(-1)


SCORES = {"mentr": modified_entropy, "loss": loss_score}
Score = Literal["mentr", "loss"]  # a config names one of SCORES


def best_threshold_advantage(
    members: torch.Tensor, mask: torch.Tensor, others: torch.Tensor, count: int
) -> torch.Tensor:
    """(K,) max over ``count`` thresholds rho of (TPR + TNR)/2 - 0.5, members predicted when score < rho.

    ``members`` (K, m) with validity ``mask`` (K, m); ``others`` (K, o) non-member scores.
    """
    big = torch.finfo(members.dtype).max
    low = torch.minimum(torch.where(mask, members, big).amin(1), others.amin(1))
    high = torch.maximum(torch.where(mask, members, -big).amax(1), others.amax(1))
    steps = torch.linspace(0, 1, count, dtype=members.dtype)
    rho = low[:, None] + (high - low)[:, None] * steps  # (K, count)
    tpr = hit_rate(members[:, None, :] < rho[:, :, None], -1, mask[:, None, :].expand(-1, count, -1))
    tnr = hit_rate(others[:, None, :] >= rho[:, :, None], -1)
    return ((tpr + tnr) / 2).amax(1) - 0.5
