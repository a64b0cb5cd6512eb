"""Active gradient inversion through state override (Pasquini et al. 2023, Sec. 5.2.1, Fig. 9).

At round t0 a rushing attacker overrides victim v's aggregate with malicious parameters built after
Boenisch et al. (2023, "trap weights"): the first linear layer is redrawn so that each hidden unit fires
for about one sample in ``2 * batch`` (its bias calibrated on the attacker's OWN data). At t0 + 1 the
victim's update theta_v^{t0+3/2} = theta_tilde - lr * g leaks g = (theta_tilde - theta_v^{t0+3/2}) / lr
at parameters the attacker chose; a unit j hit by a single sample i has gradient rows
dW_j = delta_ij x_i and db_j = delta_ij, so x_i = dW_j / db_j exactly (analytic extraction, no
optimisation).
"""

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.behaviour import Forgery
from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.neighbourhood import columns
from decpriv.attacks.p2p.state_override import Override, override_targets, override_victims
from decpriv.attacks.targets import fixed_targets
from decpriv.errors import bad_value
from decpriv.metrics.images import PSNR_CAP
from decpriv.random import streams as rng
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.report.plots import image_grid
from decpriv.seal.truth import Truth


def trap_weights(
    own: torch.Tensor, shape: tuple[int, int], batch: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, d) Gaussian rows and (h,) biases putting each unit's firing rate on ``own`` data (m, d) at
    1 / (2 batch), so that in a batch of ``batch`` most firing units see a single sample."""
    h, d = shape
    W = rng.normal((h, d), generator, own.device, own.dtype)
    pre = own @ W.T  # (m, h)
    b = -torch.quantile(pre, 1 - 1 / (2 * batch), dim=0)
    return W, b


class TrapOverride(Override):
    """State override at round ``start`` only, with the attacker's model carrying trap first-layer weights."""

    def __init__(self, trap: tuple[torch.Tensor, torch.Tensor], **kw):
        super().__init__(**kw)
        self.trap = trap

    def aim(self, own: torch.Tensor) -> torch.Tensor:
        W, b = self.trap
        aim = super().aim(own).clone()
        aim[:, : W.numel()] = W.reshape(-1).to(aim.dtype)
        aim[:, W.numel() : W.numel() + b.numel()] = b.to(aim.dtype)
        return aim

    def forge(
        self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor
    ) -> Forgery | None:
        if round_ != self.start:
            return None
        return super().forge(round_, senders, observed, own)


@dataclass(eq=False)
class Extracted:
    victims: np.ndarray
    images: list[torch.Tensor]  # per victim, (k, *input) one image per singly-hit unit


class ActiveInversion(Attack):
    """Override each coverable neighbour with trap weights, then read its inputs off its next update."""

    name = "active_inversion"
    headline = (
        Headline("active_inversion_recovered_fraction", 0.0, "higher", "a passive neighbour"),
        Headline("active_inversion_mean_samples_recovered", 0.0, "higher", "a passive neighbour"),
    )
    active = True  # forges messages (behaviour)

    def __init__(self, round: int | None = None, victim: int | None = None, min_bias_gradient: float = 1e-8):
        if round is not None and round < 0:
            raise bad_value("attack.round", round, "rounds start at 0", "use a round >= 0 or null")
        self.round, self.victim, self.tiny = round, victim, min_bias_gradient

    def prepare(self, context: AttackContext) -> TrapOverride:
        """Plan: the forger (trap weights from the attackers' own inputs, victims, override round); it keeps
        the models it sent for ``run``."""
        proto, model, net, adv = context.protocol, context.model, context.network, context.adversary
        if proto.name != "dsgd" or proto.gossip_steps != 1:
            raise bad_value(
                "protocol",
                proto.name,
                "the override targets D-PSGD's averaging",
                "use protocol=dsgd gossip_steps=1",
            )
        if proto.momentum or proto.weight_decay or proto.local_steps != 1 or proto.batch_size is None:
            raise bad_value(
                "protocol.batch_size",
                proto.batch_size,
                "extraction needs one plain minibatch SGD step a round",
                "use momentum=0 weight_decay=0 local_steps=1 and a batch_size",
            )
        if len(model.shapes[0]) != 2 or len(model.shapes) < 2 or model.shapes[1] != model.shapes[0][:1]:
            raise bad_value(
                "model", model.shapes[0], "trap weights need a first linear layer with bias", "use model=mlp"
            )
        if proto.rounds < 2:
            raise bad_value(
                "protocol.rounds",
                proto.rounds,
                "override and read need two rounds",
                "use protocol.rounds >= 2",
            )
        start = proto.rounds - 2 if self.round is None else self.round
        if start > proto.rounds - 2:
            raise bad_value(
                "attack.round",
                self.round,
                f"the read happens one round later; the run has {proto.rounds}",
                f"use 0..{proto.rounds - 2}",
            )
        victims, forgers, heard = override_targets(net, adv, self.victim)
        own = context.own_x[context.own_mask].flatten(1).double()
        trap = trap_weights(own, model.shapes[0], proto.batch_size, context.seeds.torch("attack.trap"))
        return TrapOverride(
            trap,
            network=net,
            attackers=adv.nodes,
            victims=victims,
            forgers=forgers,
            senders=heard,
            start=start,
            rushing=True,
            target="own",
        )

    def behaviour(self, context: AttackContext, plan: TrapOverride) -> TrapOverride:
        return plan

    def run(self, view: View) -> Extracted:
        f = view.plan
        rounds = view.transcript.times[:, 0]
        row = int(np.flatnonzero(rounds == f.start + 1)[0])
        sent = view.transcript.values[row][torch.as_tensor(columns(view.transcript, f.victims))]
        g = (f.targets[f.start].to(sent.dtype) - sent) / view.hyper["lr"]
        h, d = view.model.shapes[0]
        dW = g[:, : h * d].reshape(-1, h, d)
        db = g[:, h * d : h * d + h]
        images = []
        for k in range(len(f.victims)):
            hit = db[k].abs() > self.tiny
            images.append((dW[k][hit] / db[k][hit, None]).reshape(-1, *view.data_spec.input_shape))
        return Extracted(f.victims, images)

    def fixed(self, findings: Extracted, view: View) -> Extracted:
        """The finding on the victims the threat model fixes (``override_victims``: ``attack.victim`` or
        every coverable neighbour, rebuilt outside the attack): a victim outside is refused, say the
        attacker itself with its own images; one omitted has no image (a passive neighbour's 0)."""
        expected, whose = override_victims(view, self.victim)
        order = torch.arange(len(findings.images), dtype=torch.float64)[:, None]
        table, slot = fixed_targets(
            self.name, pd.DataFrame({"victim": findings.victims}), order, expected, whose
        )
        none = torch.empty(0, *view.data_spec.input_shape)
        images = [none if np.isnan(k) else findings.images[int(k)] for k in slot[:, 0].tolist()]
        return Extracted(table.victim.to_numpy(), images)

    def evaluate(self, findings: Extracted, truth: Truth, view: View) -> Findings:
        findings = self.fixed(findings, view)
        batch = int(view.hyper["batch_size"])
        low, high = view.data_spec.data_range or (0.0, 1.0)
        prior = truth.dataset.x_test.double().mean(0).flatten()
        rows, shown = [], []
        for v, rec in zip(findings.victims.tolist(), findings.images, strict=True):
            own = truth.local.x[v][truth.local.mask[v]].double()
            # no attack: the mean image as the guess for each of the victim's samples
            baseline = 10 * torch.log10((high - low) ** 2 / ((own.flatten(1) - prior) ** 2).mean(1))
            row = {"victim": v, "units_hit": len(rec), "exact_units": 0, "distinct_samples_recovered": 0}
            row |= {
                "batch_size": batch,
                "psnr_median": float("nan"),
                "mean_image_psnr": float(baseline.median()),
            }
            if len(rec):
                dist = torch.cdist(rec.double().flatten(1), own.flatten(1)) ** 2 / own[0].numel()
                best, where = dist.min(1)
                exact = best < 1e-8  # an exact copy: PSNR >= 80 dB, far above the mean image's + 3 dB
                psnr = (10 * torch.log10((high - low) ** 2 / best)).clamp(max=PSNR_CAP)
                row |= {
                    "exact_units": int(exact.sum()),
                    "distinct_samples_recovered": int(where[exact].unique().numel()),
                    "psnr_median": float(psnr.median()),
                }
                if not shown and exact.any():
                    picks = where[exact].unique()[:8]
                    first = torch.stack([rec[exact][where[exact] == i][0] for i in picks])
                    shown = [("extracted", first.clamp(0, 1).numpy()), ("true", own[picks].numpy())]
            rows.append(row)
        table = pd.DataFrame(rows)
        recovered, images = int(table.distinct_samples_recovered.sum()), batch * len(table)
        summary = {
            "active_inversion_victims": len(findings.victims),
            "active_inversion_recovered_fraction": recovered / images if images else float("nan"),
            "active_inversion_recovered": recovered,
            "active_inversion_images": images,
            "active_inversion_mean_samples_recovered": float(table.distinct_samples_recovered.mean())
            if len(table)
            else 0.0,
            "active_inversion_median_samples_recovered": float(table.distinct_samples_recovered.median())
            if len(table)
            else 0.0,
            "active_inversion_batch_size": batch,
        }
        summary["verdict"] = (
            f"active inversion: {recovered} of {images} batch sample(s) recovered exactly ({len(table)} "
            f"victim(s) x batch {batch}; median {summary['active_inversion_median_samples_recovered']:g}, "
            f"mean {summary['active_inversion_mean_samples_recovered']:.1f} per victim), read off "
            "trap-weight gradients."
        )
        figures = {}
        if shown:
            figures["reconstructions/active_inversion.png"] = partial(
                image_grid, shown, title="samples read off trap-weight gradients"
            )
        return Findings(tables={"active_inversion": table}, summary=summary, figures=figures)
