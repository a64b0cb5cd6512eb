"""Per-round training metrics (history.csv): losses, accuracies of the average and local models,
consensus distance and generalisation error (Pasquini et al. 2023, Sec. 3), and for least squares the
optimality gap to the exact minimiser (DECOR, Allouah et al. 2024, Sec. 5)."""

import pandas as pd
import torch
from torch import nn

from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.metrics.rates import exact_mean, exact_sum, hit_rate
from decpriv.models.functional import FunctionalModel


def consensus_distance(theta: torch.Tensor) -> float:
    """C = sum_v sum_{u != v} ||theta_v - theta_u||^2 / (n^2 - n) = 2 sum_v ||theta_v - mean||^2 / (n - 1)."""
    n = theta.shape[0]
    # float64 and the nodes' terms summed exactly: a sum's rounding depends on how many threads split it,
    # and a sweep's jobs run with different thread counts (one per joblib worker), yet must write the
    # same tables
    theta = theta.double()
    spread = exact_sum(((theta - theta.mean(0)) ** 2).sum(1))
    return 2.0 * spread / max(n - 1, 1)


def least_squares_optimum(model: FunctionalModel, local: LocalData) -> torch.Tensor | None:
    """The exact minimiser x* of sum_i f_i over all nodes' data (float64, flat parameter order), for a
    linear model with half squared error; None for any other model.

    f_i sums (reduction ``sum``) or averages (``mean``) 1/2 (<w, a> + b - y)^2 over node i's rows, so x*
    solves a weighted least-squares problem with row weights 1 or 1/m_i.
    """
    layers = list(model.module.children())
    linear = len(layers) == 2 and isinstance(layers[0], nn.Flatten) and isinstance(layers[1], nn.Linear)
    if model.loss_name != "half_squared_error" or not linear or layers[1].out_features != 1:
        return None
    mask = local.mask.cpu()
    a = local.x.cpu()[mask].reshape(int(mask.sum()), -1).double()
    b = local.y.cpu()[mask].double()
    if layers[1].bias is not None:
        a = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype, device=a.device)], 1)
    if model.reduction == "mean":
        per_row = (1.0 / local.counts.cpu().double())[:, None].expand(mask.shape)[mask]
        a, b = a * per_row.sqrt()[:, None], b * per_row.sqrt()
    return torch.linalg.lstsq(a, b[:, None], driver="gelsd").solution.squeeze(1)


class Evaluator:
    """Computes one history row from the stacked node states.

    The average model is scored on at most ``max_eval`` test samples and ``max_eval`` training samples
    spread evenly over all nodes. Local models are scored on the first ``local_eval`` test samples and on
    at most ``local_eval`` of their own samples, ``node_chunk`` nodes at a time, so the cost per
    evaluation stays O(n * local_eval) forward passes with bounded memory.
    """

    def __init__(
        self,
        model: FunctionalModel,
        dataset: Dataset,
        local: LocalData,
        device: torch.device,
        max_eval: int = 1000,
        local_eval: int = 256,
        node_chunk: int = 256,
    ):
        self.model = model
        self.classification = dataset.task == "classification"
        dtype = local.x.dtype
        self.x_test = dataset.x_test[:max_eval].to(device, dtype)
        self.y_test = dataset.y_test[:max_eval].to(device)
        flat_x, flat_y = local.x[local.mask], local.y[local.mask]
        # on the CPU: CUDA's linspace rounds its points differently, and .round() would pick other samples
        spread = torch.linspace(0, len(flat_x) - 1, min(max_eval, len(flat_x)), device="cpu")
        spread = spread.round().long().to(flat_x.device)
        self.x_train = flat_x[spread].to(device)
        self.y_train = flat_y[spread].to(device)
        k = min(local.x.shape[1], local_eval)
        self.own_x, self.own_y = local.x[:, :k].to(device), local.y[:, :k].to(device)
        self.own_mask = local.mask[:, :k].to(device)
        self.local_eval, self.node_chunk = local_eval, node_chunk
        optimum = least_squares_optimum(model, local)
        self.optimum = None if optimum is None else optimum.to(device)

    def _local_accuracies(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n,) accuracy of every node's model on the shared test slice and on its own samples."""
        m = self.model
        x_test, y_test = self.x_test[: self.local_eval], self.y_test[: self.local_eval]
        own_predict = torch.func.vmap(lambda th, x: m.predict(th[None], x)[0])
        test, own = [], []
        for start in range(0, theta.shape[0], self.node_chunk):
            block = slice(start, start + self.node_chunk)
            test.append(hit_rate(m.predict(theta[block], x_test) == y_test, 1))
            hits = own_predict(theta[block], self.own_x[block]) == self.own_y[block]
            own.append(hit_rate(hits, 1, self.own_mask[block]))
        return torch.cat(test), torch.cat(own)

    @torch.no_grad()
    def __call__(self, theta: torch.Tensor) -> dict[str, float]:
        m = self.model
        local_loss = torch.func.vmap(m.loss)(theta, self.own_x, self.own_y, self.own_mask.to(theta.dtype))
        row = {"train_loss": exact_mean(local_loss), "consensus_distance": consensus_distance(theta)}
        if self.optimum is not None:
            gap = ((theta.double() - self.optimum) ** 2).sum(1).mean()
            row["optimality_gap"] = float(gap)
        if not self.classification:
            return row
        avg = theta.mean(0, keepdim=True)
        test_avg = float(hit_rate(m.predict(avg, self.x_test)[0] == self.y_test))
        train_avg = float(hit_rate(m.predict(avg, self.x_train)[0] == self.y_train))
        local_test, local_train = self._local_accuracies(theta)
        row.update(
            test_accuracy=test_avg,
            train_accuracy=train_avg,
            generalization_error=train_avg - test_avg,
            local_test_accuracy_mean=exact_mean(local_test),
            local_test_accuracy_min=float(local_test.min()),
            local_test_accuracy_max=float(local_test.max()),
            local_train_accuracy_mean=exact_mean(local_train),
            local_train_accuracy_min=float(local_train.min()),
            local_train_accuracy_max=float(local_train.max()),
        )
        return row


def summarise(history: pd.DataFrame, rounds: int, average_last: int | None = None) -> dict[str, float]:
    """Headline metrics: the last evaluated row, or the mean over rounds ``rounds - average_last + 1 ..
    rounds`` (every one of them evaluated) to smooth out stochastic-gradient noise (DECOR, Sec. 5)."""
    window = history[history["round"] > rounds - (average_last or 1)]
    return {k: float(v) for k, v in window.drop(columns="round").mean().items()}
