"""Per-round training metrics (history.csv): losses, accuracies of the average and local models,
consensus distance and generalisation error (Pasquini et al. 2023, Sec. 3)."""

import torch

from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.models.functional import FunctionalModel


def consensus_distance(theta: torch.Tensor) -> float:
    """C = sum_v sum_{u != v} ||theta_v - theta_u||^2 / (n^2 - n) = 2 sum_v ||theta_v - mean||^2 / (n - 1)."""
    n = theta.shape[0]
    spread = ((theta - theta.mean(0)) ** 2).sum()
    return float(2.0 * spread / max(n - 1, 1))


class Evaluator:
    """Computes one history row from the stacked node states, on at most ``max_eval`` samples."""

    def __init__(
        self,
        model: FunctionalModel,
        dataset: Dataset,
        local: LocalData,
        device: torch.device,
        max_eval: int = 1000,
    ):
        self.model = model
        self.classification = dataset.task == "classification"
        self.x_test = dataset.x_test[:max_eval].to(device)
        self.y_test = dataset.y_test[:max_eval].to(device)
        flat_x = local.x[local.mask]
        flat_y = local.y[local.mask]
        self.x_train = flat_x[:max_eval].to(device)
        self.y_train = flat_y[:max_eval].to(device)
        self.local = local

    @torch.no_grad()
    def __call__(self, theta: torch.Tensor) -> dict[str, float]:
        m = self.model
        local_loss = torch.func.vmap(m.loss)(
            theta, self.local.x, self.local.y, self.local.mask.to(theta.dtype)
        )
        row = {"train_loss": float(local_loss.mean()), "consensus_distance": consensus_distance(theta)}
        if not self.classification:
            return row
        avg = theta.mean(0, keepdim=True)
        test_avg = float((m.predict(avg, self.x_test)[0] == self.y_test).float().mean())
        train_avg = float((m.predict(avg, self.x_train)[0] == self.y_train).float().mean())
        local_test = (m.predict(theta, self.x_test) == self.y_test).float().mean(1)
        row.update(
            test_accuracy=test_avg,
            train_accuracy=train_avg,
            generalization_error=train_avg - test_avg,
            local_test_accuracy_mean=float(local_test.mean()),
            local_test_accuracy_min=float(local_test.min()),
            local_test_accuracy_max=float(local_test.max()),
        )
        return row
