"""Partitions of a train split over n nodes, and the stacked per-node view used by vectorised training.

Every partitioner returns one index array per node; :class:`LocalData` stacks them into padded tensors
(n, m_max, ...) with a validity mask so all nodes train in one batched call.
"""

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.random.streams import uniform

PerNode = Annotated[int, Range(ge=1, what="the number of samples per node")] | None


def one_per_node(labels: np.ndarray, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Node v holds exactly one sample, drawn without replacement (El Mrini et al., Yu 2023 n_i = 1)."""
    return iid(labels, n, rng, per_node=1)


@checked("partition")
def iid(labels: np.ndarray, n: int, rng: np.random.Generator, per_node: PerNode = None) -> list[np.ndarray]:
    """Uniform disjoint split; ``per_node`` samples each (default: all samples, as evenly as possible)."""
    total = len(labels)
    if per_node is not None and per_node * n > total:
        raise bad_value(
            "partition.per_node",
            per_node,
            f"{n} nodes x {per_node} exceeds the {total} training samples",
            f"use at most {total // n} samples per node or fewer nodes",
        )
    order = rng.permutation(total)
    if per_node is None:
        return [np.sort(part) for part in np.array_split(order, n)]
    return [np.sort(order[v * per_node : (v + 1) * per_node]) for v in range(n)]


def contiguous(labels: np.ndarray, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Node v gets the v-th contiguous block (for data generated in node order, e.g. least squares); when
    the rows do not split evenly the first ``len(labels) % n`` blocks hold one row more."""
    return np.array_split(np.arange(len(labels)), n)


@checked("partition")
def dirichlet(
    labels: np.ndarray,
    n: int,
    rng: np.random.Generator,
    alpha: Annotated[float, Range(gt=0, what="the Dirichlet concentration", eg=0.5)] = 0.5,
    per_node: PerNode = None,
) -> list[np.ndarray]:
    """Label skew: node v's class proportions ~ Dirichlet(alpha); disjoint; ``per_node`` samples each.

    Samples are dealt class by class without replacement, so shards never overlap (unlike DECOR's code).
    """
    classes = np.unique(labels)
    per_node = per_node or len(labels) // n
    if per_node * n > len(labels):
        raise bad_value(
            "partition.per_node", per_node, "more samples requested than exist", f"use <= {len(labels) // n}"
        )
    pools = {c: list(rng.permutation(np.flatnonzero(labels == c))) for c in classes}
    parts = []
    for _ in range(n):
        share = rng.dirichlet(np.full(len(classes), alpha))
        taken: list[int] = []
        while len(taken) < per_node:
            available = np.array([len(pools[c]) > 0 for c in classes], dtype=float)
            weights = share * available
            weights = weights / weights.sum() if weights.sum() > 0 else available / available.sum()
            c = classes[rng.choice(len(classes), p=weights)]
            taken.append(pools[c].pop())
        parts.append(np.sort(np.array(taken)))
    return parts


@checked("partition")
def shards(
    labels: np.ndarray,
    n: int,
    rng: np.random.Generator,
    shards_per_node: Annotated[int, Range(ge=1, what="the number of shards a node receives", eg=2)] = 2,
) -> list[np.ndarray]:
    """McMahan et al.'s pathological split: sort by label, cut 2n shards, deal ``shards_per_node`` to each."""
    order = np.argsort(labels, kind="stable")
    pieces = np.array_split(order, n * shards_per_node)
    deal = rng.permutation(len(pieces)).reshape(n, shards_per_node)
    return [np.sort(np.concatenate([pieces[i] for i in row])) for row in deal]


@dataclass(frozen=True, eq=False)
class LocalData:
    """Per-node training sets stacked and padded: x (n, m, ...), y (n, m), mask (n, m), counts (n,)."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor
    indices: tuple[np.ndarray, ...]  # positions in the dataset's train split, per node

    @classmethod
    def stack(cls, x: torch.Tensor, y: torch.Tensor, parts: list[np.ndarray]) -> "LocalData":
        counts = np.array([len(p) for p in parts], dtype=np.int64)
        if counts.min() == 0:
            raise bad_value(
                "partition", "empty", "a node received no data", "use fewer nodes or more samples per node"
            )
        n, m = len(parts), int(counts.max())
        mask = np.arange(m)[None, :] < counts[:, None]
        idx = np.zeros((n, m), dtype=np.int64)
        idx[mask] = np.concatenate(parts)
        flat = torch.as_tensor(idx.reshape(-1), device=x.device)
        return cls(
            x=x[flat].reshape(n, m, *x.shape[1:]),
            y=y[flat].reshape(n, m),
            mask=torch.as_tensor(mask, device=x.device),
            counts=torch.as_tensor(counts, device=x.device),
            indices=tuple(parts),
        )

    @property
    def n(self) -> int:
        return self.x.shape[0]

    def node(self, v: int) -> "LocalData":
        """Node v's set alone, as a one-node LocalData (a random walk's holder)."""
        keep = slice(v, v + 1)
        return LocalData(self.x[keep], self.y[keep], self.mask[keep], self.counts[keep], self.indices[keep])

    def to(self, device: torch.device) -> "LocalData":
        return LocalData(
            self.x.to(device), self.y.to(device), self.mask.to(device), self.counts.to(device), self.indices
        )

    def astype(self, dtype: torch.dtype) -> "LocalData":
        """Floating-point features (and regression targets) in ``dtype``; integer labels unchanged."""
        y = self.y.to(dtype) if self.y.is_floating_point() else self.y
        return LocalData(self.x.to(dtype), y, self.mask, self.counts, self.indices)

    def require_batch(self, size: int | None, key: str = "protocol.batch_size") -> None:
        """Refuse a minibatch larger than the smallest local set (batches are drawn without replacement)."""
        smallest = int(self.counts.min())
        if size is not None and size > smallest:
            raise bad_value(
                key,
                size,
                f"the smallest local set holds {smallest} samples",
                f"use {key} <= {smallest}, null for full batch, or more samples per node",
            )

    def batch(
        self, size: int | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One minibatch per node: ``size`` distinct samples drawn uniformly from its own set (vectorised:
        the ``size`` largest of i.i.d. uniform keys, padding keyed below every sample).

        ``size=None`` returns the whole padded local set with its mask (full-batch gradient).
        """
        if size is None:
            return self.x, self.y, self.mask.to(self.x.dtype)
        keys = uniform(self.mask.shape, generator, self.x.device)
        keys = keys.masked_fill(~self.mask, -1.0)
        pick = keys.topk(size, dim=1, sorted=False).indices
        rows = torch.arange(self.n, device=self.x.device)[:, None]
        return self.x[rows, pick], self.y[rows, pick], torch.ones(self.n, size, device=self.x.device)

    def poisson_batch(
        self, rates: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One Poisson-sampled minibatch per node: each local sample joins independently with its node's rate
        (``rates`` (n,)), so batch sizes vary (Abadi et al., CCS 2016, Sec. 3.1; Opacus' DPDataLoader).
        Returned padded to the largest batch drawn, ``weight`` marking the samples taken."""
        keys = uniform(self.mask.shape, generator, self.x.device)
        taken = (keys < rates[:, None].to(keys)) & self.mask
        place = taken.cumsum(1) - 1  # each taken sample's slot in its node's batch, in local order
        width = max(int(place[:, -1].max()) + 1, 1)
        # untaken samples are scattered into a spare last column, then dropped
        slots = torch.where(taken, place, width)
        columns = torch.arange(taken.shape[1], device=taken.device).expand_as(taken)
        pick = torch.zeros(self.n, width + 1, dtype=torch.long, device=taken.device)
        pick = pick.scatter_(1, slots, columns)[:, :width]
        weight = torch.arange(width, device=taken.device) < place[:, -1:] + 1
        rows = torch.arange(self.n, device=self.x.device)[:, None]
        return self.x[rows, pick], self.y[rows, pick], weight.to(self.x.dtype)
