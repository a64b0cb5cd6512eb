"""Labels of a leaked batch: analytic inference from the last layer, or candidates to enumerate.

iDLG (Zhao et al. 2020, sec. 3): with cross-entropy, the gradient of the last layer's bias is
softmax(z) - onehot(y), negative exactly at the true class; its weight rows are that factor times the
(non-negative, post-ReLU) penultimate activations, so the true class is the row with negative sum.
For a batch of B > 1 (mean reduction) the bias gradient is mean_i softmax(z_i) - counts / B; the
batch-label counting variant (Wainakh et al. 2022, "LLG") takes every class with a negative entry once and
estimates the counts as B (1/C - g_c), i.e. assumes near-uniform predictions (an untrained model), then
rounds by largest remainders to a total of B.

Neither applies to a gradient DIFFERENCE f(w_t) - f(w_{t+2}) (Yu 2023, Table 5.1): the label factor
cancels to first order, so the sign pattern is lost. :func:`infer_labels` takes a single gradient only;
for differences enumerate candidates (:func:`candidate_labels`) or optimise soft labels.
"""

import math
from itertools import combinations_with_replacement

import torch

from decpriv.errors import bad_value
from decpriv.models.functional import FunctionalModel


def last_layer_gradient(model: FunctionalModel, gradient: torch.Tensor) -> torch.Tensor:
    """(C,) per-class signal of the last layer: the bias gradient, or the weight rows' sums without bias."""
    parts = model.unflatten(gradient)
    last = parts[model.names[-1]]
    if last.dim() == 1:
        return last
    return last.sum(dim=tuple(range(1, last.dim())))


def infer_labels(model: FunctionalModel, gradient: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(B,) sorted labels read off a single leaked gradient (iDLG for B = 1, LLG counting for B > 1).

    Exact for B = 1 with cross-entropy; for B > 1 exact whenever the batch's labels are distinct and
    the model is near its initialisation, an estimate otherwise. Refuses gradient differences.
    """
    if model.loss_name != "cross_entropy":
        raise bad_value(
            "loss", model.loss_name, "label inference reads the cross-entropy gradient", "give labels"
        )
    if gradient.dim() != 1:
        raise bad_value(
            "target",
            tuple(gradient.shape),
            "label inference applies to one leaked gradient, not a gradient difference",
            "enumerate candidate labels instead",
        )
    g = last_layer_gradient(model, gradient).detach().double()
    if batch_size == 1:
        return g.argmin().reshape(1)
    num_classes = g.numel()
    scale = batch_size if model.reduction == "mean" else 1.0
    estimate = (batch_size / num_classes - scale * g).clamp_min(0)
    counts = (g < 0).long()
    if counts.sum() > batch_size:
        counts = torch.zeros_like(counts)
        counts[g.argsort()[:batch_size]] = 1
    remaining = estimate - counts
    while counts.sum() < batch_size:
        best = remaining.argmax()
        counts[best] += 1
        remaining[best] -= 1
    return torch.repeat_interleave(torch.arange(num_classes), counts.cpu())


def label_multisets(num_classes: int, batch_size: int) -> int:
    """How many multisets of B labels out of C there are: C(C + B - 1, B)."""
    return math.comb(num_classes + batch_size - 1, batch_size)


def candidate_labels(num_classes: int, batch_size: int, limit: int) -> torch.Tensor:
    """(K, B) every multiset of B labels out of C, K = C(C + B - 1, B); refused above ``limit``."""
    count = label_multisets(num_classes, batch_size)
    if count > limit:
        raise bad_value(
            "attack.max_label_candidates",
            limit,
            f"enumerating labels of a batch of {batch_size} over {num_classes} classes needs {count} candidates",
            f"raise it to {count}, give the labels, or use labels=optimise",
        )
    return torch.tensor(list(combinations_with_replacement(range(num_classes), batch_size)), dtype=torch.long)
