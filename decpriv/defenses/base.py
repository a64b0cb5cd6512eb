"""The defense interface protocols call. ``none`` is the identity.

A defense describes what it adds (:class:`Mechanism`) and names the accountant option that accounts it;
accountants read that description and never import a defense, so the two packages do not import each other.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from decpriv.data.sampling import Sampler, sampler_of
from decpriv.models.functional import FunctionalModel

if TYPE_CHECKING:
    from decpriv.adversary.adversary import Adversary
    from decpriv.adversary.recorder import Recorder
    from decpriv.graphs.network import Network
    from decpriv.random.streams import Seeds


@dataclass(frozen=True)
class Mechanism:
    """The noise a defense adds, as accountants read it.

    ``on``: ``"gradients"`` (every local gradient step) or ``"values"`` (once, on the value then gossiped,
    Muffliato). ``sigma`` is the noise multiplier (std / ``clip``), None until an accountant calibrates it for
    ``target``. ``level``: ``"example"`` (per-example clipping, DP-SGD) or
    ``"user"`` (the node's whole gradient clipped). ``sampler``: how each step's batch is drawn
    (:mod:`decpriv.data.sampling`: ``poisson`` or ``fixed``; with no batch size the whole set).
    ``central``: nodes combine by the exact average, the per-node std being divided by sqrt(n).
    ``correlated``: pairwise-cancelling noise is added on top (DECOR).
    """

    on: str
    clip: float
    sigma: float | None
    level: str = "user"
    central: bool = False
    correlated: bool = False
    target: float | None = None
    sampler: str = "fixed"

    @property
    def at_level(self) -> str:
        """`` at the example level`` where the noise protects examples, else nothing: for refusals."""
        return " at the example level" if self.level == "example" else ""

    @property
    def locally_private(self) -> bool:
        """Every message carries its own Gaussian noise on a clipped release that one user's data (user
        level) or one example (example level: the clipped sum) moves by at most 2C: the user level's
        analysis bounds both, amplification by subsampling left unclaimed."""
        return self.on == "gradients" and not self.central and not self.correlated

    @property
    def local_gaussian(self) -> bool:
        """Plain user-level LDP noise on each gradient: every message is private on its own."""
        return self.on == "gradients" and self.level == "user" and not self.central and not self.correlated


class Built(Protocol):
    """What :meth:`Defense.bind` may read from the built experiment (``decpriv.built.Setup`` has it)."""

    network: "Network"
    adversary: "Adversary"
    protocol: Any
    model: FunctionalModel
    seeds: "Seeds"
    device: torch.device


def sent_to_server(updates: torch.Tensor, chosen: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
    """(n, p) what each node sends the FedAvg server in a round: its update when chosen, else the global
    model ``held`` it holds."""
    sending = torch.zeros(len(updates), dtype=torch.bool, device=updates.device)
    sending[chosen] = True
    return torch.where(sending[:, None], updates, held)


class Defense:
    """No defense: exact local gradients, messages sent as they are.

    Subclasses override :meth:`gradients` (clipping, noise: DP-SGD, LDP, DECOR), :meth:`messages`
    (noise or quantisation on what is sent: Muffliato, quantised PDMM) and/or :meth:`aggregate`.
    """

    name = "none"
    accountant: str | None = None  # the ``accountant`` option used when none is set (conf/accountant/<name>)
    own_aggregation = False  # replaces the plain gossip average W x (robust rules, the CDP baseline)
    hides_updates = False  # no single node sees an individual update (secure aggregation)
    robust = (
        False  # aggregates each received message itself (receive(W, x, forgery)): forgeries reach the rule
    )
    batch_sampler = "fixed"  # how protocols draw this defense's batches (decpriv.data.sampling)

    def bind(self, setup: Built) -> None:
        """Take what the defense needs from the built setup (edges, random streams) before the run."""

    def sampler(self, size: int | None) -> Sampler:
        """The sampler protocols draw each local step's batch of ``size`` with."""
        return sampler_of(self.batch_sampler, size)

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
        recorder.record(round_, 0, sent_to_server(updates, chosen, held))
        w = weights[chosen]
        return (w[:, None] * updates[chosen]).sum(0) / w.sum()

    def mechanism(self) -> Mechanism | None:
        """The noise this defense adds, for accountants (None: nothing to account)."""
        return None

    def summary(self) -> dict[str, Any]:
        """Headline facts for summary.csv (noise levels, clipping...)."""
        return {}

    def repeatable_within(self) -> dict[str, Any] | None:
        """How closely two runs of the same config agree when this defense draws noise the seed does not
        fix (run.json's ``repeatable_within``, read by ``decpriv diff``); None: the seed repeats the run."""
        return None
