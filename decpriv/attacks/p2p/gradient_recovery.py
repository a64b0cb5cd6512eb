"""Passive gradient recovery in D-PSGD (Pasquini et al. 2023, Sec. 4.2.1).

A neighbour v's update is theta_v^{t+1/2} = theta_v^t - lr * step. The attacker knows theta_v^t, and so
the step, exactly when (1) t = 0 and the initial model is common and public, or (2) it observed every
update v averaged: N(v) inside the senders it hears, so theta_v^t = sum_u W_vu theta_u^{t-1/2} from the
previous round (the graph is static, so "connected two rounds in a row" always holds). The recovered
step is the local gradient (momentum step, or sum of local steps) computed at the recovered theta_v^t.
With one plain SGD step a round, step / lr is the batch gradient at a known point, which the
gradient-inversion engine turns into images (``attack.invert`` steps; Geiping et al. 2020 in the paper,
L-BFGS gradient matching with iDLG labels here).
"""

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch.func import grad, vmap

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.inversion import InversionConfig, invert
from decpriv.attacks.p2p.neighbourhood import (
    coverable,
    recorded_rounds,
    require_neighbours,
    updates,
    victims_of,
)
from decpriv.attacks.targets import fixed_targets
from decpriv.errors import bad_value
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.report.plots import image_grid
from decpriv.seal.truth import Truth


@dataclass(eq=False)
class Recovered:
    table: pd.DataFrame  # round, victim, condition ("initial" or "system_knowledge")
    bases: torch.Tensor  # (K, p) the recovered theta_v^t
    steps: torch.Tensor  # (K, p) theta_v^t - theta_v^{t+1/2} = lr * local step
    skipped: pd.DataFrame  # victim, missing: neighbours of v the attackers never hear
    images: torch.Tensor | None = None  # (k, B, *input) inversions of the first k recovered steps


def informed_victims(view: View) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Victims whose whole closed neighbourhood is observed, the others, and what each other misses."""
    victims, _ = victims_of(view)
    heard = np.zeros(view.network.n, dtype=bool)
    heard[view.transcript.senders] = True
    adj = view.network.adjacency[victims].toarray() > 0
    unheard = adj & ~heard[None, :]
    ok = ~unheard.any(1)
    missing = [np.flatnonzero(row).tolist() for row in unheard[~ok]]
    return victims[ok], victims[~ok], missing


def recover(view: View) -> Recovered:
    """All recoverable (victim, round) steps at once: bases = W[victims, heard] @ U[t - 1]."""
    informed, uninformed, missing = informed_victims(view)
    senders = np.sort(view.transcript.senders)
    U = updates(view.transcript, senders)  # (R, S, p)
    rounds = recorded_rounds(view.transcript)
    W = torch.as_tensor(view.network.W[informed][:, senders].toarray(), dtype=U.dtype)
    own = U[:, np.searchsorted(senders, informed)]  # (R, V, p)
    previous = torch.einsum("vs,rsp->rvp", W, U[:-1])
    consecutive = rounds[1:] == rounds[:-1] + 1
    bases, steps, tables = [], [], []
    initial = view.public.get("initial_model")
    if initial is not None and rounds.size and rounds[0] == 0:
        bases.append(initial.to(U.dtype).expand(len(informed), -1))
        steps.append(bases[-1] - own[0])
        tables.append(pd.DataFrame({"round": 0, "victim": informed, "condition": "initial"}))
    later = previous[consecutive]
    idx = np.flatnonzero(consecutive) + 1
    bases.append(later.reshape(-1, U.shape[-1]))
    steps.append((later - own[idx]).reshape(-1, U.shape[-1]))
    r, v = np.meshgrid(rounds[idx], informed, indexing="ij")
    tables.append(pd.DataFrame({"round": r.ravel(), "victim": v.ravel(), "condition": "system_knowledge"}))
    skipped = pd.DataFrame({"victim": uninformed, "missing": [str(m) for m in missing]})
    return Recovered(pd.concat(tables, ignore_index=True), torch.cat(bases), torch.cat(steps), skipped)


def full_local_steps(view: View, truth: Truth, recovered: Recovered, lr: float) -> torch.Tensor:
    """(K, p) lr * gradient of each victim's whole local objective at the recovered base point: the step
    the victim took when it trains full-batch, one local step, without momentum (for scoring)."""
    v = torch.as_tensor(recovered.table.victim.to_numpy().copy())
    dtype = recovered.bases.dtype
    x, y, mask = truth.local.x[v].to(dtype), truth.local.y[v], truth.local.mask[v].to(dtype)
    return lr * vmap(grad(view.model.loss))(recovered.bases, x, y, mask)


def check_single_sgd_step(proto, invert: int) -> None:
    """Inverting a recovered update needs it to be lr x one minibatch gradient: one plain SGD step a round."""
    if invert and (
        proto.momentum or proto.weight_decay or proto.local_steps != 1 or proto.batch_size is None
    ):
        raise bad_value(
            "attack.invert",
            invert,
            "inversion needs one plain minibatch SGD step a round (the step is then lr x a batch gradient)",
            "use protocol.momentum=0 weight_decay=0 local_steps=1 and a batch_size, or attack.invert=0",
        )


class GradientRecovery(Attack):
    """Recover neighbours' local steps from system knowledge; score them against the true local gradient."""

    name = "gradient_recovery"
    headline = (Headline("recovery_median_cosine", 0.0, "higher", "a random direction"),)

    def __init__(self, invert: int = 0, iterations: int = 200, restarts: int = 1):
        for key, value, low in (
            ("invert", invert, 0),
            ("iterations", iterations, 1),
            ("restarts", restarts, 1),
        ):
            if value < low:
                raise bad_value(
                    f"attack.{key}", value, f"must be at least {low}", f"set attack.{key} >= {low}"
                )
        self.invert, self.config = invert, InversionConfig(iterations=iterations, restarts=restarts)

    def prepare(self, context: AttackContext) -> None:
        proto, network, adversary = context.protocol, context.network, context.adversary
        if proto.name != "dsgd":
            raise bad_value("protocol", proto.name, "recovery reads D-PSGD updates", "use protocol=dsgd")
        if proto.gossip_steps != 1:
            raise bad_value(
                "protocol.gossip_steps",
                proto.gossip_steps,
                "the attacker only sees the first gossip step's messages",
                "use protocol.gossip_steps=1 (D-PSGD)",
            )
        require_neighbours(network, adversary.nodes)
        informed, _ = coverable(network, adversary.nodes, adversary.observed_senders(network))
        if not informed.size:
            raise bad_value(
                "adversary.nodes",
                adversary.nodes.tolist(),
                "no neighbour of the attackers has all its own neighbours among the attackers' neighbours",
                "add corrupt nodes or pick better-connected ones (adversary.strategy=max_degree)",
            )
        check_single_sgd_step(proto, self.invert)

    def run(self, view: View) -> Recovered:
        found = recover(view)
        if not self.invert:
            return found
        hyper, spec = view.hyper, view.data_spec
        rows = range(min(self.invert, len(found.table)))
        generator = view.seeds.torch("attack.inversion")
        found.images = torch.stack(
            [
                invert(
                    view.model,
                    found.bases[k],
                    found.steps[k] / hyper["lr"],
                    spec.input_shape,
                    spec.num_classes,
                    batch_size=hyper["batch_size"],
                    data_range=spec.data_range,
                    config=self.config,
                    generator=generator,
                ).x
                for k in rows
            ]
        )
        return found

    def fixed(self, findings: Recovered, view: View) -> Recovered:
        """The finding on the targets the threat model fixes: ``recover`` run by the pipeline on its own
        view says which (round, victim) steps are recoverable and from which base point; one the finding
        names outside is refused, one it omits is scored as no guess (a zero step: cosine 0, relative
        error 1, the random direction's baseline), at the pipeline's base point."""
        reach = recover(view)
        whose = "the attackers' honest neighbours whose whole neighbourhood they hear, each round it can read"
        p = findings.steps.shape[-1]
        pair = torch.cat([findings.bases, findings.steps], 1)
        table, pair = fixed_targets(self.name, findings.table, pair, reach.table, whose)
        bases, steps = pair[:, :p].clone(), pair[:, p:].clone()
        if len(table) > len(findings.table):
            omitted = table.iloc[len(findings.table) :][["round", "victim", "condition"]]
            keys = pd.MultiIndex.from_frame(reach.table[["round", "victim", "condition"]])
            where = keys.get_indexer(pd.MultiIndex.from_frame(omitted))
            bases[len(findings.table) :] = reach.bases[where].to(bases.dtype)
            steps[len(findings.table) :] = 0.0
        return Recovered(table, bases, steps, reach.skipped, findings.images)

    def evaluate(self, findings: Recovered, truth: Truth, view: View) -> Findings:
        findings = self.fixed(findings, view)
        hyper = view.hyper
        exact = (
            hyper.get("batch_size") is None and hyper.get("local_steps") == 1 and not hyper.get("momentum")
        )
        table = findings.table.copy()
        true = full_local_steps(view, truth, findings, float(hyper["lr"]))
        err = (findings.steps - true).norm(dim=1) / true.norm(dim=1).clamp_min(1e-300)
        cos = torch.nn.functional.cosine_similarity(findings.steps, true, dim=1)
        table["relative_error_vs_full_batch_step"] = err.numpy()
        table["cosine_vs_full_batch_step"] = cos.numpy()
        table["step_norm"] = findings.steps.norm(dim=1).numpy()
        summary = {
            "recovered_victims": int(table.victim.nunique()),
            "unrecoverable_victims": len(findings.skipped),
            "recovered_steps": len(table),
            "recovery_full_batch": exact,
            "recovery_median_cosine": float(cos.median()),
            "recovery_max_relative_error": float(err.max()),
        }
        summary["verdict"] = (
            f"gradient recovery: {len(table)} local step(s) of {summary['recovered_victims']} victim(s) read off "
            f"the messages, median cosine {summary['recovery_median_cosine']:.3f} with the true "
            f"{'full-batch step (exact)' if exact else 'full-batch step (an estimate: mini-batches or several steps)'}"
            f", worst relative error {summary['recovery_max_relative_error']:.2g} (a random direction: cosine 0); "
            f"{summary['unrecoverable_victims']} victim(s) out of reach."
        )
        tables = {"gradient_recovery": table}
        figures = {}
        if findings.images is not None:
            inverted, summary["inversion_nearest_mse"], figures = score_images(findings, truth)
            tables["gradient_inversion"] = inverted
        if len(findings.skipped):
            tables["gradient_recovery_skipped"] = findings.skipped
        return Findings(tables=tables, summary=summary, figures=figures)


def score_images(findings: Recovered, truth: Truth) -> tuple[pd.DataFrame, float, dict]:
    """The batch a step came from is not recorded, so each reconstruction is scored against its nearest
    training sample of the victim (MSE in the data range)."""
    k, b = findings.images.shape[:2]
    victims = findings.table.victim.to_numpy()[:k]
    local = truth.local
    rows, shown, nearest_all = [], [], []
    for i, v in enumerate(victims):
        own = local.x[int(v)][local.mask[int(v)]].double()
        rec = findings.images[i].double().clamp(0, 1)
        dist = torch.cdist(rec.flatten(1), own.flatten(1)) ** 2 / own[0].numel()
        best, where = dist.min(1)
        nearest_all.append(best)
        shown.append((rec, own[where]))
        rows += [{"step": i, "victim": int(v), "image": j, "nearest_mse": float(best[j])} for j in range(b)]
    drawing = partial(
        image_grid,
        [
            ("recovered", torch.cat([r for r, _ in shown]).numpy()),
            ("nearest true", torch.cat([t for _, t in shown]).numpy()),
        ],
        title="inverted recovered gradients vs the victim's nearest training image",
    )
    return (
        pd.DataFrame(rows),
        float(torch.cat(nearest_all).mean()),
        {"reconstructions/gradient_recovery.png": drawing},
    )
