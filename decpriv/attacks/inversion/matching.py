"""Optimal matching of a batch of reconstructions to the true batch before scoring.

Gradients of a batch are invariant to permuting its examples, so reconstruction i need not correspond to
true example i; scoring pairs them by a minimum-cost assignment (Hungarian algorithm, scipy's
``linear_sum_assignment``) on per-pair mean squared error.
"""

import torch


def match(reconstructed: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """(B,) permutation ``perm`` minimising sum_i MSE(reconstructed[perm[i]], truth[i])."""
    r = reconstructed.detach().flatten(1).double()
    t = truth.detach().flatten(1).double().to(r.device)
    cost = torch.cdist(t, r) ** 2 / r.shape[1]
    from scipy.optimize import linear_sum_assignment  # on first use: every run would pay its import

    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    perm = torch.empty(len(rows), dtype=torch.long)
    perm[torch.as_tensor(rows)] = torch.as_tensor(cols)
    return perm
