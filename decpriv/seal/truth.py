"""Ground truth of a run, for scoring only: built after the attack ran, in the pipeline's process; the
attack's own code runs in a sealed process where it does not exist (decpriv/seal/process.py), except under a
declared ``attack.oracle=true``."""

from dataclasses import dataclass, field
from typing import Any

import torch

from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData


@dataclass(frozen=True, eq=False)
class Truth:
    dataset: Dataset
    local: LocalData  # every node's private training set
    final_states: torch.Tensor  # (n, p)
    extras: dict[str, Any] = field(default_factory=dict)  # protocol-specific truths (true gradients, ...)
