"""The View: everything an attack may use, and nothing else (docs/ARCHITECTURE.md, pipeline step 3).

It holds public knowledge (graph, W, model architecture, declared hyperparameters, data shape), the
messages the adversary recorded, and the corrupt nodes' own data. Private data of honest nodes, true
gradients and membership labels live in :class:`decpriv.truth.Truth`, which attacks never receive.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decpriv.adversary.recorder import Transcript
from decpriv.graphs.network import Network
from decpriv.models.functional import FunctionalModel


@dataclass(frozen=True, eq=False)
class DataSpec:
    """Public facts about the data: shape, classes, value range (for box constraints)."""

    input_shape: tuple[int, ...]
    num_classes: int
    data_range: tuple[float, float] | None
    task: str


@dataclass(frozen=True, eq=False)
class View:
    network: Network
    attackers: np.ndarray
    eavesdropper: bool
    transcript: Transcript
    model: FunctionalModel
    data_spec: DataSpec
    hyper: dict[str, Any]  # the protocol's declared (public) hyperparameters
    own_x: torch.Tensor  # the attackers' own local data, (|A|, m, ...)
    own_y: torch.Tensor
    own_mask: torch.Tensor
    public: dict[str, Any] = field(default_factory=dict)  # e.g. the common initial model when it is public
    # ground truth, handed over only to an attack whose ``oracle`` flag is set (a paper's shortcut, marked
    # ``attack_oracle`` in summary.csv); None for every honest attack
    oracle: Any = None
