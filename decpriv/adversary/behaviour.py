"""Active adversaries: an attack may replace the corrupt nodes' outgoing messages, per receiver.

The protocol hands the behaviour only what the attackers observed this round (their neighbours'
messages, rushing adversary) and applies the forged messages through :func:`apply_forgery`; the protocol
itself is never edited (Pasquini et al. 2023, Sec. 5).
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


@dataclass(frozen=True, eq=False)
class Forgery:
    """Message ``values[k]`` replaces what ``senders[k]`` (a corrupt node) sends to ``receivers[k]``."""

    senders: np.ndarray
    receivers: np.ndarray
    values: torch.Tensor


class Behaviour(ABC):
    """Interface of active attacks; ``forge`` returns None to send honestly this round."""

    @abstractmethod
    def forge(
        self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor
    ) -> Forgery | None:
        """``observed[k]``: this round's message from ``senders[k]``; ``own``: the attackers' honest messages."""


def apply_forgery(
    W: sp.csr_array, mixed: torch.Tensor, honest: torch.Tensor, forgery: Forgery
) -> torch.Tensor:
    """Correct ``mixed = W @ honest`` for forged edges: mixed[v] += W[v, a] (forged_{a->v} - honest[a])."""
    dev = mixed.device
    scale = torch.as_tensor(
        np.asarray(W[forgery.receivers, forgery.senders]).ravel(), dtype=mixed.dtype, device=dev
    )
    send = torch.as_tensor(forgery.senders, device=dev)
    delta = scale[:, None] * (forgery.values.to(dev, mixed.dtype) - honest[send])
    return mixed.index_add(0, torch.as_tensor(forgery.receivers, device=dev), delta)
