"""What a protocol receives (:class:`Simulation`) and returns (:class:`Outcome`)."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

import pandas as pd
import torch
from rich.progress import Progress

from decpriv.adversary.adversary import Adversary
from decpriv.adversary.behaviour import Behaviour
from decpriv.adversary.recorder import Recorder
from decpriv.config.types import Range
from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.defenses.base import Defense
from decpriv.errors import Diverged, bad_value
from decpriv.graphs.network import Network
from decpriv.models.functional import FunctionalModel
from decpriv.random.streams import Seeds


@dataclass(eq=False)
class Simulation:
    network: Network
    dataset: Dataset
    local: LocalData  # on ``device``
    model: FunctionalModel
    defense: Defense
    adversary: Adversary
    recorder: Recorder
    seeds: Seeds
    device: torch.device
    behaviour: Behaviour | None = None  # an active attack's message forgery, if any
    show_progress: bool = False

    def guard(self, round_: int, tensor: torch.Tensor, what: str = "the node parameters") -> None:
        """Stop the run (:class:`Diverged`, status failed with the round) when ``tensor`` holds a nan or inf:
        a diverged run must not complete with NaN metrics."""
        if not bool(torch.isfinite(tensor).all()):
            raise Diverged(round_, what)

    def progress(self, total: int, label: str):
        """Iterate ``range(total)`` with a rich progress bar when attached to a terminal."""
        if not self.show_progress:
            yield from range(total)
            return
        with Progress(transient=True) as bar:
            task = bar.add_task(label, total=total)
            for t in range(total):
                yield t
                bar.advance(task)


@dataclass(eq=False)
class Outcome:
    history: pd.DataFrame  # one row per evaluated round
    final: torch.Tensor  # (n, p) final node states
    summary: dict[str, Any]  # headline metrics for summary.csv
    truth: dict[str, Any] = field(default_factory=dict)  # protocol-specific ground truth (scoring only)
    public: dict[str, Any] = field(default_factory=dict)  # facts the adversary legitimately knows

    def cpu(self) -> "Outcome":
        """The outcome with every tensor on the CPU: what crosses into the attack's process and scoring is
        on the CPU whatever device simulated (docs/simulation.md, "Same numbers on any device")."""
        return replace(self, final=self.final.cpu(), truth=on_cpu(self.truth), public=on_cpu(self.public))


def on_cpu(value: Any) -> Any:
    """``value`` with each tensor inside (dicts, lists, tuples) moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_cpu(v) for v in value)
    return value


class Protocol(ABC):
    """Base class: ``rounds`` communication rounds; ``hyper()`` is what the protocol declares publicly."""

    name = "protocol"
    rounds: int
    recorder_kind = "broadcast"  # or "edges" for per-edge messages (PDMM)
    reduction = "mean"  # how f_i combines local samples when model.reduction is null
    # What every participant knows (the attacks' view); simulator settings (dtype, eval_every, solver
    # tolerances) stay out, so an attack cannot come to depend on them.
    public: tuple[str, ...] = ("rounds",)
    # What the pairwise network-DP accountants need, declared rather than read off the name: where fresh
    # noise enters before gossip ("values": once, on the initial values; "gradients": every round) and
    # whether one token walks the graph instead.
    noised: str | None = None
    walks = False

    def hyper(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.public}

    def gossip_schedule(self) -> tuple[int, int, bool] | None:
        """(gossip steps K after each noise draw, number of draws T, accelerated); None for a protocol that
        does not gossip noised values (``noised`` unset), which the network-DP accountants refuse."""
        return None

    def fit(self, counts: torch.Tensor) -> None:
        """Settle the sizes that follow the data before anything reads them (attacks and accountants read
        ``hyper()``): ``batch_size=auto`` becomes min(16, the smallest local set), so a graph with more
        nodes, hence smaller local sets, still runs; ``counts`` are the local sets' sizes."""
        if getattr(self, "batch_size", None) == "auto":
            self.batch_size = min(AUTO_BATCH, int(counts.min()))

    def check(self, network: Network, dataset: Dataset, model: FunctionalModel) -> None:
        """Refuse inputs this protocol cannot run on (raise ConfigError). Called before any computation."""

    @abstractmethod
    def run(self, sim: Simulation) -> Outcome:
        """All rounds over all nodes at once; what the adversary sees goes through ``sim.recorder``."""


MAX_COUNT = 10_000_000  # rounds, steps: 10^7 rounds of the smallest run already take hours

# What protocols' keys accept (decpriv.config.types): declared once, checked before any build.
Count = Annotated[int, Range(ge=1, le=MAX_COUNT, what="a count of rounds or steps")]
EvalEvery = Annotated[int, Range(ge=1, le=MAX_COUNT, what="the evaluation interval (rounds)")] | None
LearningRate = Annotated[float, Range(gt=0, what="the learning rate", eg=0.1)]
AUTO_BATCH = 16  # batch_size=auto: this many samples, or the smallest local set when it holds fewer
BatchSize = (
    Annotated[int, Range(ge=1, what="a batch size (auto: min(16, the smallest local set); null: all)", eg=16)]
    | Literal["auto"]
    | None
)
Precision = Literal["float32", "float64"]


def check_average_last(average_last: int | None, rounds: int) -> None:
    if average_last is not None and not 1 <= average_last <= rounds:
        raise bad_value(
            "protocol.average_last",
            average_last,
            f"the window must lie within the {rounds} rounds",
            f"use 1..{rounds} or null (last round only)",
        )


def eval_rounds(rounds: int, every: int | None, points: int = 25) -> set[int]:
    """Rounds at which metrics are computed: round 0, every ``every`` rounds (default ~``points`` times), last."""
    step = every or max(1, rounds // points)
    return set(range(0, rounds + 1, step)) | {rounds}
