"""The defense interface protocols call. ``none`` is the identity."""

from typing import TYPE_CHECKING, Any

import torch

from decpriv.models.functional import FunctionalModel

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder
    from decpriv.privacy.base import Accountant
    from decpriv.setup import Setup


class Defense:
    """No defense: exact local gradients, messages sent as they are.

    Subclasses override :meth:`gradients` (clipping, noise: DP-SGD, LDP, DECOR), :meth:`messages`
    (noise or quantisation on what is sent: Muffliato, quantised PDMM) and/or :meth:`aggregate`.
    """

    name = "none"

    def bind(self, setup: "Setup") -> None:
        """Take what the defense needs from the built setup (edges, random streams) before the run."""

    def gradients(
        self,
        model: FunctionalModel,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        round_: int,
        generator: torch.Generator,
    ) -> torch.Tensor:
        return model.node_gradients(theta, x, y, weight)

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        return values

    def aggregate(self, W: torch.Tensor, messages: torch.Tensor) -> torch.Tensor:
        """How a node combines what it received: plain gossip W @ messages by default (robust rules such
        as self-centred clipping override it)."""
        return W @ messages

    def exchange(
        self, W: torch.Tensor, messages: torch.Tensor, recorder: "Recorder", round_: int, step: int
    ) -> torch.Tensor:
        """One gossip step as it crosses the wire: the adversary records the broadcast messages, each node
        combines what it received with :meth:`aggregate` (secure aggregation masks per receiver instead)."""
        recorder.record(round_, step, messages)
        return self.aggregate(W, messages)

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        """A FedAvg server round: the adversary records each chosen client's update (the global model
        ``held`` for the others); returns the mean of the chosen updates weighted by ``weights``."""
        sending = torch.zeros(len(updates), dtype=torch.bool, device=updates.device)
        sending[chosen] = True
        recorder.record(round_, 0, torch.where(sending[:, None], updates, held))
        w = weights[chosen]
        return (w[:, None] * updates[chosen]).sum(0) / w.sum()

    def accountant(self) -> "Accountant | None":
        """The accountant used when ``accountant`` is not set (none for an undefended run)."""
        return None

    def summary(self) -> dict[str, Any]:
        """Headline facts for summary.csv (noise levels, clipping...)."""
        return {}
