"""Everything built from the config before the simulation starts (pipeline step 1, docs/ARCHITECTURE.md)."""

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from decpriv.adversary.adversary import Adversary
from decpriv.adversary.view import AttackContext
from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.defenses.base import Defense
from decpriv.graphs.network import Network
from decpriv.models.functional import FunctionalModel
from decpriv.random.streams import Seeds


@dataclass(eq=False)
class Setup:
    cfg: DictConfig
    seeds: Seeds
    device: torch.device
    network: Network
    dataset: Dataset
    local: LocalData
    model: FunctionalModel
    protocol: Any  # decpriv.protocols.base.Protocol
    defense: Defense
    adversary: Adversary
    attack: Any | None  # decpriv.attacks.base.Attack
    accountant: Any | None  # decpriv.privacy.base.Accountant
    attack_context: AttackContext | None = None  # what the attack may know before the run
    plan: Any = None  # what the attack's prepare step returned
    sealed_attack: bytes | None = None  # the attack as built, pickled for its sealed process
    oracle: bool = False  # attack.oracle=true: the attack's run receives the truth (declared, marked)
