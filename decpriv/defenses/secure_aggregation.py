"""Secure aggregation by pairwise additive masks (Bonawitz et al., CCS 2017) for D-SGD and FedAvg/FedSGD.

Aggregation groups: in D-SGD each node v aggregates its closed neighbourhood (the nonzeros of row v of
W), member u contributing W_vu theta_u^{t+1/2}; in FedAvg the server aggregates the round's clients,
client u contributing (n_u / sum n) theta_u. Each member masks its contribution for that aggregator
(``decpriv.defenses.masking``: fixed point in Z_{2^M}, pairwise masks fresh per round and per group from
the stream ``defense.sa_masks``), so the aggregator learns the sum and nothing else, and the sum is the
unprotected one up to the fixed-point rounding (2^-precision per term; float64 arithmetic otherwise).

Drop-outs: with ``dropout`` > 0 each node's messages of a round are lost with that probability (stream
``defense.sa_dropout``; a node always reaches its own aggregation). Fault tolerant (default), the
survivors' shares of the dropped members' pair masks are used to remove them (Bonawitz et al., Sec. 4)
and the aggregate is renormalised by the survivors' weights; otherwise a group with a drop-out cannot
unmask. A group with fewer survivors than ``threshold`` aborts: its aggregator keeps its own update
(FedAvg: the global model is unchanged). On a complete graph a Sybil pair (``adversary.sybils``) has
its aggregator b claim the victim dropped out of b's group (Pasquini et al. 2023, Sec. 6.1).

What the adversary records (per receiver): for each corrupt aggregator, every member's masked message
read as a fixed-point number (its own nodes' messages in the clear, NaN for a message that never
arrived) and the revealed sum (NaN when aborted); an eavesdropper also sees every masked message.
"""

from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.defenses.masking import Groups, MaskedSum, Precision, Ring, pairwise_masked_sum
from decpriv.errors import bad_value
from decpriv.random import streams as rng

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder

PROTOCOLS = ("dsgd", "fedavg", "fedsgd")


@checked("defense")
class SecureAggregation(Defense):
    name = "secure_aggregation"
    hides_updates = True

    def __init__(
        self,
        threshold: Annotated[int, Range(ge=1, what="the survivors needed to reveal a sum", eg=3)] = 3,
        fault_tolerant: bool = True,
        dropout: Annotated[float, Range(ge=0, lt=1, what="a drop-out probability", eg=0.1)] = 0.0,
        precision: Precision = 32,
    ):
        self.threshold, self.fault_tolerant, self.dropout = threshold, fault_tolerant, dropout
        self.precision = precision
        self._ring: Ring | None = None
        self._cost = {"messages": 0, "pair_masks": 0, "aggregations": 0, "aborted": 0, "rounds": 0}
        self._p = 0

    def bind(self, setup: Built) -> None:
        protocol, network, adversary = setup.protocol, setup.network, setup.adversary
        if protocol.name not in PROTOCOLS:
            raise bad_value(
                "defense",
                self.name,
                f"protocol={protocol.name} has no aggregation group whose sum could be revealed alone "
                "(gossip averaging and ADMM/PDMM exchange individual values)",
                "use protocol=dsgd, fedavg or fedsgd",
            )
        self._device = setup.device
        self._masks = setup.seeds.torch("defense.sa_masks")
        self._drops = setup.seeds.torch("defense.sa_dropout")
        self._n = network.n
        self._attackers = torch.as_tensor(adversary.nodes, device=setup.device)
        self._eavesdropper = adversary.eavesdropper
        if protocol.name == "dsgd":
            self._bind_groups(network.W, adversary)
        else:
            self._bind_clients(setup)
        self._p = setup.model.p

    def _bind_groups(self, W, adversary) -> None:
        coo = W.tocoo()
        order = np.lexsort((coo.col, coo.row))
        dev = self._device
        group = torch.as_tensor(coo.row[order], dtype=torch.int64, device=dev)
        member = torch.as_tensor(coo.col[order], dtype=torch.int64, device=dev)
        self._weights = torch.as_tensor(coo.data[order], dtype=torch.float64, device=dev)
        self._groups = Groups.from_slots(group, member, self._n)
        sizes = self._groups.sizes()
        smallest = int(sizes.min())
        if self.threshold > smallest:
            node = int(sizes.argmin())
            raise bad_value(
                "defense.threshold",
                self.threshold,
                f"node {node} aggregates only {smallest} members (itself and its neighbours), so it could "
                "never reveal its aggregate",
                f"use defense.threshold <= {smallest} or a denser topology",
            )
        self._ring = Ring.for_sums(int(sizes.max()), self.precision)
        self._claimed = torch.zeros(len(group), dtype=torch.bool, device=dev)
        pair = adversary.sybils
        if pair is not None and pair.dropout:
            self._claimed |= (group == pair.b) & (member == pair.victim)
            survivors = int(sizes[pair.b]) - 1
            if not self.fault_tolerant or survivors < self.threshold:
                raise bad_value(
                    "defense.fault_tolerant" if not self.fault_tolerant else "defense.threshold",
                    self.fault_tolerant if not self.fault_tolerant else self.threshold,
                    "on a complete graph the Sybil b must claim the victim dropped out of its aggregation, "
                    "which needs fault-tolerant secure aggregation with a threshold the survivors meet",
                    f"set defense.fault_tolerant=true and defense.threshold <= {survivors}",
                )
        corrupt = torch.isin(group, self._attackers)
        seen = corrupt | (self._eavesdropper & (group != member))
        self._seen = torch.nonzero(seen).flatten()
        self._seen_plain = torch.isin(member[self._seen], self._attackers)

    def _bind_clients(self, setup: Built) -> None:
        from decpriv.protocols.fedavg import client_nodes

        if setup.adversary.sybils is not None:
            raise bad_value(
                "adversary.sybils",
                setup.adversary.sybils.victim,
                "Sybil evasion is simulated for D-SGD aggregation groups only",
                "use protocol=dsgd or adversary.sybils=null",
            )
        clients = len(client_nodes(setup.network))
        per_round = max(1, round(setup.protocol.client_fraction * clients))
        if self.threshold > per_round:
            raise bad_value(
                "defense.threshold",
                self.threshold,
                f"only {per_round} clients take part in a round",
                f"use defense.threshold <= {per_round} or a larger protocol.client_fraction",
            )
        self._ring = Ring.for_sums(per_round, self.precision)

    def _arrivals(self, member: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """(S,) which messages reach their aggregator: a node's own always; others unless it dropped out."""
        if self.dropout == 0:
            return torch.ones(len(member), dtype=torch.bool, device=member.device)
        dropped = rng.uniform(self._n, self._drops, member.device) < self.dropout
        return ~dropped[member] | own

    def _secure_sum(
        self, groups: Groups, contributions: torch.Tensor, arrived: torch.Tensor, wire: torch.Tensor
    ) -> MaskedSum:
        """``wire``: the slots whose message crosses the network (not a node's share of its own group)."""
        encoded = self._ring.encode(contributions)
        out = pairwise_masked_sum(
            self._ring, groups, encoded, arrived, self._masks, self.threshold, self.fault_tolerant
        )
        cost = self._cost
        cost["messages"] += int((arrived & wire).sum())
        cost["pair_masks"] += len(groups.pairs)
        cost["aggregations"] += groups.count
        cost["aborted"] += int((~out.ok).sum())
        return out

    def exchange(
        self, W: torch.Tensor, messages: torch.Tensor, recorder: "Recorder", round_: int, step: int
    ) -> torch.Tensor:
        g = self._groups
        x = messages.to(torch.float64)
        arrived = self._arrivals(g.member, g.group == g.member) & ~self._claimed
        out = self._secure_sum(g, self._weights[:, None] * x[g.member], arrived, g.group != g.member)
        weight = torch.zeros(self._n, dtype=torch.float64, device=x.device)
        weight = weight.index_add_(0, g.group, torch.where(arrived, self._weights, 0.0))
        sums = torch.where(out.ok[:, None], self._ring.decode(out.sums), torch.nan)
        mixed = torch.where(out.ok[:, None], sums / weight[:, None], x)
        if recorder.enabled:
            if round_ == 0 and step == 0:
                recorder.per_receiver(g.member[self._seen].cpu().numpy(), g.group[self._seen].cpu().numpy())
            seen = self._seen
            values = torch.where(arrived[seen, None], self._ring.decode(out.masked[seen]), torch.nan)
            values = torch.where(self._seen_plain[:, None], x[g.member[seen]], values)
            recorder.record(round_, step, values.to(messages.dtype))
            recorder.record_hidden(sums[self._attackers].to(messages.dtype), messages)
        self._cost["rounds"] += 1
        return mixed.to(messages.dtype)

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        order = torch.sort(chosen).values
        groups = Groups.from_slots(torch.zeros_like(order), order, 1)
        w = weights[order].to(torch.float64)
        w = w / w.sum()
        arrived = self._arrivals(order, torch.zeros_like(order, dtype=torch.bool))
        out = self._secure_sum(groups, w[:, None] * updates[order].to(torch.float64), arrived, arrived)
        total = self._ring.decode(out.sums[0]) / w[arrived].sum()
        result = total.to(held.dtype) if bool(out.ok[0]) else held
        if recorder.enabled:
            values = held.expand(len(updates), -1).clone()
            masked = torch.where(arrived[:, None], self._ring.decode(out.masked), torch.nan)
            values[order] = masked.to(values.dtype)
            corrupt = self._attackers[torch.isin(self._attackers, order)]
            values[corrupt] = updates[corrupt]
            recorder.record(round_, 0, values)
            aggregate = total if bool(out.ok[0]) else torch.full_like(total, torch.nan)
            recorder.record_hidden(aggregate[None].to(held.dtype), sent_to_server(updates, order, held))
        self._cost["rounds"] += 1
        return result

    def summary(self) -> dict[str, Any]:
        cost, rounds = self._cost, max(self._cost["rounds"], 1)
        bits = self._ring.bits if self._ring else 0
        messages = cost["messages"] / rounds
        return {
            "sa_threshold": self.threshold,
            "sa_fault_tolerant": self.fault_tolerant,
            "sa_dropout": self.dropout,
            "sa_ring_bits": bits,
            "sa_precision_bits": self.precision,
            "sa_messages_per_round": messages,
            "sa_bytes_per_round": messages * self._p * bits / 8,
            "sa_pair_masks_per_round": cost["pair_masks"] / rounds,
            "sa_aborted_aggregations": cost["aborted"],
        }
