"""Gradient inversion by a server: the centralised baseline of every decentralized attack.

The server (``adversary.eavesdropper=true``, or the centre of a star) reads each client's gradient of
round ``attack.round`` (0: the first) off what it receives (:data:`LEAKS`) and inverts it with :func:`decpriv.attacks.inversion.invert`:

- FedSGD / FedAvg with one full-batch step: the client's model after one step from the broadcast w^t, so
  the gradient at w^t is (w^t - w_i^{t+1/2}) / lr; w^t is the server's own average of round t - 1;
- centralized PDMM (Yu 2023, Sec. 5.1.1): z_{i|s}^1 and z_{s|i}^0 give w_i^1 = (z_{i|s}^1 + z_{s|i}^0) / 2
  and, by the client's optimality condition, grad f_i(w_i^1) = -rho (z_{i|s}^1 - z_{s|i}^0) / 2.

The inversions:

- ``dlg``: Zhu et al. 2019 (Deep Leakage from Gradients): L2 gradient matching, L-BFGS, soft dummy labels
  optimised jointly with the input.
- ``idlg``: Zhao et al. 2020: DLG with the label read off the last layer's gradient.
- ``inverting_gradients``: Geiping et al. 2020: cosine matching + total variation, signed Adam with step
  decay, box constraint to the data range, restarts keeping the best; labels inferred.

``span=true`` optimises each input in the span of the first layer's weight gradient rows (B coordinates
an input instead of d pixels; :func:`decpriv.attacks.inversion.analytic.input_span`), as diffgrad does.
With one sample per client and a fully connected first layer, ``analytic=true`` reads x off the gradient
in closed form instead (x = dW/db, Phong et al. 2017; Yu 2023's FedSGD baseline for logistic regression,
:mod:`decpriv.attacks.inversion.analytic`); it is exact and needs no label.
"""

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import numpy as np
import torch

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.inversion import Inversion, InversionConfig, invert
from decpriv.attacks.inversion.analytic import analytic_inputs, first_layer_on_input, input_span
from decpriv.attacks.inversion.scoring import (
    RECOVERY_HEADLINE,
    Batches,
    fixed_victims,
    image_summary,
    reconstruction_grid,
    score_batches,
    undefined_words,
)
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.protocols.fedavg import client_nodes
from decpriv.protocols.pdmm_centralized import star_server
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth


def fedsgd_leak(view: View, client: int, round_: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(point, gradient) of a FedSGD client at round ``round_``: one full-batch step of size lr from the
    global model w^t, which the server holds: w^0 it drew, later ones the n_i-weighted mean of the
    clients' previous updates it received (every client takes part: ``client_fraction=1``)."""
    times = view.transcript.times[:, 0]
    point = view.public["initial_model"].detach().cpu()
    if round_ > 0:
        previous = int(np.flatnonzero(times == round_ - 1)[0])
        clients = view.plan.clients
        sent = view.transcript.values[previous][
            torch.as_tensor(view.transcript.columns(clients, -np.ones_like(clients)))
        ]
        sizes = torch.as_tensor(view.plan.sizes, dtype=point.dtype)[:, None]
        point = (sizes * sent.to(point.dtype)).sum(0) / sizes.sum()
    row = int(np.flatnonzero(times == round_)[0])
    sent = view.transcript.sent_by(client)[row].to(point.dtype)
    return point, (point - sent) / float(view.hyper["lr"])


def encrypted(view: View, clients: np.ndarray, round_: int) -> bool:
    """Whether the server holds only ciphertexts of these clients' updates of ``round_`` (homomorphic
    encryption without a key-holding corrupt client)."""
    marked = view.transcript.encrypted
    if marked is None:
        return False
    row = int(np.flatnonzero(view.transcript.times[:, 0] == round_)[0])
    columns = view.transcript.columns(clients, -np.ones_like(clients))
    return bool(marked[row, torch.as_tensor(columns)].any())


def pdmm_centralized_leak(view: View, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_i^1, grad f_i(w_i^1)) from round 1's z_{s|i}^0 and z_{i|s}^1 (Yu 2023, Eq. 5.1)."""
    server = star_server(view.network)
    first = int(np.flatnonzero(view.transcript.times[:, 0] == 1)[0])
    up = view.transcript.sent_by(client, server)[first]
    down = view.transcript.sent_by(server, client)[first]
    return (up + down) / 2, -float(view.hyper["rho"]) * (up - down) / 2


LEAKS = {"fedsgd": fedsgd_leak, "fedavg": fedsgd_leak, "pdmm_centralized": pdmm_centralized_leak}


def check_server_view(protocol: Any, round_: int) -> None:
    """Refuse a protocol whose messages do not carry one client gradient of round ``round_``."""
    if protocol.name not in LEAKS:
        raise bad_value(
            "protocol",
            protocol.name,
            "this attack reads a server's view of FedSGD, FedAvg or centralized PDMM",
            "use protocol=fedsgd or protocol=pdmm_centralized topology=star",
        )
    if protocol.name == "fedavg" and not (protocol.batch_size is None and protocol.local_steps == 1):
        raise bad_value(
            "protocol",
            "fedavg",
            "a client update is a single gradient only with one full-batch local step",
            "use protocol=fedsgd, or protocol.batch_size=null protocol.local_steps=1 protocol.local_epochs=null",
        )
    if round_ >= protocol.rounds:
        raise bad_value(
            "attack.round",
            round_,
            f"the run has rounds 0..{protocol.rounds - 1}",
            f"use attack.round <= {protocol.rounds - 1} or raise protocol.rounds",
        )
    if round_ > 0 and protocol.name == "pdmm_centralized":
        raise bad_value(
            "attack.round",
            round_,
            "centralized PDMM's gradient is read off round 1's messages only",
            "use attack.round=0",
        )
    if getattr(protocol, "client_fraction", 1.0) < 1:
        # a client left out of a round sends back the global model: its "gradient" would read as zero
        raise bad_value(
            "protocol.client_fraction",
            protocol.client_fraction,
            "the server rebuilds w^t from every client's update and reads the victims' own, so every client must take part",
            "use protocol.client_fraction=1.0",
        )
    if getattr(protocol, "local_epochs", None) is not None:
        raise bad_value(
            "protocol.local_epochs", protocol.local_epochs, "more than one local step", "set it to null"
        )


@dataclass(frozen=True, eq=False)
class ServerPlan:
    batch_size: int  # how many samples each client's gradient sums or averages
    protocol: str  # whose messages the gradient is read from (a key of LEAKS)
    clients: np.ndarray  # every client (FedSGD: the server averages their updates into the next w^t)
    sizes: np.ndarray  # their local set sizes, the weights of that average (FedAvg's server knows them)


@dataclass(frozen=True, eq=False)
class Reconstructions:
    victims: np.ndarray
    inversions: list[Inversion]
    encrypted: bool = False  # the server holds only ciphertexts of the victims' updates: nothing inverted


@checked("attack")
class GradientInversion(Attack):
    """Invert the gradient of round ``round`` of ``victims`` clients (the lowest-indexed ones) on the server."""

    name = "gradient_inversion"
    headline = (*RECOVERY_HEADLINE, Headline("attack_l2_error", None, "lower"))

    def __init__(
        self,
        victims: Annotated[int, Range(ge=1, what="the number of attacked clients")] = 1,
        round: Annotated[int, Range(ge=0, what="the attacked round (from 0)", eg=0)] = 0,
        batch_size: Annotated[int, Range(ge=1, what="a client's batch size (null: its set size)")]
        | None = None,
        analytic: bool = False,
        span: bool = False,
        cost: str = "l2",
        optimiser: str = "lbfgs",
        iterations: int = 100,
        lr: float = 1.0,
        lr_decay: bool = True,
        restarts: int = 1,
        init: str = "randn",
        tv: float = 0.0,
        box: bool = False,
        signed: bool = False,
        labels: str = "infer",
        max_label_candidates: int = 100,
    ):
        self.victims, self.round, self.batch_size = victims, round, batch_size
        self.analytic, self.span = analytic, span
        self.config = InversionConfig(
            cost=cost,
            optimiser=optimiser,
            iterations=iterations,
            lr=lr,
            lr_decay=lr_decay,
            restarts=restarts,
            init=init,
            tv=tv,
            box=box,
            signed=signed,
            labels=labels,
            max_label_candidates=max_label_candidates,
        )

    def prepare(self, context: AttackContext) -> ServerPlan:
        """Plan: the batch size behind each client's gradient (``attack.batch_size`` or their common set
        size) and the protocol whose messages carry it."""
        protocol = context.protocol
        check_server_view(protocol, self.round)
        if not context.adversary.eavesdropper:
            raise bad_value(
                "adversary.eavesdropper", False, "the server must see every client's update", "set it to true"
            )
        clients = client_nodes(context.network)
        if self.victims > len(clients):
            raise bad_value(
                "attack.victims",
                self.victims,
                f"only {len(clients)} clients exist",
                f"use at most {len(clients)}",
            )
        batch_size = self.batch_size
        if batch_size is None:
            # FedAvg weighs clients by n_i, so the server knows the local set sizes
            sizes = np.unique(context.data.local_sizes)
            if len(sizes) != 1:
                raise bad_value(
                    "attack.batch_size",
                    None,
                    f"the clients hold different numbers of samples ({sizes.min()}..{sizes.max()})",
                    "set partition.per_node or attack.batch_size",
                )
            batch_size = int(sizes[0])
        model, data = context.model, context.data
        closed_form = batch_size == 1 and first_layer_on_input(model, int(np.prod(data.input_shape)))
        if self.analytic and not closed_form:
            raise bad_value(
                "attack.analytic",
                True,
                "the closed form needs one sample per client and a fully connected first layer with bias",
                "set attack.analytic=false, or use partition=one_per_node with model=logistic, softmax or mlp",
            )
        if not self.analytic and (data.task != "classification" or model.loss_name != "cross_entropy"):
            raise bad_value(
                "model",
                model.loss_name,
                "optimisation-based inversion here targets softmax classifiers",
                "use model=mlp or softmax, or attack.analytic=true for one-sample logistic regression",
            )
        if self.span and not first_layer_on_input(model, int(np.prod(data.input_shape))):
            raise bad_value(
                "attack.span",
                True,
                "the inputs' span is read off a fully connected first layer on the input",
                "set attack.span=false, or use model=mlp or softmax",
            )
        if self.span and self.config.box:
            raise bad_value(
                "attack.span", True, "a box cannot be kept inside the inputs' span", "set attack.box=false"
            )
        if self.config.box and data.data_range is None:
            raise bad_value(
                "attack.box", True, "the data has no declared value range", "set attack.box=false"
            )
        return ServerPlan(batch_size, protocol.name, clients, np.asarray(data.local_sizes)[clients])

    def run(self, view: View) -> Reconstructions:
        victims = client_nodes(view.network)[: self.victims]
        if encrypted(view, victims, self.round):
            return Reconstructions(victims, [], encrypted=True)
        leak = LEAKS[view.plan.protocol]
        if leak is fedsgd_leak:
            leak = partial(fedsgd_leak, round_=self.round)
        spec = view.data_spec
        generator = view.seeds.torch(f"attack.{self.name}")
        inversions = []
        for v in victims:  # one optimisation per victim; restarts and label candidates are batched inside
            point, gradient = leak(view, int(v))
            if self.analytic:
                x = analytic_inputs(view.model, gradient[None]).reshape(1, *spec.input_shape)
                unknown = torch.full((1,), -1, dtype=torch.long)
                inversions.append(
                    Inversion(x, unknown, 0.0, torch.zeros(1), torch.zeros(1, 1), unknown[None])
                )
                continue
            inversions.append(
                invert(
                    view.model,
                    point,
                    gradient,
                    input_shape=spec.input_shape,
                    num_classes=spec.num_classes,
                    batch_size=view.plan.batch_size,
                    labels=None,
                    data_range=spec.data_range,
                    config=self.config,
                    generator=generator,
                    basis=input_span(view.model, gradient, view.plan.batch_size) if self.span else None,
                )
            )
        return Reconstructions(victims, inversions)

    def evaluate(self, findings: Reconstructions, truth: Truth, view: View) -> Findings:
        victims = client_nodes(view.network)[: self.victims]  # the config's, never the finding's
        if encrypted(view, victims, self.round):
            clients = ", ".join(map(str, victims))
            return Findings(
                summary={
                    "attack_ciphertexts_only": len(victims),
                    "verdict": f"{self.name}: nothing to invert, the server holds only ciphertexts of the "
                    f"round-{self.round} update(s) of client(s) {clients} and no secret key to read them.",
                }
            )
        data_range = view.data_spec.data_range or (0.0, 1.0)
        image = view.data_spec.is_image
        inversions = findings.inversions
        found = Batches(
            findings.victims,
            [inv.x for inv in inversions],
            [inv.y for inv in inversions],
            [inv.objective for inv in inversions],
        )
        whose = f"the first attack.victims={self.victims} client(s)"
        batches = fixed_victims(self.name, found, victims, whose, truth)
        scored = score_batches(
            batches.victims, batches.xs, batches.ys, batches.objectives, truth, data_range, image
        )
        table = scored.table
        summary = {
            "attack_method": "analytic"
            if self.analytic
            else f"{self.config.optimiser} in the inputs' span"
            if self.span
            else self.config.optimiser,
            "attack_round": self.round,
            "attack_l2_error": float(table["l2_error"].mean()),
            "attack_objective": float(np.nanmean(batches.objectives)),
        }
        if not self.analytic:
            summary["attack_label_accuracy"] = float(table["label_correct"].mean())
        figures = {}
        if image:
            scores, recovered = image_summary(table)
            summary |= {**scores, "attack_mse": float(table["mse"].mean())}
            title = f"{self.name}: round-{self.round} gradient of client(s) {', '.join(map(str, batches.victims))}"
            figures[f"reconstructions/{self.name}.png"] = partial(
                reconstruction_grid, scored, data_range, "reconstructed", title
            )
        else:
            recovered = f"mean L2 error {summary['attack_l2_error']:.3g} (no image baseline for this data)"
            recovered += undefined_words(int((~table["defined"]).sum()))
        labels = (
            "labels not recovered by the closed form"
            if self.analytic
            else f"labels {summary['attack_label_accuracy']:.0%} right"
        )
        summary["verdict"] = (
            f"{self.name}: {recovered}; {labels} ({summary['attack_method']} on the round-{self.round} gradient of "
            f"{len(batches.victims)} client(s), {len(table)} sample(s))."
        )
        return Findings(tables={"attack": table}, summary=summary, figures=figures)


class DLG(GradientInversion):
    name = "dlg"


class IDLG(GradientInversion):
    name = "idlg"


class InvertingGradients(GradientInversion):
    name = "inverting_gradients"
