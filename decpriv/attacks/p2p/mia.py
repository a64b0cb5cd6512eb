"""Passive membership inference on the models a curious node receives (Pasquini et al. 2023, Sec. 4.1).

D-PSGD: each attacker tests every neighbour v on the update theta_v^{t+1/2} it received ("received") or
on its functional marginalisation (Eqs. 7-8, "marginalised"); ``marginalize=auto`` picks per round from
the consensus distance the attacker estimates on its own received updates. FedAvg (``protocol=fedavg``
with an eavesdropping server): every user is tested on its update (server view, "fl_update") and on the
global model, the mean of the updates (user view, "fl_global").
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch.func import vmap

from decpriv.adversary.view import View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.neighbourhood import (
    closed,
    recorded_rounds,
    require_neighbours,
    updates,
    victims_of,
)
from decpriv.attacks.p2p.neighbourhood import marginalise as marginalised_models
from decpriv.attacks.p2p.scores import SCORES, best_threshold_advantage, roc_metrics
from decpriv.errors import bad
from decpriv.models.functional import FunctionalModel
from decpriv.report.findings import Report
from decpriv.report.plots import plt
from decpriv.setup import Setup
from decpriv.truth import Truth


@dataclass(eq=False)
class Targets:
    """The models an attack tests: ``models[k]`` is tested for membership of ``table.victim[k]``'s data."""

    table: pd.DataFrame  # round, victim, attacker, view, consensus_estimate
    models: torch.Tensor  # (K, p)


def consensus_estimate(received: torch.Tensor) -> torch.Tensor:
    """(R,) C over the k updates one attacker holds each round: 2 sum ||u - mean||^2 / (k - 1) (Sec. 3)."""
    k = received.shape[1]
    return 2 * ((received - received.mean(1, keepdim=True)) ** 2).sum((1, 2)) / max(k - 1, 1)


def marginalisation_pays(received: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
    """(R,) True where marginalising should help: it amplifies each deviation from the neighbourhood
    mean |N(A)| times, about |N(A)| sqrt(C/2) in norm, which must stay below how far training has moved
    the mean from ``origin`` (the public initial model) or the result is noise (Sec. 4.1.2)."""
    k = received.shape[1]
    moved = ((received.mean(1) - origin) ** 2).sum(1)
    return k**2 * consensus_estimate(received) / 2 < moved


def dl_targets(view: View, rounds: np.ndarray, marginalize: bool | str) -> Targets:
    """Received and/or marginalised models of every attacker's neighbours at ``rounds`` (transcript rows)."""
    victims, attackers = victims_of(view)
    origin = view.public.get("initial_model")
    rows, models = [], []
    for a in np.unique(attackers):
        hood = closed(view.network, int(a))
        received = updates(view.transcript, hood)[torch.as_tensor(rows_of(view, rounds))]
        mine = victims[attackers == a]
        at = np.searchsorted(hood, mine)
        k = torch.full((), float(len(hood)), dtype=received.dtype)
        marg = marginalised_models(received[:, at], k, received.sum(1, keepdim=True))
        estimate = consensus_estimate(received)
        start = origin.to(received.dtype) if origin is not None else torch.zeros_like(received[0, 0])
        pays = marginalisation_pays(received, start)
        views = {"received": received[:, at], "marginalised": marg}
        if marginalize == "auto":
            views = {
                "auto": torch.where(pays[:, None, None], marg, received[:, at]),
                "received": received[:, at],
            }
        elif marginalize is True:
            views["auto"] = torch.where(pays[:, None, None], marg, received[:, at])
        else:
            views = {"received": received[:, at]}
        for name, tensor in views.items():
            r_idx, v_idx = np.meshgrid(np.arange(len(rounds)), np.arange(len(mine)), indexing="ij")
            rows.append(
                pd.DataFrame(
                    {
                        "round": rounds[r_idx.ravel()],
                        "victim": mine[v_idx.ravel()],
                        "attacker": int(a),
                        "view": name,
                        "consensus_estimate": estimate.numpy()[r_idx.ravel()],
                        "marginalised": pays.numpy()[r_idx.ravel()]
                        if name == "auto"
                        else name == "marginalised",
                    }
                )
            )
            models.append(tensor.reshape(-1, tensor.shape[-1]))
    return Targets(pd.concat(rows, ignore_index=True), torch.cat(models))


def fl_targets(view: View, rounds: np.ndarray) -> Targets:
    """FedAvg: each update (server view) and the global model, their mean (user view), for every user."""
    n = view.network.n
    received = updates(view.transcript, np.arange(n))[torch.as_tensor(rows_of(view, rounds))]
    glob = received.mean(1, keepdim=True).expand_as(received)
    r_idx, v_idx = np.meshgrid(np.arange(len(rounds)), np.arange(n), indexing="ij")
    estimate = consensus_estimate(received).numpy()[r_idx.ravel()]
    tables = [
        pd.DataFrame(
            {
                "round": rounds[r_idx.ravel()],
                "victim": v_idx.ravel(),
                "attacker": -1,
                "view": name,
                "consensus_estimate": estimate,
                "marginalised": False,
            }
        )
        for name in ("fl_update", "fl_global")
    ]
    models = torch.cat([received.reshape(-1, received.shape[-1]), glob.reshape(-1, received.shape[-1])])
    return Targets(pd.concat(tables, ignore_index=True), models)


def rows_of(view: View, rounds: np.ndarray) -> np.ndarray:
    recorded = recorded_rounds(view.transcript)
    return np.flatnonzero(np.isin(recorded, rounds))


def attacked_rounds(view: View, every: int) -> np.ndarray:
    recorded = recorded_rounds(view.transcript)
    return recorded[(recorded % every == 0) | (recorded == recorded.max())]


def forward_many(model: FunctionalModel, thetas: torch.Tensor, x: torch.Tensor, shared: bool) -> torch.Tensor:
    """Logits of K models: on one shared batch x (m, ...) or on their own batches x (K, m, ...)."""
    return vmap(model.forward, in_dims=(0, None if shared else 0))(thetas, x.to(thetas.dtype))


def score_targets(
    model: FunctionalModel, targets: Targets, truth: Truth, score: str, thresholds: int, chunk: int = 128
) -> pd.DataFrame:
    """One row per tested model: advantage, AUC, TPR at low FPR, and the model's generalisation error
    acc(X) - acc(O) on the union X of the training sets and the test set O (Sec. 3)."""
    local, data = truth.local, truth.dataset
    fn = SCORES[score]
    victims = torch.as_tensor(targets.table.victim.to_numpy().copy())
    x_all = local.x[local.mask]
    y_all = local.y[local.mask]
    out = []
    for start in range(0, len(victims), chunk):
        thetas = targets.models[start : start + chunk]
        v = victims[start : start + chunk]
        with torch.no_grad():
            inside = forward_many(model, thetas, local.x[v], shared=False)
            outside = forward_many(model, thetas, data.x_test, shared=True)
            train = forward_many(model, thetas, x_all, shared=True)
        mask = local.mask[v]
        s_in = fn(inside.double(), local.y[v])
        s_out = fn(outside.double(), data.y_test.expand(len(v), -1))
        adv = best_threshold_advantage(s_in, mask, s_out, thresholds)
        gerr = (train.argmax(-1) == y_all).double().mean(1) - (
            outside.argmax(-1) == data.y_test
        ).double().mean(1)
        for k in range(len(v)):
            roc = roc_metrics(s_in[k][mask[k]].numpy(), s_out[k].numpy())
            out.append({"advantage": float(adv[k]), **roc, "generalisation_error": float(gerr[k])})
    return pd.concat([targets.table.reset_index(drop=True), pd.DataFrame(out)], axis=1)


def mia_report(table: pd.DataFrame, prefix: str = "mia") -> Report:
    """Summary (last round, mean over victims, per view) and the advantage-vs-generalisation plot."""
    last = table[table["round"] == table["round"].max()]
    summary = {}
    for name, part in last.groupby("view"):
        for col in ("advantage", "auc", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr"):
            summary[f"{prefix}_{name}_{col}"] = float(part[col].mean())
        summary[f"{prefix}_{name}_max_advantage"] = float(
            table[table.view == name].groupby("round").advantage.mean().max()
        )
    figures = {f"plots/{prefix}_vs_generalisation.png": mia_figure(table)}
    return Report(tables={prefix: table}, summary=summary, figures=figures)


def mia_figure(table: pd.DataFrame) -> Figure:
    """Advantage over rounds, and against the generalisation error of the network's state that round
    (the mean over victims of the received or global model's acc(X) - acc(O), the paper's x axis)."""
    per_round = table.groupby(["view", "round"], as_index=False).advantage.mean()
    state = table[table.view.isin(["received", "fl_global"])].groupby("round").generalisation_error.mean()
    per_round["generalisation_error"] = per_round["round"].map(state)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, part in per_round.groupby("view"):
        left.plot(part["round"], part.advantage, marker="o", ms=3, label=name)
        right.scatter(part.generalisation_error, part.advantage, s=14, label=name)
    left.set(xlabel="round", ylabel="MIA advantage (best-threshold accuracy - 0.5)", title="over rounds")
    right.set(
        xlabel="generalisation error of the received models",
        ylabel="MIA advantage",
        title="vs generalisation error",
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("membership inference, mean over victims")
    fig.tight_layout()
    return fig


class MembershipInference(Attack):
    """Threshold attack on the modified entropy or the loss of each tested model (Sec. 4.1)."""

    name = "mia"

    def __init__(
        self, score: str = "mentr", every: int = 1, marginalize: bool | str = False, thresholds: int = 150
    ):
        if score not in SCORES:
            raise bad("attack.score", score, "unknown membership score", f"use one of {', '.join(SCORES)}")
        if every < 1:
            raise bad("attack.every", every, "must be at least 1", "use e.g. attack.every=5")
        if marginalize not in (True, False, "auto"):
            raise bad(
                "attack.marginalize", marginalize, "not a marginalisation mode", "use true, false or auto"
            )
        if thresholds < 2:
            raise bad("attack.thresholds", thresholds, "need at least two thresholds", "use 150 (the paper)")
        self.score, self.every, self.marginalize, self.thresholds = score, every, marginalize, thresholds
        self.federated = False

    def check(self, setup: Setup) -> None:
        if len(setup.dataset.x_test) == 0:
            raise bad(
                "data",
                setup.dataset.name,
                "no held-out set to draw non-members from",
                "use data with a test split",
            )
        if setup.dataset.task != "classification":
            raise bad(
                "data",
                setup.dataset.name,
                "membership scores need class probabilities",
                "use a classification data set",
            )
        self.federated = setup.protocol.name in ("fedavg", "fedsgd")
        if self.federated:
            seen = setup.adversary.observed_senders(setup.network)
            if len(seen) < setup.network.n:
                raise bad(
                    "adversary.eavesdropper",
                    setup.adversary.eavesdropper,
                    "the FedAvg server view needs every update",
                    "set adversary.eavesdropper=true",
                )
            return
        if setup.protocol.name != "dsgd":
            raise bad(
                "protocol",
                setup.protocol.name,
                "this attack reads D-PSGD or FedAvg updates",
                "use protocol=dsgd or fedavg",
            )
        require_neighbours(setup.network, setup.adversary.nodes)

    def run(self, view: View) -> Targets:
        rounds = attacked_rounds(view, self.every)
        if self.federated:
            return fl_targets(view, rounds)
        return dl_targets(view, rounds, self.marginalize)

    def evaluate(self, findings: Targets, truth: Truth, view: View) -> Report:
        return mia_report(score_targets(view.model, findings, truth, self.score, self.thresholds))
