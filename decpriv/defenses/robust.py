"""Byzantine-robust aggregation as defenses: each node combines the messages it received from its closed
neighbourhood with a robust rule (:mod:`decpriv.defenses.robust_rules`) instead of the gossip average
W x, on blocks of receivers grouped by neighbourhood size (:mod:`decpriv.defenses.neighbourhoods`: memory
by edges, no loop over nodes); an active
attack's forged messages reach the rule on their own edges (:meth:`RobustAggregation.receive`). Under
FedAvg/FedSGD the server aggregates the round's updates with the rule (:meth:`RobustAggregation.federate`).

Each rule tolerates at most so many Byzantine senders in a neighbourhood of m (:meth:`tolerated`); a run
whose adversary puts more beside an honest node is refused before it starts, as is Krum on a node with
m <= 2f + 2 senders (Blanchard et al. 2017, Prop. 1). The composition with privacy defenses is decided by
the single ``defense`` slot: a robust rule needs every individual message, which secure aggregation and
homomorphic encryption hide (docs/poisoning.md).
"""

import bisect
from abc import abstractmethod
from typing import TYPE_CHECKING, Annotated

import numpy as np
import scipy.sparse as sp
import torch

from decpriv.adversary.behaviour import Forgery
from decpriv.config.types import Range, checked
from decpriv.defenses import robust_rules as rules
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.defenses.neighbourhoods import Inbox, Neighbourhoods
from decpriv.errors import bad_value

FEDERATED = ("fedavg", "fedsgd")
if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder

MEMORY_BOUND = 4 << 30  # bytes one robust step may hold for the widest neighbourhood (docs/poisoning.md)

Tolerance = Annotated[int, Range(ge=0, what="the Byzantine senders each node tolerates", eg=1)]


def neighbourhood_sizes(W: sp.csr_array) -> np.ndarray:
    """(n,) the senders each node hears: the support of its row of W, itself included."""
    return np.diff(W.indptr) + (W.diagonal() == 0)


def byzantine_neighbours(W: sp.csr_array, byzantine: np.ndarray) -> np.ndarray:
    """(n,) how many Byzantine senders each node hears (among the support of its row of W)."""
    support = (W != 0).astype(np.int64)
    return np.asarray(support[:, byzantine].sum(axis=1)).ravel()


class RobustAggregation(Defense):
    """A robust rule on each node's received messages; subclasses define :meth:`rule` and :meth:`tolerated`."""

    own_aggregation = True
    robust = True

    def __init__(self):
        self._hood: tuple[tuple, Inbox] | None = None
        self.federated = False

    def bind(self, setup: Built) -> None:
        protocol = setup.protocol.name
        if protocol not in ("dsgd", *FEDERATED):
            raise bad_value(
                "defense",
                self.name,
                f"a robust aggregation rule replaces the average of D-SGD or of a FedAvg server, which "
                f"protocol={protocol} does not compute",
                "use protocol=dsgd, fedavg or fedsgd",
            )
        self.federated = protocol in FEDERATED
        if self.federated:  # the server's one neighbourhood: the clients of a round
            sizes = np.array([setup.protocol.clients_per_round(setup.network)])
        else:
            sizes = neighbourhood_sizes(setup.network.W)
        self.check_graph(sizes)
        itemsize = getattr(torch, getattr(setup.protocol, "dtype", "float32")).itemsize
        self.check_memory(int(sizes.max()), setup.model.p, itemsize)

    def working_bytes(self, m: int, p: int, itemsize: int) -> int:
        """What one step holds for a neighbourhood of m senders: the gathered (m, p) messages and the
        sorting network's copies of them."""
        return 4 * m * p * itemsize

    def check_memory(self, widest: int, p: int, itemsize: int) -> None:
        """Refuse a graph whose widest neighbourhood alone needs more than :data:`MEMORY_BOUND` (the rest
        is held by edges, in blocks of a few MB: docs/poisoning.md)."""
        if self.working_bytes(widest, p, itemsize) <= MEMORY_BOUND:
            return
        fits = bisect.bisect_right(
            range(1, widest + 1), MEMORY_BOUND, key=lambda m: self.working_bytes(m, p, itemsize)
        )
        raise bad_value(
            "defense",
            self.name,
            f"a node hears {widest} senders, and one {self.name} step on its neighbourhood of p={p} "
            f"parameters would hold {self.working_bytes(widest, p, itemsize) / 2**30:.1f} GB, over decpriv's "
            f"bound of {MEMORY_BOUND / 2**30:.0f} GB for one neighbourhood",
            f"use a graph whose nodes hear at most {fits} senders (topology), a smaller model, or "
            "defense=none",
        )

    def check_graph(self, sizes: np.ndarray) -> None:
        """Refuse a graph on which the rule is undefined (Krum: too small a neighbourhood)."""

    @abstractmethod
    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        """(n,) the most Byzantine senders the rule tolerates in a neighbourhood of each size."""

    def check_byzantine(self, W: sp.csr_array, byzantine: np.ndarray) -> None:
        """Refuse an adversary that puts more Byzantine senders beside an honest node than it tolerates
        (D-SGD's gossip graph; the poisoning attacks refuse FedAvg themselves)."""
        if self.federated:
            return
        sizes, count = neighbourhood_sizes(W), byzantine_neighbours(W, byzantine)
        limit = self.tolerated(sizes)
        honest = np.setdiff1d(np.arange(len(sizes)), byzantine)
        over = honest[count[honest] > limit[honest]]
        if over.size:
            v = int(over[0])
            raise bad_value(
                "adversary.nodes",
                byzantine.tolist(),
                f"honest node {v} hears {int(count[v])} Byzantine of its {int(sizes[v])} senders, more than "
                f"defense={self.name} tolerates ({int(limit[v])})",
                "corrupt fewer nodes (adversary.count, adversary.nodes), use a denser graph, or raise the "
                "rule's tolerance",
            )

    def neighbourhoods(self, W: torch.Tensor) -> Inbox:
        """The neighbourhoods of W, built once per run (W is the same tensor every round)."""
        key = (W.data_ptr() if W.layout == torch.strided else W.values().data_ptr(), W.shape, W.device)
        if self._hood is None or self._hood[0] != key:
            self._hood = (key, Inbox.of(W))
        return self._hood[1]

    def aggregate(self, W: torch.Tensor, messages: torch.Tensor) -> torch.Tensor:
        return self.receive(W, messages, None)

    def receive(self, W: torch.Tensor, messages: torch.Tensor, forgery: Forgery | None) -> torch.Tensor:
        out = torch.empty_like(messages)
        for block, x in self.neighbourhoods(W).blocks(messages, forgery):
            out[block.nodes] = self.rule(x, block, messages[block.nodes])
        return out

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        """The FedAvg server's round by the rule: one neighbourhood, the chosen clients' updates, weighted
        by local set size where the rule weighs (clipped gossip), centred on the global model ``held``
        (centred clipping's previous aggregate, Karimireddy et al. 2021)."""
        recorder.record(round_, 0, sent_to_server(updates, chosen, held))
        w = weights[chosen].to(updates.dtype)
        server = Neighbourhoods(
            nodes=torch.zeros(1, dtype=torch.long, device=updates.device),
            index=chosen[None],
            valid=torch.ones(1, len(chosen), dtype=torch.bool, device=updates.device),
            weight=(w / w.sum())[None],
            size=torch.tensor([len(chosen)], device=updates.device),
        )
        return self.rule(updates[chosen][None], server, held[None])[0]

    @abstractmethod
    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        """(n, p) aggregates of the (n, M, p) received messages; ``own`` each node's own message."""

    def __getstate__(self):
        return {**self.__dict__, "_hood": None}


def minority(sizes: np.ndarray) -> np.ndarray:
    """A rule that keeps the majority's value tolerates fewer than half the senders."""
    return (sizes - 1) // 2


@checked("defense")
class CoordinateMedian(RobustAggregation):
    name = "median"

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return minority(sizes)

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        return rules.median(x, hood.valid)


@checked("defense")
class TrimmedMean(RobustAggregation):
    name = "trimmed_mean"

    def __init__(
        self,
        fraction: Annotated[
            float, Range(ge=0, lt=0.5, what="the fraction trimmed from each side", eg=0.2)
        ] = 0.2,
    ):
        super().__init__()
        self.fraction = fraction

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return np.floor(self.fraction * sizes).astype(np.int64)

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        trim = torch.floor(self.fraction * hood.size.to(torch.float64)).long()
        return rules.trimmed_mean(x, hood.valid, trim)

    def summary(self) -> dict[str, float]:
        return {"trimmed_fraction": self.fraction}


@checked("defense")
class Krum(RobustAggregation):
    name = "krum"
    multi = False

    def __init__(self, f: Tolerance = 1):
        super().__init__()
        self.f = f

    def check_graph(self, sizes: np.ndarray) -> None:
        small = np.flatnonzero(sizes <= 2 * self.f + 2)
        if small.size:
            v = int(small[0])
            who = "the server hears" if self.federated else f"node {v} hears"
            raise bad_value(
                "defense.f",
                self.f,
                f"Krum needs more than 2f + 2 senders, and {who} {int(sizes[v])}",
                f"use defense.f <= {max((int(sizes.min()) - 3) // 2, 0)} or a denser graph",
            )

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return np.full(len(sizes), self.f)

    def working_bytes(self, m: int, p: int, itemsize: int) -> int:
        """The m x m distances, sorted (values and int64 indices), beside the messages."""
        return super().working_bytes(m, p, itemsize) + m * m * (2 * itemsize + 8)

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        return (rules.multi_krum if self.multi else rules.krum)(x, hood.valid, self.f)

    def summary(self) -> dict[str, float]:
        return {"krum_f": self.f}


@checked("defense")
class MultiKrum(Krum):
    name = "multi_krum"
    multi = True


@checked("defense")
class CentredClipping(RobustAggregation):
    name = "centred_clipping"

    def __init__(
        self,
        tau: Annotated[float, Range(gt=0, what="the clipping radius", eg=1.0)] = 1.0,
        iterations: Annotated[int, Range(ge=1, what="the clipping iterations L", eg=1)] = 1,
    ):
        super().__init__()
        self.tau, self.iterations = tau, iterations

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return minority(sizes)

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        # each node's own model is its centre: the previous aggregate, moved by its own local step
        return rules.centred_clipping(x, hood.valid, own, self.tau, self.iterations)

    def summary(self) -> dict[str, float]:
        return {"clipping_tau": self.tau, "clipping_iterations": self.iterations}


@checked("defense")
class ClippedGossip(RobustAggregation):
    name = "clipped_gossip"

    def __init__(
        self,
        delta: Annotated[
            float, Range(gt=0, lt=1, what="the Byzantine weight each node assumes", eg=0.33)
        ] = 0.33,
        tau: Annotated[float, Range(gt=0, what="a fixed clipping radius", eg=1.0)] | None = None,
    ):
        super().__init__()
        self.delta, self.tau = delta, tau

    def tolerated(self, sizes: np.ndarray) -> np.ndarray:
        return minority(sizes)

    def rule(self, x: torch.Tensor, hood: Neighbourhoods, own: torch.Tensor) -> torch.Tensor:
        w = hood.weight.to(x.dtype)
        tau = self.tau if self.tau is not None else rules.adaptive_radius(x, w, own, self.delta)
        return rules.clipped_gossip(x, w, own, tau)

    def summary(self) -> dict[str, object]:
        return {
            "clipping_delta": self.delta,
            "clipping_tau": self.tau if self.tau is not None else "adaptive",
        }
