"""Additive secret sharing among k aggregators (SMPC) for FedAvg/FedSGD (the "Privacy in DML" slides:
"each party holds a random share of the gradient, and only the sum of all shares reconstructs it").

Each round every chosen client u splits its weighted contribution enc(w_u theta_u) (fixed point in
Z_{2^M}, ``decpriv.defenses.masking.Ring``) into k shares, k - 1 uniform (stream ``defense.ss_shares``)
and the last making them sum to it, and sends share j to aggregator j. Aggregator j adds the shares it
holds and publishes the partial sum; the k partial sums add up to the global model exactly (up to the
fixed-point rounding). Any k - 1 aggregators together see only uniform values; all k reconstruct every
update. The adversary (``adversary=server``) controls ``colluding`` of the k aggregators: it records,
per client, the sum of the shares those aggregators hold, divided by w_u (uniform noise below k, the
update itself at k), and the global model.
"""

from typing import TYPE_CHECKING, Annotated, Any

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.defenses.masking import Precision, Ring
from decpriv.errors import bad_value

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder


def additive_shares(ring: Ring, encoded: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """(k, C, p) shares of each row of ``encoded`` (C, p): uniform but for the last, all summing to it."""
    first = ring.uniform((k - 1, *encoded.shape), generator, encoded.device)
    last = (encoded - first.sum(0)).remainder(ring.modulus)
    return torch.cat([first, last[None]])


@checked("defense")
class SecretSharing(Defense):
    name = "secret_sharing"

    def __init__(
        self,
        aggregators: Annotated[int, Range(ge=2, what="secret sharing's number of aggregators", eg=2)] = 2,
        colluding: int = 1,
        precision: Precision = 32,
    ):
        if not 0 <= colluding <= aggregators:
            raise bad_value(
                "defense.colluding",
                colluding,
                f"the adversary controls between 0 and {aggregators} aggregators",
                f"use 0..{aggregators}",
            )
        self.aggregators, self.colluding, self.precision = aggregators, colluding, precision
        self._ring: Ring | None = None
        self._messages = self._rounds = 0
        self._p = 0

    def bind(self, setup: Built) -> None:
        if setup.protocol.name not in ("fedavg", "fedsgd"):
            raise bad_value(
                "defense",
                self.name,
                f"secret sharing among k aggregators is a federated primitive; protocol={setup.protocol.name} "
                "has no aggregators",
                "use protocol=fedavg or fedsgd (D-SGD: defense=secure_aggregation)",
            )
        from decpriv.protocols.fedavg import client_nodes

        clients = len(client_nodes(setup.network))
        terms = max(clients, self.aggregators)
        self._ring = Ring.for_sums(terms, self.precision)
        self._shares = setup.seeds.torch("defense.ss_shares")
        self._attackers = torch.as_tensor(setup.adversary.nodes, device=setup.device)
        self._p = setup.model.p

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        ring, k = self._ring, self.aggregators
        order = torch.sort(chosen).values
        w = weights[order].to(torch.float64)
        w = w / w.sum()
        shares = additive_shares(
            ring, ring.encode(w[:, None] * updates[order].to(torch.float64)), k, self._shares
        )
        partials = shares.sum(1).remainder(ring.modulus)  # (k, p) each aggregator's published partial sum
        total = ring.decode(partials.sum(0)).to(held.dtype)
        if recorder.enabled:
            held_by_adversary = ring.decode(shares[: self.colluding].sum(0)) / w[:, None]
            values = held.expand(len(updates), -1).clone()
            values[order] = held_by_adversary.to(values.dtype)
            corrupt = self._attackers[torch.isin(self._attackers, order)]
            values[corrupt] = updates[corrupt]
            recorder.record(round_, 0, values)
            recorder.record_hidden(total[None], sent_to_server(updates, order, held))
        self._messages += len(order) * k + k * (k - 1)
        self._rounds += 1
        return total

    def summary(self) -> dict[str, Any]:
        messages = self._messages / max(self._rounds, 1)
        bits = self._ring.bits if self._ring else 0
        return {
            "ss_aggregators": self.aggregators,
            "ss_colluding": self.colluding,
            "ss_ring_bits": bits,
            "ss_messages_per_round": messages,
            "ss_bytes_per_round": messages * self._p * bits / 8,
        }
