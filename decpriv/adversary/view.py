"""What an attack may know: :class:`AttackContext` before the run, :class:`View` after it
(docs/ARCHITECTURE.md, pipeline steps 1 and 3).

Both hold public knowledge (graph, W, model architecture, the protocol's declared hyperparameters, data
facts), the adversary's own nodes and data, and random streams named ``attack.*``; the View adds the
messages the adversary recorded and the attack's plan. Private data of honest nodes, true gradients and
membership labels live in :class:`decpriv.seal.truth.Truth`, which attacks never receive.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from decpriv.adversary.adversary import Adversary
from decpriv.adversary.recorder import Transcript
from decpriv.graphs.network import Network
from decpriv.models.functional import FunctionalModel
from decpriv.random.streams import ScopedSeeds


@dataclass(frozen=True, eq=False)
class DataSpec:
    """Public facts about the data: name, shape, classes, value range (for box constraints), the size of
    the held-out split, and how many samples each node holds (public: FedAvg weighs clients by it)."""

    input_shape: tuple[int, ...]
    num_classes: int
    data_range: tuple[float, float] | None
    task: str
    name: str = ""
    test_size: int = 0
    local_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def is_image(self) -> bool:
        return len(self.input_shape) == 3


@dataclass(frozen=True, eq=False)
class PublicProtocol:
    """The protocol as the adversary knows it: its name, message kind and declared hyperparameters
    (``Protocol.hyper()``), read as attributes (``protocol.rounds``)."""

    name: str
    recorder_kind: str
    hyper: dict[str, Any]

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["hyper"][key]
        except KeyError:
            raise AttributeError(key) from None


@dataclass(frozen=True, eq=False)
class AttackContext:
    """Everything ``Attack.prepare`` and ``Attack.behaviour`` see: no honest node's data, no config."""

    network: Network
    adversary: Adversary
    protocol: PublicProtocol
    model: FunctionalModel
    data: DataSpec
    own_x: torch.Tensor  # the attackers' own local data, (|A|, m, ...)
    own_y: torch.Tensor
    own_mask: torch.Tensor
    seeds: ScopedSeeds  # streams named attack.*
    choices: dict[str, Any] = field(default_factory=dict)  # option names (partition, model ...) for messages


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
    seeds: ScopedSeeds | None = None  # streams named attack.*
    plan: Any = None  # what the attack's prepare step decided before the run
    sybils: Any = None  # the Sybil pair the config placed (adversary.sybils): the adversary's own choice
    # ground truth, put here by the pipeline only under ``attack.oracle=true`` (a paper's shortcut, marked
    # ``attack_oracle`` in run.json and summary.csv); None for every honest attack
    oracle: Any = None
    oracle_declared: bool = False  # attack.oracle=true in the config: the attack runs with the truth
