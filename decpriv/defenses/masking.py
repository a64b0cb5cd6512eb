"""Additive masking in the ring Z_{2^M}: the arithmetic shared by secure aggregation and secret sharing.

Real values become fixed-point integers (``precision`` fractional bits, two's complement modulo 2^M);
masks and shares are uniform in Z_{2^M}, so a masked value is uniform whatever it hides and the masks
cancel EXACTLY in the sum (no float rounding): the aggregate is the sum of the fixed-point encodings.
M = 62 - ceil(log2(k)) for sums of at most k terms, so every int64 partial sum stays below 2^62.

:func:`pairwise_masked_sum` is secure aggregation by pairwise masks (Bonawitz et al., CCS 2017, Sec. 3-4):
within a group, every pair {u, w} shares a mask m_uw; u adds it and w subtracts it, so
y_u = enc(x_u) + sum_{w > u} m_uw - sum_{w < u} m_wu and sum_u y_u = sum_u enc(x_u). With drop-outs the
fault-tolerant version reconstructs the masks the survivors share with the dropped members (Bonawitz et
al.'s Shamir shares of the pair seeds) and removes them; without fault tolerance a group with a drop-out
cannot unmask and aborts. Pair seeds come from key agreement in the paper; here one named stream draws
every pair's mask of the round (row i is pair i's PRG output), which is what a shared seed provides.
All groups at once: masks are a (pairs, p) tensor, sums are index_add over (group, member) slots.
"""

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from decpriv.config.types import Range
from decpriv.errors import bad_value
from decpriv.random import streams as rng

# fractional bits of the fixed-point encoding: fewer lose the values, more leave no room in the ring
Precision = Annotated[int, Range(ge=8, le=48, what="the number of fractional bits", eg=32)]


@dataclass(frozen=True)
class Ring:
    """Z_{2^bits} with fixed-point encoding of ``precision`` fractional bits."""

    bits: int
    precision: int

    @classmethod
    def for_sums(cls, terms: int, precision: int, key: str = "defense.precision") -> "Ring":
        """The largest ring whose sums of ``terms`` elements fit int64; refuses a precision leaving less
        than 2^8 of integer range."""
        bits = 62 - max(1, math.ceil(math.log2(max(terms, 2))))
        if bits - 1 - precision < 8:
            raise bad_value(
                key,
                precision,
                f"sums of {terms} values leave a {bits}-bit ring, too small for {precision} fractional bits",
                f"use {key} <= {bits - 9}",
            )
        return cls(bits, precision)

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    @property
    def limit(self) -> float:
        """Largest magnitude a decoded value (and so any sum) may have."""
        return float(2 ** (self.bits - 1 - self.precision))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Fixed-point encoding in [0, 2^M); refuses values outside the range (a diverging model)."""
        x = x.to(torch.float64)
        peak = float(x.abs().max()) if x.numel() else 0.0
        if not peak < self.limit:
            raise RuntimeError(
                f"secure aggregation: a value of magnitude {peak:.3g} exceeds the fixed-point range "
                f"{self.limit:.3g} (the model diverged, or lower defense.precision)"
            )
        return torch.round(x * 2.0**self.precision).to(torch.int64).remainder(self.modulus)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Ring element -> signed fixed-point value, float64."""
        z = z.remainder(self.modulus)
        signed = torch.where(z >= self.modulus // 2, z - self.modulus, z)
        return signed.to(torch.float64) / 2.0**self.precision

    def uniform(
        self, shape: tuple[int, ...], generator: torch.Generator, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        return rng.integers(0, self.modulus, shape, generator, device)


@dataclass(frozen=True, eq=False)
class Groups:
    """Aggregation groups as slots: slot s is member ``member[s]`` of group ``group[s]`` (aggregated by
    node ``group[s]`` in D-SGD); ``pairs`` (P, 2) are the slot pairs sharing a mask (both in one group)."""

    group: torch.Tensor  # (S,) int64
    member: torch.Tensor  # (S,) int64
    pairs: torch.Tensor  # (P, 2) int64 slot indices, first < second
    count: int  # number of groups

    @classmethod
    def from_slots(cls, group: torch.Tensor, member: torch.Tensor, count: int) -> "Groups":
        """Slots must be sorted by group; every pair of slots within a group shares a mask."""
        sizes = torch.bincount(group, minlength=count)
        starts = torch.cumsum(sizes, 0) - sizes
        pairs = []
        for k in torch.unique(sizes).tolist():  # one vectorised block per distinct group size
            if k < 2:
                continue
            i, j = torch.triu_indices(k, k, 1, device=group.device)
            first = starts[sizes == k]
            pairs.append(torch.stack([first[:, None] + i, first[:, None] + j], -1).reshape(-1, 2))
        stacked = torch.cat(pairs) if pairs else torch.empty(0, 2, dtype=torch.int64, device=group.device)
        return cls(group, member, stacked, count)

    def sizes(self) -> torch.Tensor:
        return torch.bincount(self.group, minlength=self.count)


@dataclass(frozen=True, eq=False)
class MaskedSum:
    masked: torch.Tensor  # (S, p) ring elements each member sent its aggregator
    sums: torch.Tensor  # (G, p) ring elements: the unmasked sum over surviving members
    survivors: torch.Tensor  # (G,) number of surviving members
    ok: torch.Tensor  # (G,) the aggregate was revealed (threshold met; no drop-out, or fault tolerant)


def pairwise_masked_sum(
    ring: Ring,
    groups: Groups,
    encoded: torch.Tensor,
    arrived: torch.Tensor,
    generator: torch.Generator,
    threshold: int,
    fault_tolerant: bool,
) -> MaskedSum:
    """One secure aggregation of every group: ``encoded`` (S, p) ring elements, ``arrived`` (S,) which
    members' messages reached their aggregator (drop-outs are False)."""
    S, p = encoded.shape
    a, b = groups.pairs[:, 0], groups.pairs[:, 1]
    m = ring.uniform((len(a), p), generator, encoded.device)
    minus = ring.modulus - m
    mask = torch.zeros_like(encoded).index_add_(0, a, m).index_add_(0, b, minus).remainder_(ring.modulus)
    masked = (encoded + mask).remainder_(ring.modulus)
    # Reconstruction of the masks survivors share with dropped members (at most k - 1 per slot).
    lost_b, lost_a = arrived[a] & ~arrived[b], arrived[b] & ~arrived[a]
    removed = (
        torch.zeros_like(encoded)
        .index_add_(0, a[lost_b], minus[lost_b])
        .index_add_(0, b[lost_a], m[lost_a])
        .remainder_(ring.modulus)
    )
    alive = torch.where(arrived[:, None], (masked + removed).remainder_(ring.modulus), 0)
    sums = torch.zeros((groups.count, p), dtype=torch.int64, device=encoded.device)
    sums = sums.index_add_(0, groups.group, alive).remainder_(ring.modulus)
    survivors = torch.zeros(groups.count, dtype=torch.int64, device=encoded.device).index_add_(
        0, groups.group, arrived.to(torch.int64)
    )
    complete = survivors == groups.sizes()
    ok = (survivors >= threshold) & (complete | fault_tolerant)
    return MaskedSum(masked, sums, survivors, ok)
