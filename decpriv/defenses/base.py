"""The defense interface protocols call. ``none`` is the identity."""

from typing import TYPE_CHECKING, Any

import torch

from decpriv.models.functional import FunctionalModel

if TYPE_CHECKING:
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

    def accountant(self) -> "Accountant | None":
        """The accountant used when ``accountant`` is not set (none for an undefended run)."""
        return None

    def summary(self) -> dict[str, Any]:
        """Headline facts for summary.csv (noise levels, clipping...)."""
        return {}
