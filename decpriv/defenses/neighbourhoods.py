"""What each node receives in a gossip step, stacked by blocks of receivers so that memory grows with the
edges, not with n times the largest degree.

Receivers are grouped by the size m of their closed neighbourhood into buckets 2^(k-1) < m <= 2^k (at most
log2(n) + 1 groups: a star of 10^4 leaves has two, its leaves and its hub); a group is an (b, M) index table
padded to its own widest neighbourhood M, less than twice any of its rows. A robust rule then runs on
blocks of a group's rows, an (rows, M, p) tensor gathered from the messages when the block is reached and
small enough to stay in the CPU's cache (``block_bytes``): the whole (n, M, p) stack never exists. The loops
are over groups and blocks, not nodes. A forged message replaces the honest one on its edge only: node v's
slot for a corrupt sender a holds what a sent v.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from decpriv.adversary.behaviour import Forgery
from decpriv.defenses.self_centred_clipping import edges_of

# one block's received messages: 2 MB stays in a core's L2 cache on CPU (docs/speed.md, "Poisoning"); a
# GPU wants large batches instead
CPU_BLOCK_BYTES = 2 << 20
GPU_BLOCK_BYTES = 1 << 30


def block_bytes(device: torch.device) -> int:
    return GPU_BLOCK_BYTES if device.type == "cuda" else CPU_BLOCK_BYTES


@dataclass(frozen=True, eq=False)
class Neighbourhoods:
    """Receivers ``nodes[r]`` and their senders: ``index[r, k]`` the k-th sender node ``nodes[r]`` hears
    (itself included), ``valid[r, k]`` False on the padding (which repeats the receiver), ``weight[r, k]`` =
    W[nodes[r], index[r, k]] (0 on the padding), ``size[r]`` the senders it hears."""

    nodes: torch.Tensor  # (b,) long
    index: torch.Tensor  # (b, M) long
    valid: torch.Tensor  # (b, M) bool
    weight: torch.Tensor  # (b, M)
    size: torch.Tensor  # (b,) long

    def rows(self, lo: int, hi: int) -> "Neighbourhoods":
        return Neighbourhoods(
            self.nodes[lo:hi], self.index[lo:hi], self.valid[lo:hi], self.weight[lo:hi], self.size[lo:hi]
        )


def closed_edges(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(receivers, senders, weights): the support of each row of W, plus the node itself when W[v, v] = 0,
    sorted by (receiver, sender)."""
    rows, cols, w = edges_of(W)
    n = W.shape[0]
    own = torch.arange(n, device=rows.device)
    missing = torch.ones(n, dtype=torch.bool, device=rows.device)
    missing[rows[rows == cols]] = False
    rows = torch.cat([rows, own[missing]])
    cols = torch.cat([cols, own[missing]])
    w = torch.cat([w, torch.zeros(int(missing.sum()), dtype=w.dtype, device=w.device)])
    order = torch.argsort(rows * n + cols)
    return rows[order], cols[order], w[order]


@dataclass(frozen=True, eq=False)
class Inbox:
    """Every node's closed neighbourhood, grouped by size (``groups``), and where each directed edge lands:
    edge e = (``keys[e]`` // n -> receiver, % n -> sender) sits in group ``group_of[e]``, row ``row_of[e]``,
    slot ``slot_of[e]``."""

    n: int
    groups: tuple[Neighbourhoods, ...]
    keys: torch.Tensor  # (E,) receiver * n + sender, sorted
    group_of: torch.Tensor
    row_of: torch.Tensor
    slot_of: torch.Tensor

    @classmethod
    def of(cls, W: torch.Tensor) -> "Inbox":
        rows, cols, w = closed_edges(W)
        n, dev = W.shape[0], rows.device
        size = torch.bincount(rows, minlength=n)
        slot = torch.arange(len(rows), device=dev) - (torch.cumsum(size, 0) - size)[rows]
        bucket = torch.ceil(torch.log2(size.double())).long()  # 2^(k-1) < m <= 2^k
        group_of_node = torch.empty(n, dtype=torch.long, device=dev)
        row_of_node = torch.empty(n, dtype=torch.long, device=dev)
        groups = []
        for g, k in enumerate(torch.unique(bucket).tolist()):  # at most log2(n) + 1 buckets
            nodes = torch.nonzero(bucket == k).flatten()
            group_of_node[nodes], row_of_node[nodes] = g, torch.arange(len(nodes), device=dev)
            mine = bucket[rows] == k
            r, s = row_of_node[rows[mine]], slot[mine]
            width = int(size[nodes].max())
            index = nodes[:, None].expand(len(nodes), width).clone()
            index[r, s] = cols[mine]
            valid = torch.zeros(len(nodes), width, dtype=torch.bool, device=dev)
            valid[r, s] = True
            weight = torch.zeros(len(nodes), width, dtype=w.dtype, device=dev)
            weight[r, s] = w[mine]
            groups.append(Neighbourhoods(nodes, index, valid, weight, size[nodes]))
        return cls(n, tuple(groups), rows * n + cols, group_of_node[rows], row_of_node[rows], slot)

    def locate(self, receivers: np.ndarray, senders: np.ndarray) -> torch.Tensor:
        """The edge number of each directed edge sender -> receiver (each must be an edge of W)."""
        dev = self.keys.device
        wanted = torch.as_tensor(receivers, device=dev, dtype=torch.long) * self.n + torch.as_tensor(
            senders, device=dev, dtype=torch.long
        )
        found = torch.searchsorted(self.keys, wanted).clamp(max=len(self.keys) - 1)
        if not bool((self.keys[found] == wanted).all()):
            raise ValueError("a forged message travels on a link the gossip matrix does not have")
        return found

    def blocks(
        self, messages: torch.Tensor, forgery: Forgery | None = None
    ) -> Iterator[tuple[Neighbourhoods, torch.Tensor]]:
        """Blocks of receivers with the (rows, M, p) messages they received (their own in their own slot;
        a forged message in its edge's slot)."""
        edge = None if forgery is None else self.locate(forgery.receivers, forgery.senders)
        for g in range(len(self.groups)):
            yield from self.group_blocks(g, messages, forgery, edge)

    def group_blocks(
        self, g: int, messages: torch.Tensor, forgery: Forgery | None, edge: torch.Tensor | None
    ) -> Iterator[tuple[Neighbourhoods, torch.Tensor]]:
        """The blocks of group g; ``edge`` the forged messages' edges (:meth:`locate`)."""
        group = self.groups[g]
        rows = slots = forged = None
        if forgery is not None and edge is not None:
            here = self.group_of[edge] == g
            order = torch.argsort(self.row_of[edge[here]])
            rows, slots = self.row_of[edge[here]][order], self.slot_of[edge[here]][order]
            forged = forgery.values.to(messages.device, messages.dtype)[here][order]
        per_row = group.index.shape[1] * messages.shape[1] * messages.element_size()
        step = max(1, block_bytes(messages.device) // max(per_row, 1))
        for lo in range(0, len(group.nodes), step):  # blocks of rows, not nodes
            block = group.rows(lo, lo + step)
            x = messages.index_select(0, block.index.flatten()).view(*block.index.shape, -1)
            if rows is not None and len(rows):
                a, b = torch.searchsorted(rows, torch.tensor([lo, lo + step], device=rows.device)).tolist()
                x[rows[a:b] - lo, slots[a:b]] = forged[a:b]
            yield block, x

    def received(self, messages: torch.Tensor, forgery: Forgery | None = None) -> list[torch.Tensor]:
        """Each group's (b, M, p) received messages whole (tests, and small graphs)."""
        edge = None if forgery is None else self.locate(forgery.receivers, forgery.senders)
        return [
            torch.cat([x for _, x in self.group_blocks(g, messages, forgery, edge)])
            for g in range(len(self.groups))
        ]
