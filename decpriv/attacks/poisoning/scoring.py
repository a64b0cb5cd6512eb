"""The honest nodes' models under attack beside the same run with every node honest (the pipeline's
``clean_final_states``, ``Attack.clean_baseline``): test accuracy, and for a backdoor the share of
triggered test inputs (true label not the target) sent to the target label."""

import numpy as np
import torch

from decpriv.attacks.poisoning.data_poisons import Trigger
from decpriv.models.functional import FunctionalModel
from decpriv.seal.truth import Truth

MAX_TEST = 1000  # test samples scored per model (the history's own cap)


def honest_nodes(n: int, attackers: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.setdiff1d(np.arange(n), attackers))


def accuracy(model: FunctionalModel, states: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean over the models of their accuracy on (x, y)."""
    with torch.no_grad():
        predicted = model.predict(states, x.to(states.dtype))
    return float((predicted == y).double().mean())


def scores(model: FunctionalModel, truth: Truth, attackers: np.ndarray, trigger: Trigger | None) -> dict:
    """``poisoned_*`` (this run) and ``clean_*`` (every node honest) accuracies of the honest nodes."""
    honest = honest_nodes(len(truth.final_states), attackers)
    x, y = truth.dataset.x_test[:MAX_TEST], truth.dataset.y_test[:MAX_TEST]
    runs = {"poisoned": truth.final_states[honest], "clean": truth.extras["clean_final_states"][honest]}
    out = {}
    for name, states in runs.items():
        out[f"{name}_test_accuracy"] = accuracy(model, states, x, y)
        if trigger is not None:
            other = y != trigger.target
            target = torch.full_like(y[other], trigger.target)
            out[f"{name}_backdoor_success"] = accuracy(model, states, trigger.stamp(x[other]), target)
    out["accuracy_drop"] = out["clean_test_accuracy"] - out["poisoned_test_accuracy"]
    out["byzantine_nodes"] = len(attackers)
    return out
