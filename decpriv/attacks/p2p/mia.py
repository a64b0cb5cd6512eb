"""Passive membership inference on the models a curious node receives (Pasquini et al. 2023, Sec. 4.1).

D-PSGD: each attacker tests every neighbour v on the update theta_v^{t+1/2} it received ("received") or
on its functional marginalisation (Eqs. 7-8, "marginalised"); ``marginalize=auto`` picks per round from
the consensus distance the attacker estimates on its own received updates. FedAvg (``protocol=fedavg``
with an eavesdropping server): every user is tested on its update (server view, "fl_update") and on the
global model the server broadcast (user view, "fl_global"): under secure aggregation or secret sharing the
aggregate the protocol revealed, not an average of the masked updates.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
import pandas as pd
import torch
from torch.func import vmap

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.neighbourhood import (
    closed,
    columns,
    recorded_rounds,
    require_neighbours,
    updates,
    victims_of,
)
from decpriv.attacks.p2p.neighbourhood import marginalise as marginalised_models
from decpriv.attacks.p2p.null import STATISTICS, null_summary, shuffled_labels, statistics
from decpriv.attacks.p2p.scores import SCORES, Score
from decpriv.attacks.targets import fixed_targets
from decpriv.config.types import Range, checked
from decpriv.data.datasets import Dataset
from decpriv.data.partition import LocalData
from decpriv.errors import bad_value
from decpriv.metrics.rates import hit_rate
from decpriv.models.functional import FunctionalModel
from decpriv.random.streams import Seeds
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.report.plots import place, subplots
from decpriv.seal.truth import Truth

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(eq=False)
class Targets:
    """The models an attack tests: ``models[k]`` is tested for membership of ``table.victim[k]``'s data."""

    table: pd.DataFrame  # round, victim, attacker, view, consensus_estimate
    models: torch.Tensor  # (K, p)
    encrypted: int = 0  # updates left untested: the server holds only their ciphertexts (no secret key)


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
    """FedAvg: each update (server view) and the global model (user view) for every user."""
    n = view.network.n
    rows = torch.as_tensor(rows_of(view, rounds))
    received = updates(view.transcript, np.arange(n))[rows]
    glob = global_models(view, rounds, rows, received)[:, None].expand_as(received)
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
    readable = ~encrypted_updates(view, rows, n).reshape(-1)
    models = torch.cat(
        [received.reshape(-1, received.shape[-1])[readable], glob.reshape(-1, received.shape[-1])]
    )
    tables[0] = tables[0][readable.numpy()]
    return Targets(pd.concat(tables, ignore_index=True), models, int((~readable).sum()))


def encrypted_updates(view: View, rows: torch.Tensor, n: int) -> torch.Tensor:
    """(R, n) True where the server holds only a ciphertext of the update (homomorphic encryption)."""
    encrypted = view.transcript.encrypted
    if encrypted is None:
        return torch.zeros(len(rows), n, dtype=torch.bool)
    return encrypted[rows][:, torch.as_tensor(columns(view.transcript, np.arange(n)))]


def global_models(view: View, rounds: np.ndarray, rows: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
    """(R, p) the global model the server broadcast after each of ``rounds``, what every user sees.
    Under secure aggregation or secret sharing it is the aggregate the protocol revealed (the masked
    updates are noise, their mean too); in the clear, the round's participants' updates weighted by their
    public local-set sizes, as FedAvg's server computes it (McMahan et al. 2017, Algorithm 1). ``rows``:
    the transcript's rows of those rounds."""
    if view.transcript.aggregates is not None:
        return view.transcript.aggregates[rows, 0].to(received.dtype)
    sending = view.public["participants"][torch.as_tensor(rounds)].to(received.dtype)
    weights = sending * torch.as_tensor(view.data_spec.local_sizes, dtype=received.dtype)
    return (weights[..., None] * received).sum(1) / weights.sum(1, keepdim=True)


def rows_of(view: View, rounds: np.ndarray) -> np.ndarray:
    recorded = recorded_rounds(view.transcript)
    return np.flatnonzero(np.isin(recorded, rounds))


def attacked_rounds(view: View, every: int) -> np.ndarray:
    recorded = recorded_rounds(view.transcript)
    return recorded[(recorded % every == 0) | (recorded == recorded.max())]


def forward_many(model: FunctionalModel, thetas: torch.Tensor, x: torch.Tensor, shared: bool) -> torch.Tensor:
    """Logits of K models: on one shared batch x (m, ...) or on their own batches x (K, m, ...)."""
    return vmap(model.forward, in_dims=(0, None if shared else 0))(thetas, x.to(thetas.dtype))


MIA_MEMORY = 5e8  # bytes of null statistics held at once (rows are scored in chunks below it)


def balanced_sets(
    counts: np.ndarray,
    n_test: int,
    rng: np.random.Generator,
    pool: str = "balanced",
    nodes: np.ndarray | None = None,
):
    """Equal numbers of members and non-members per node: c_v = min(|D_v|, |O|) of each, drawn uniformly
    (Pasquini et al. 2023, Sec. 4.1: |X| = |O|); ``pool="all"``: every member against the whole held-out
    set (the AUC and the advantage weigh both classes equally, so the balance is not needed and a
    17-image draw only adds variance). Returns, for each of ``nodes`` (sorted, distinct; default every
    node), the kept member slots (rows, M) of the padded local sets, and the test indices (rows, C) with
    their mask (rows, C). Only those rows are held: the victims of 30000 nodes against 40000 held-out
    samples, not a nodes x samples array; the draws are those of every node's (rows kept from the stream)."""
    nodes = np.arange(len(counts)) if nodes is None else np.asarray(nodes)
    mine = counts[nodes]
    slots = np.arange(counts.max())
    if pool == "all":
        return (
            torch.as_tensor(slots < mine[:, None]),
            torch.arange(n_test).expand(len(nodes), -1),  # one held-out set for all: a view, no copy
            torch.ones(1, n_test, dtype=torch.bool).expand(len(nodes), -1),
        )
    keep_count = np.minimum(mine, n_test)
    keys = np.where(slots < mine[:, None], _kept_rows(rng, len(counts), len(slots), nodes), 2.0)
    members = keys.argsort(1).argsort(1) < keep_count[:, None]
    outside = _kept_rows(rng, len(counts), n_test, nodes).argsort(1)[:, : keep_count.max()]
    return (
        torch.as_tensor(members),
        torch.as_tensor(outside),
        torch.as_tensor(np.arange(outside.shape[1]) < keep_count[:, None]),
    )


DRAW_BLOCK = 2**22  # uniform draws held at once (32 MB) while the rows of other nodes are skipped


def _kept_rows(rng: np.random.Generator, rows: int, width: int, kept: np.ndarray) -> np.ndarray:
    """``rng.random((rows, width))[kept]`` drawn a block of rows at a time, so only the kept rows are
    held: a Generator fills an array in order, so the numbers are the whole draw's and ``rng`` ends where
    that draw would leave it."""
    out = np.empty((len(kept), width))
    block = max(1, DRAW_BLOCK // max(width, 1))
    for start in range(0, rows, block):
        drawn = rng.random((min(block, rows - start), width))
        here = np.flatnonzero((kept >= start) & (kept < start + block))
        out[here] = drawn[kept[here] - start]
    return out


@dataclass(eq=False)
class Scored:
    """One row per tested model (statistics, their null summaries, sample counts) and the raw null draws
    ``null[stat]`` (K, B) that the summary averages over victims before taking quantiles."""

    table: pd.DataFrame
    null: dict[str, np.ndarray]


def score_targets(
    model: FunctionalModel,
    targets: Targets,
    truth: Truth,
    score: str,
    thresholds: int,
    seeds: Seeds,
    permutations: int = 200,
    chunk: int = 64,
    pool: str = "balanced",
) -> Scored:
    """Membership statistics of each tested model on the victim's (subsampled) training set against as
    many test samples (``pool="all"``: its whole training set against the whole test set), each beside
    ``permutations`` shuffled-membership draws (seed stream ``attack.mia.null``), and the model's
    generalisation error acc(X) - acc(O) on the union X of the training sets and the test set O (Sec. 3)."""
    local, data = truth.local, truth.dataset
    victims = torch.as_tensor(targets.table.victim.to_numpy().copy())
    # one set of relabellings per victim, shared by all its rows, so that means and maxima over rounds
    # and views have a valid null too; the sets are built for the victims alone (row ``which``)
    once, which = torch.unique(victims, return_inverse=True)
    keep, outside_idx, outside_mask = balanced_sets(
        local.counts.numpy(), len(data.x_test), seeds.numpy("attack.mia.balance"), pool, once.numpy()
    )
    pools = _Pools(model, SCORES[score], thresholds, local, data, keep, outside_idx, outside_mask)
    # the statistics and a group's relabellings hold a few (rows, permutations, samples) float64 tensors:
    # about 0.5 GB at most, however many victims (a thousand neighbours of one node: 50 GB at once)
    samples = keep.shape[1] + outside_idx.shape[1]
    chunk = max(1, min(chunk, int(MIA_MEMORY // (8 * 6 * permutations * samples))))
    generator = seeds.torch("attack.mia.null")
    order = torch.argsort(which, stable=True)  # the rows victim by victim, a group of victims at a time
    grouped = which[order]
    parts: list[tuple[torch.Tensor, dict[str, np.ndarray]]] = []
    for low in range(0, len(once), chunk):
        high = min(low + chunk, len(once))
        members = torch.cat([keep[low:high], torch.zeros_like(outside_mask[low:high])], 1)
        valid = torch.cat([keep[low:high], outside_mask[low:high]], 1)
        relabelled = shuffled_labels(members, valid, permutations, generator)
        rows = order[torch.searchsorted(grouped, low) : torch.searchsorted(grouped, high)]
        for start in range(0, len(rows), chunk):
            idx = rows[start : start + chunk]
            parts.append(
                (
                    idx,
                    pools.score(targets.models[idx], victims[idx], which[idx], relabelled[which[idx] - low]),
                )
            )
    back = torch.argsort(torch.cat([idx for idx, _ in parts])).numpy()  # the table's own row order
    found = {key: np.concatenate([part[key] for _, part in parts])[back] for key in parts[0][1]}
    null = {name: found.pop(f"null {name}") for name in STATISTICS}
    out = {}
    for name in STATISTICS:
        out[name] = found.pop(name)
        for key, values in null_summary(out[name], null[name]).items():
            out[f"{name}_{key}"] = values
    out.update(found)
    table = pd.concat([targets.table.reset_index(drop=True), pd.DataFrame(out)], axis=1)
    return Scored(table, null)


@dataclass(eq=False)
class _Pools:
    """What scoring a chunk of tested models reads: the model, the score, the victims' member slots and
    held-out indices (one row per victim), the local sets and the data."""

    model: FunctionalModel
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # a membership score (SCORES)
    thresholds: int
    local: LocalData
    data: Dataset
    keep: torch.Tensor
    outside_idx: torch.Tensor
    outside_mask: torch.Tensor

    @cached_property
    def training_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """X, the union of the local training sets (inputs, labels), gathered once."""
        return self.local.x[self.local.mask], self.local.y[self.local.mask]

    def score(
        self, thetas: torch.Tensor, v: torch.Tensor, row: torch.Tensor, relabelled: torch.Tensor
    ) -> dict:
        """Statistics of models ``thetas`` against victims ``v`` (pool rows ``row``), their null under
        ``relabelled``, the pool sizes and the generalisation error, one entry per model."""
        local, data, fn = self.local, self.data, self.fn
        x_all, y_all = self.training_set
        with torch.no_grad():
            inside = forward_many(self.model, thetas, local.x[v], shared=False)
            outside = forward_many(self.model, thetas, data.x_test, shared=True)
            train = forward_many(self.model, thetas, x_all, shared=True)
        s_out = fn(outside.double(), data.y_test.expand(len(v), -1)).gather(1, self.outside_idx[row])
        pooled = torch.cat([fn(inside.double(), local.y[v]), s_out], 1)
        # a model holding NaN or inf is refused: none of its outputs is read, every score a tie (chance)
        refused = ~torch.isfinite(thetas).all(1)
        pooled = torch.where(refused[:, None], torch.nan, pooled)
        keep, mask = self.keep[row], self.outside_mask[row]
        valid = torch.cat([keep, mask], 1)
        labels = torch.cat([torch.ones_like(keep), torch.zeros_like(mask)], 1) & valid
        true = statistics(pooled, valid, labels[:, None, :], self.thresholds)
        drawn = statistics(pooled, valid, relabelled, self.thresholds)
        accuracy = hit_rate(train.argmax(-1) == y_all, 1) - hit_rate(outside.argmax(-1) == data.y_test, 1)
        return {
            **{name: true[name][:, 0].numpy() for name in STATISTICS},
            **{f"null {name}": drawn[name].numpy() for name in STATISTICS},
            "members": keep.sum(1).numpy(),
            "non_members": mask.sum(1).numpy(),
            "generalisation_error": torch.where(refused, torch.nan, accuracy).numpy(),
            "finite_model": (~refused).numpy(),
            "nonfinite_scores": (valid & ~torch.isfinite(pooled)).sum(1).numpy(),
        }


def view_summary(scored: Scored, view: str, prefix: str) -> dict[str, float]:
    """Last-round statistics of one view, each the mean over victims beside the null of that mean (each
    relabelling averaged over victims), the fraction of victims whose own AUC beats their own null's
    97.5% point and the median AUC beside it, and the maximum over rounds of the mean advantage beside the
    maximum over rounds of the same relabelling's mean."""
    table = scored.table
    rows = np.flatnonzero((table.view == view) & (table["round"] == table["round"].max()))
    summary = {}
    for name in STATISTICS:
        summary.update(
            versus_null(
                f"{prefix}_{view}_{name}",
                table[name].to_numpy()[rows].mean(),
                scored.null[name][rows].mean(0),
            )
        )
    # the mean hides a split: how many victims are themselves inferred (their AUC above their own null)
    auc, hi = table.auc.to_numpy()[rows], table.auc_null_hi.to_numpy()[rows]
    summary[f"{prefix}_{view}_victims"] = len(rows)
    summary[f"{prefix}_{view}_fraction_above_null"] = float((auc > hi).mean())
    summary[f"{prefix}_{view}_auc_median"] = float(np.median(auc))
    mine = table[table.view == view]
    per_round = [mine.index.to_numpy()[idx] for idx in mine.groupby("round").indices.values()]
    means = np.array([table.advantage.to_numpy()[idx].mean() for idx in per_round])
    draws = np.stack([scored.null["advantage"][idx].mean(0) for idx in per_round])
    summary.update(versus_null(f"{prefix}_{view}_max_advantage", means.max(), draws.max(0)))
    return summary


def versus_null(key: str, value: float, draws: np.ndarray) -> dict[str, float]:
    """``key`` = value, then ``key_null_mean/lo/hi``, ``key_p_value`` and ``key_above_null`` (value > the
    null's 97.5th percentile)."""
    out = {key: float(value)}
    out.update({f"{key}_{k}": float(v) for k, v in null_summary(np.asarray(value), draws).items()})
    out[f"{key}_above_null"] = bool(value > out[f"{key}_null_hi"])
    return out


def mia_report(scored: Scored, prefix: str = "mia") -> Findings:
    """Summary (last round, mean over victims, per view, beside its null) and the plots."""
    table = scored.table
    summary = {
        f"{prefix}_members_per_victim": float(table.members.mean()),
        f"{prefix}_non_members_per_victim": float(table.non_members.mean()),
    }
    views = [v for v in sorted(table.view.unique()) if not repeats_a_view(table, v)]
    for name in views:
        summary.update(view_summary(scored, name, prefix))
    summary[f"{prefix}_nonfinite_models"] = int((~table.finite_model).sum())
    summary[f"{prefix}_nonfinite_scores"] = int(table.nonfinite_scores[table.finite_model].sum())
    summary["verdict"] = mia_verdict(summary, views, prefix, int(table.victim.nunique())) + nonfinite_note(
        summary, prefix, len(table)
    )
    figures = {f"plots/{prefix}_vs_generalisation.png": partial(mia_figure, scored)}
    return Findings(tables={prefix: table}, summary=summary, figures=figures)


def repeats_a_view(table: pd.DataFrame, view: str) -> bool:
    """Whether ``view`` is ``auto`` and, at the last round (the summary's), chose for every victim the
    view that is reported beside it: the same models, so one result would count twice. The per-round
    table and plots keep it (over rounds it switches views)."""
    if view != "auto":
        return False
    last = table[(table.view == "auto") & (table["round"] == table["round"].max())]
    chosen = {"marginalised" if m else "received" for m in last.marginalised}
    return len(chosen) == 1 and chosen <= set(table.view)


def mia_verdict(summary: dict, views: list[str], prefix: str, victims: int) -> str:
    """One line: each view's last-round AUC beside the 97.5th percentile of its shuffled-membership null,
    and on how many views membership was inferred (the AUC above that percentile)."""
    above = [v for v in views if summary[f"{prefix}_{v}_auc_above_null"]]
    each = ", ".join(
        f"{v} {summary[f'{prefix}_{v}_auc']:.3f} (null {summary[f'{prefix}_{v}_auc_null_hi']:.3f}; "
        f"{round(summary[f'{prefix}_{v}_fraction_above_null'] * summary[f'{prefix}_{v}_victims'])} of "
        f"{summary[f'{prefix}_{v}_victims']} victims above their own null)"
        for v in views
    )
    members, outside = summary[f"{prefix}_members_per_victim"], summary[f"{prefix}_non_members_per_victim"]
    against = "as many" if round(members) == round(outside) else f"{outside:.0f}"
    outcome = (
        f"membership inferred from {len(above)} of {len(views)} view(s) ({', '.join(above)})"
        if above
        else "no view beats its null: membership not inferred"
    )
    return (
        f"{prefix}: AUC over {victims} victim(s), {members:.0f} members vs {against} non-members each, "
        f"last round: {each} (null: 97.5% of shuffled membership); {outcome}."
    )


def nonfinite_note(summary: dict, prefix: str, models: int) -> str:
    """The verdict's words for tested models that hold NaN or inf (refused: scored as chance, a failure
    of the attack) and for finite models whose scores overflowed (tied, ranked least member-like)."""
    refused, overflowed = summary[f"{prefix}_nonfinite_models"], summary[f"{prefix}_nonfinite_scores"]
    note = ""
    if refused:
        note += (
            f" {refused} of {models} tested model(s) hold NaN or inf: refused, each scored as chance "
            "(AUC 0.5, advantage 0), a failure of the attack."
        )
    if overflowed:
        note += (
            f" {overflowed} score(s) of finite models came out NaN or inf: tied, ranked least member-like."
        )
    return note


def per_round_null(scored: Scored, stat: str) -> pd.DataFrame:
    """Per view and round: the mean over victims of ``stat`` and the 95% interval of its null."""
    table = scored.table
    rows = []
    for (view, round_), idx in table.groupby(["view", "round"]).indices.items():
        draws = scored.null[stat][idx].mean(0)
        rows.append(
            {
                "view": view,
                "round": round_,
                stat: table[stat].to_numpy()[idx].mean(),
                "generalisation_error": table.generalisation_error.to_numpy()[idx].mean(),
                "lo": np.quantile(draws, 0.025),
                "hi": np.quantile(draws, 0.975),
            }
        )
    return pd.DataFrame(rows)


def mia_figure(scored: Scored) -> "Figure":
    """Advantage and AUC over rounds, each with the 95% band of its shuffled-membership null, and the
    advantage against the generalisation error of the network's state that round (the mean over victims
    of the received or global model's acc(X) - acc(O), the paper's x axis)."""
    fig, axes = subplots(1, 3, figsize=(15, 4.2))
    place(fig, wspace=0.85, top=0.75)
    state = scored.table[scored.table.view.isin(["received", "fl_global"])]
    state = state.groupby("round").generalisation_error.mean()
    for ax, stat in zip(axes[:2], ("advantage", "auc"), strict=True):
        frame = per_round_null(scored, stat)
        for i, (name, part) in enumerate(frame.groupby("view")):
            colour = f"C{i}"
            ax.plot(part["round"], part[stat], marker="o", ms=3, color=colour, label=name)
            ax.fill_between(part["round"], part.lo, part.hi, color=colour, alpha=0.15, lw=0)
            if stat == "advantage":
                axes[2].scatter(part["round"].map(state), part[stat], s=14, color=colour, label=name)
                axes[2].scatter(part["round"].map(state), part.hi, s=10, color=colour, marker="_")
        ax.set(xlabel="round", ylabel=stat, title=f"{stat} over rounds (band: 95% null, shuffled labels)")
    axes[0].set_ylabel("MIA advantage (best-threshold accuracy - 0.5)")
    axes[1].set_ylabel("ROC AUC")
    axes[2].set(
        xlabel="generalisation error of the received models",
        ylabel="MIA advantage (dash: null 97.5%)",
        title="vs generalisation error",
    )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    members, outside = int(scored.table.members.median()), int(scored.table.non_members.median())
    fig.suptitle(f"membership inference, mean over victims ({members} members vs {outside} non-members each)")
    return fig


@checked("attack")
class MembershipInference(Attack):
    """Threshold attack on the modified entropy or the loss of each tested model (Sec. 4.1)."""

    name = "mia"
    headline = tuple(  # the plain view first, then the marginalised, then the others (auto, FedAvg's)
        Headline(
            f"mia_{view}_auc",
            f"mia_{view}_auc_null_hi",
            "higher",
            "97.5% point of a shuffled-membership null",
        )
        for view in ("received", "marginalised", "*")
    )

    def __init__(
        self,
        score: Score = "mentr",
        every: Annotated[int, Range(ge=1, what="the attack's round spacing", eg=5)] = 1,
        marginalize: bool | Literal["auto"] = False,
        thresholds: Annotated[int, Range(ge=2, what="the ROC's threshold count", eg=150)] = 150,
        permutations: Annotated[
            int, Range(ge=40, what="the shuffled-membership draws of a 95% null interval", eg=200)
        ] = 200,
        non_members: Literal["all", "balanced"] = "all",
    ):
        self.score, self.every, self.marginalize, self.thresholds = score, every, marginalize, thresholds
        self.permutations, self.non_members = permutations, non_members

    def prepare(self, context: AttackContext) -> bool:
        """Plan: whether the view is a FedAvg server's (every update) rather than a D-PSGD node's."""
        data, protocol, adversary, network = (
            context.data,
            context.protocol,
            context.adversary,
            context.network,
        )
        if data.test_size == 0:
            raise bad_value(
                "data", data.name, "no held-out set to draw non-members from", "use data with a test split"
            )
        if data.task != "classification":
            raise bad_value(
                "data",
                data.name,
                "membership scores need class probabilities",
                "use a classification data set",
            )
        if context.model.loss_name == "half_squared_error":  # a regression on the labels: no probabilities
            raise bad_value(
                "model",
                context.choices.get("model", "linear_regression"),
                "membership scores need class probabilities, and a regression model gives one number",
                "use model=softmax or mlp (or ~attack to train only)",
            )
        if protocol.name in ("fedavg", "fedsgd"):
            if len(adversary.observed_senders(network)) < network.n:
                raise bad_value(
                    "adversary.eavesdropper",
                    adversary.eavesdropper,
                    "the FedAvg server view needs every update",
                    "use adversary=server (or set adversary.eavesdropper=true)",
                )
            if self.marginalize is not False:  # the default false: a value the user set
                raise bad_value(
                    "attack.marginalize",
                    self.marginalize,
                    "marginalisation reads a D-PSGD node's received models (Pasquini et al. 2023, Eqs. 7-8); "
                    "the FedAvg server reads each update and the global model",
                    "drop attack.marginalize, or use protocol=dsgd",
                )
            return True
        if protocol.name != "dsgd":
            raise bad_value(
                "protocol",
                protocol.name,
                "this attack reads D-PSGD or FedAvg updates",
                "use protocol=dsgd or fedavg",
            )
        require_neighbours(network, adversary.nodes)
        return False

    def run(self, view: View) -> Targets:
        rounds = attacked_rounds(view, self.every)
        if view.plan:
            return fl_targets(view, rounds)
        return dl_targets(view, rounds, self.marginalize)

    def expected(self, view: View) -> tuple[pd.DataFrame, str]:
        """The targets, fixed by the threat model (not by the finding): every round the attack reads (the
        transcript's, ``attack.every``), every view its config asks for, and every victim: a FedAvg
        server's every user (an update it holds in the clear, and the global model), a D-PSGD attacker's
        every honest neighbour (the lowest-index attacker adjacent to it). With what they are, in words."""
        rounds = attacked_rounds(view, self.every)
        if "participants" in view.public:  # the protocol's own public record: a FedAvg server's view
            n = view.network.n
            readable = ~encrypted_updates(view, torch.as_tensor(rows_of(view, rounds)), n).numpy()
            r, v = np.nonzero(readable)
            update = pd.DataFrame({"round": rounds[r], "victim": v, "view": "fl_update"})
            r, v = (a.ravel() for a in np.meshgrid(np.arange(len(rounds)), np.arange(n), indexing="ij"))
            glob = pd.DataFrame({"round": rounds[r], "victim": v, "view": "fl_global"})
            table = pd.concat([update, glob], ignore_index=True).assign(attacker=-1)
            return table, "every user of the FedAvg server's view, each round it reads"
        victims, attackers = victims_of(view)
        names = {
            False: ["received"],
            True: ["received", "marginalised", "auto"],
            "auto": ["auto", "received"],
        }
        grid = pd.MultiIndex.from_product(
            [rounds, np.arange(len(victims)), names[self.marginalize]], names=["round", "slot", "view"]
        ).to_frame(index=False)
        table = pd.DataFrame(
            {
                "round": grid["round"],
                "victim": victims[grid.slot],
                "view": grid.view,
                "attacker": attackers[grid.slot],
            }
        )
        return table, "the attackers' honest neighbours, each round it reads"

    def evaluate(self, findings: Targets, truth: Truth, view: View) -> Findings:
        expected, whose = self.expected(view)
        table, models = fixed_targets(self.name, findings.table, findings.models, expected, whose)
        table["marginalised"] = table["marginalised"].eq(True)  # an omitted target: tested as received
        findings = Targets(table, models, findings.encrypted)
        report = mia_report(
            score_targets(
                view.model,
                findings,
                truth,
                self.score,
                self.thresholds,
                view.seeds,
                self.permutations,
                pool=self.non_members,
            )
        )
        if findings.encrypted:
            report.summary["mia_fl_update_ciphertexts_only"] = findings.encrypted
            report.summary["verdict"] += (
                f" fl_update: not tested, the server holds only ciphertexts of {findings.encrypted} "
                "individual updates and no secret key to read them."
            )
        return report
