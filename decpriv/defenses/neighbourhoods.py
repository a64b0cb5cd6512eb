"""What each node receives in a gossip step, stacked: the closed neighbourhood of every node as an (n, M)
index table padded to the largest degree M, so a robust rule runs on one (n, M, p) tensor, all nodes at
once (no loop over nodes). A forged message replaces the honest one on its edge only: node v's slot for a
corrupt sender a holds what a sent v.
"""

from dataclasses import dataclass

import numpy as np
import torch

from decpriv.adversary.behaviour import Forgery
from decpriv.defenses.self_centred_clipping import edges_of


@dataclass(frozen=True, eq=False)
class Neighbourhoods:
    """``index[v, k]``: the k-th sender node v hears (v itself included), ``valid[v, k]`` False on the
    padding, ``weight[v, k]`` = W[v, index[v, k]] (0 on the padding), ``size[v]`` the senders v hears."""

    index: torch.Tensor  # (n, M) long
    valid: torch.Tensor  # (n, M) bool
    weight: torch.Tensor  # (n, M)
    size: torch.Tensor  # (n,) long

    @classmethod
    def of(cls, W: torch.Tensor) -> "Neighbourhoods":
        """The support of each row of W, plus the node itself when W[v, v] = 0."""
        rows, cols, w = edges_of(W)
        n = W.shape[0]
        own = torch.arange(n, device=rows.device)
        missing = torch.ones(n, dtype=torch.bool, device=rows.device)
        missing[rows[rows == cols]] = False
        rows = torch.cat([rows, own[missing]])
        cols = torch.cat([cols, own[missing]])
        w = torch.cat([w, torch.zeros(int(missing.sum()), dtype=w.dtype, device=w.device)])
        order = torch.argsort(rows * n + cols)
        rows, cols, w = rows[order], cols[order], w[order]
        size = torch.bincount(rows, minlength=n)
        start = torch.cumsum(size, 0) - size
        slot = torch.arange(len(rows), device=rows.device) - start[rows]
        width = int(size.max())
        index = own[:, None].expand(n, width).clone()
        index[rows, slot] = cols
        valid = torch.zeros(n, width, dtype=torch.bool, device=rows.device)
        valid[rows, slot] = True
        weight = torch.zeros(n, width, dtype=w.dtype, device=w.device)
        weight[rows, slot] = w
        return cls(index, valid, weight, size)

    def slots(self, receivers: np.ndarray, senders: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(receiver, slot) of each directed edge sender -> receiver (each must be an edge of W)."""
        n = self.index.shape[0]
        dev = self.index.device
        keys = torch.where(self.valid, torch.arange(n, device=dev)[:, None] * n + self.index, -1).flatten()
        order = torch.argsort(keys)
        receivers_t = torch.as_tensor(receivers, device=dev, dtype=torch.long)
        wanted = receivers_t * n + torch.as_tensor(senders, device=dev, dtype=torch.long)
        found = order[torch.searchsorted(keys[order], wanted).clamp(max=len(keys) - 1)]
        if not bool((keys[found] == wanted).all()):
            raise ValueError("a forged message travels on a link the gossip matrix does not have")
        return receivers_t, found % self.index.shape[1]

    def received(self, messages: torch.Tensor, forgery: Forgery | None = None) -> torch.Tensor:
        """(n, M, p) what every node receives (its own message in its own slot; padding repeats it)."""
        stacked = messages[self.index]
        if forgery is not None:
            rows, slot = self.slots(forgery.receivers, forgery.senders)
            stacked[rows, slot] = forgery.values.to(messages.device, messages.dtype)
        return stacked
