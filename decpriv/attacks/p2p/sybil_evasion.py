"""Secure-aggregation evasion with two Sybils (Pasquini et al. 2023, Sec. 6.1, Fig. 10).

The adversary controls A_a and A_b placed (``adversary.sybils`` = the victim v) so that the honest members
of N(A_b) are those of N(A_a) minus v; each Sybil aggregates its closed neighbourhood under secure
aggregation and learns only the sum, yet
    Theta_v^{t+1/2} = SA(N(A_a)) / w_a - SA(N(A_b)) / w_b - (Sybils' own updates counted in one sum only),
with w_g the (uniform, public) weight of group g, whatever the SA protocol. On a complete graph N(A_a) =
N(A_b): with fault-tolerant SA, A_b claims v dropped out of its aggregation and its sum leaves v out.

Every round the recovered update is then fed to the existing pipeline: the local step (gradient
recovery, Sec. 4.2.1) wherever v's model before the step is known (the public common initial model at
t = 0; A_a's previous aggregate when A_a and v aggregate the same group, as on a complete graph), its
inversion (``attack.invert``), and membership inference. Beside it, the same is done with what a single
curious node sees of v: the message v sent it (masked under SA) and its own aggregate.
"""

from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.adversary import SybilPair, place_sybils
from decpriv.adversary.recorder import Transcript
from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.inversion import InversionConfig, invert
from decpriv.attacks.p2p.gradient_recovery import Recovered, check_single_sgd_step, score_images
from decpriv.attacks.p2p.mia import Targets, mia_report, score_targets
from decpriv.attacks.p2p.neighbourhood import updates
from decpriv.attacks.p2p.scores import Score
from decpriv.attacks.targets import TargetRefused, fixed_targets
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.graphs.network import Network
from decpriv.random import streams as rng
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.report.plots import subplots
from decpriv.seal.truth import Truth

EXACT = 1e-6  # relative error below which a recovery counts as exact (float64 runs)


def group_of(network: Network, node: int) -> tuple[np.ndarray, float]:
    """Members of ``node``'s aggregation (nonzeros of its row of W) and their common weight, or NaN when
    the weights differ (the Sybils then cannot un-weight their sums)."""
    row = network.W[[node]]
    members, weights = row.indices, row.data
    common = float(weights[0]) if np.allclose(weights, weights[0], rtol=1e-12, atol=0) else float("nan")
    return np.sort(members), common


@dataclass(eq=False)
class Evasion:
    rounds: np.ndarray  # (R,) recorded rounds
    recovered: torch.Tensor  # (R, p) SA(N(A_a)) / w_a - SA(N(A_b)) / w_b - corrections
    received: torch.Tensor  # (R, p) the message v sent A_a (masked under SA)
    aggregate: torch.Tensor  # (R, p) A_a's own aggregate (its next model)
    bases: torch.Tensor  # (R, p) v's model before the round's step, NaN where unknown
    noise: torch.Tensor  # (R, p) uniform noise at the scale of ``received``: the no-information baseline
    recovery: Recovered | None = None  # inverted steps (attack.invert)


def group_sum(transcript: Transcript, rows: np.ndarray, attackers: np.ndarray, network: Network, g: int):
    """(R, p) the sum SA revealed to corrupt aggregator g, or without SA the weighted sum of the plain
    updates it received (what it averages)."""
    if transcript.aggregates is not None:
        return transcript.aggregates[torch.as_tensor(rows), int(np.searchsorted(attackers, g))]
    members, weight = group_of(network, g)
    return weight * updates(transcript, members).sum(1)


def received_from(transcript: Transcript, rows: np.ndarray, sender: int, receiver: int) -> torch.Tensor:
    hit = (transcript.senders == sender) & np.isin(transcript.receivers, [receiver, -1])
    return transcript.values[torch.as_tensor(rows), int(np.flatnonzero(hit)[0])]


def evade(view: View, pair: SybilPair, generator: torch.Generator) -> Evasion:
    """Every recorded round at once: the difference of the Sybils' sums, corrected for their own updates."""
    T, net = view.transcript, view.network
    rows = np.flatnonzero(T.times[:, 1] == 0)
    rounds = T.times[rows, 0]
    a, b, v = pair.a, pair.b, pair.victim
    group_a, w_a = group_of(net, a)
    group_b, w_b = group_of(net, b)
    sum_a = group_sum(T, rows, view.attackers, net, a)
    sum_b = group_sum(T, rows, view.attackers, net, b)
    if pair.dropout and T.aggregates is None:  # without SA, A_b simply leaves v out of its own sum
        sum_b = sum_b - w_b * received_from(T, rows, v, b)
    own = updates(T, np.array([a, b]))[torch.as_tensor(rows)]  # (R, 2, p) the Sybils' own updates
    only_a = torch.as_tensor([float(c in group_a) - float(c in group_b) for c in (a, b)], dtype=own.dtype)
    recovered = sum_a / w_a - sum_b / w_b - torch.einsum("c,rcp->rp", only_a, own)
    aggregate = sum_a / (w_a * len(group_a))
    bases = torch.full_like(recovered, float("nan"))
    initial = view.public.get("initial_model")
    if initial is not None and rounds.size and rounds[0] == 0:
        bases[0] = initial.to(bases.dtype)
    group_v, w_v = group_of(net, v)
    if np.array_equal(group_v, group_a) and w_v == w_a:  # v's model is A_a's previous aggregate
        follows = np.flatnonzero(rounds[1:] == rounds[:-1] + 1) + 1
        bases[follows] = aggregate[follows - 1]
    received = received_from(T, rows, v, a)
    scale = torch.nan_to_num(received, nan=0.0).abs().amax(1, keepdim=True)
    uniform = rng.uniform(received.shape, generator, received.device, received.dtype)
    return Evasion(rounds, recovered, received, aggregate, bases, (2 * uniform - 1) * scale)


def sybil_pair(attack: str, view: View) -> SybilPair:
    """The pair the threat model places, rebuilt from the pipeline's graph and attackers (the two Sybils):
    the victim is the one node (not a Sybil) whose membership differs between their closed
    neighbourhoods, the pair ``place_sybils`` puts around it. On a complete graph (the drop-out claim)
    every honest node qualifies: the victim is then the one ``adversary.sybils`` named in the config."""
    claimed, attackers = view.plan, view.attackers
    hood = view.network.adjacency.toarray() > 0
    np.fill_diagonal(hood, True)
    if len(attackers) == 2:
        differ = np.flatnonzero(hood[attackers[0]] != hood[attackers[1]])
        differ = np.setdiff1d(differ, attackers)
        placed = getattr(view.sybils, "victim", -1)
        victim = int(differ[0]) if len(differ) == 1 else placed
        if 0 <= victim < view.network.n and victim not in attackers:
            pair = place_sybils(view.network, int(victim), attackers.tolist())
            fields = ("victim", "a", "b", "dropout")
            if all(getattr(claimed, f, None) == getattr(pair, f) for f in fields):
                return claimed  # ``rewired`` says how the graph came about, not whom it attacks
    raise TargetRefused(
        f"attack={attack}: its plan names the Sybil pair {claimed}, which is not the pair the adversary's "
        f"nodes {attackers.tolist()} place on this graph (fixed outside the attack); a finding cannot choose "
        "what it is scored on"
    )


def error_figure(table: pd.DataFrame):
    """Relative error of each view of the victim's update over rounds (log scale)."""
    fig, ax = subplots(figsize=(6.5, 4))
    for column, label in (
        ("recovered_relative_error", "two Sybils: SA(N(A_a)) - SA(N(A_b))"),
        ("received_relative_error", "one node: the message v sent it"),
        ("aggregate_relative_error", "one node: its aggregate"),
    ):
        ax.plot(table["round"], table[column].clip(lower=1e-17), marker="o", ms=3, label=label)
    ax.axhline(EXACT, color="grey", ls=":", label=f"exact ({EXACT:g})")
    ax.set(yscale="log", xlabel="round", ylabel="relative error vs the victim's true update")
    ax.set_title(f"recovering node {int(table.victim.iloc[0])}'s update", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    return fig


@checked("attack")
class SybilEvasion(Attack):
    """Recover one victim's update from two Sybils' aggregates; score it and the attacks it feeds."""

    name = "sybil_evasion"
    headline = (
        Headline(
            "sybil_max_relative_error", "received_min_relative_error", "lower", "what one node receives"
        ),
    )

    def __init__(
        self,
        invert: Annotated[int, Range(ge=0, what="the number of inverted updates")] = 0,
        iterations: Annotated[int, Range(ge=1, what="the inversion's iterations")] = 200,
        restarts: Annotated[int, Range(ge=1, what="the inversion's restarts")] = 1,
        score: Score = "mentr",
        every: Annotated[int, Range(ge=1, what="the attack's round spacing")] = 1,
        thresholds: Annotated[int, Range(ge=2, what="the ROC's threshold count")] = 150,
        permutations: Annotated[int, Range(ge=1, what="the shuffled-membership draws")] = 200,
    ):
        self.invert, self.config = invert, InversionConfig(iterations=iterations, restarts=restarts)
        self.score, self.every, self.thresholds, self.permutations = score, every, thresholds, permutations

    def prepare(self, context: AttackContext) -> SybilPair:
        """Plan: the victim and its two Sybils."""
        proto, net, pair, data = context.protocol, context.network, context.adversary.sybils, context.data
        if proto.name != "dsgd" or proto.gossip_steps != 1:
            raise bad_value(
                "protocol",
                proto.name,
                "the Sybils difference D-PSGD aggregates of one gossip step",
                "use protocol=dsgd gossip_steps=1",
            )
        if pair is None:
            raise bad_value(
                "adversary.sybils",
                None,
                "attack=sybil_evasion needs a victim with two Sybils placed around it",
                "set adversary.sybils=<victim index>",
            )
        for g in (pair.a, pair.b):
            if np.isnan(group_of(net, g)[1]):
                raise bad_value(
                    "gossip_matrix",
                    context.choices.get("gossip_matrix", "?"),
                    f"Sybil {g} weights its group's members unequally, so its sum cannot be un-weighted",
                    "use gossip_matrix=uniform (D-PSGD)",
                )
        if data.test_size == 0 or data.task != "classification":
            raise bad_value(
                "data",
                data.name,
                "membership inference needs a classification test set",
                "use e.g. data=digits",
            )
        check_single_sgd_step(proto, self.invert)
        return pair

    def run(self, view: View) -> Evasion:
        found = evade(view, view.plan, view.seeds.torch("attack.noise"))
        if not self.invert:
            return found
        known = np.flatnonzero(~torch.isnan(found.bases).any(1).numpy())[: self.invert]
        steps = found.bases[known] - found.recovered[known]
        hyper, spec = view.hyper, view.data_spec
        generator = view.seeds.torch("attack.inversion")
        images = [
            invert(
                view.model,
                found.bases[k],
                step / hyper["lr"],
                spec.input_shape,
                spec.num_classes,
                batch_size=hyper["batch_size"],
                data_range=spec.data_range,
                config=self.config,
                generator=generator,
            ).x
            for k, step in zip(known, steps, strict=True)
        ]
        table = pd.DataFrame({"round": found.rounds[known], "victim": view.plan.victim})
        found.recovery = Recovered(table, found.bases[known], steps, pd.DataFrame(), torch.stack(images))
        return found

    def truth_updates(self, truth: Truth, view: View) -> torch.Tensor:
        """(R, p) what v really sent each round: the plain messages behind the masks (SA), else the
        plain broadcast the transcript already holds."""
        T, v = view.transcript, view.plan.victim
        rows = np.flatnonzero(T.times[:, 1] == 0)
        if "plain_messages" in truth.extras:
            col = int(np.searchsorted(truth.extras["plain_senders"], v))
            return truth.extras["plain_messages"][torch.as_tensor(rows), col]
        return received_from(T, rows, v, -1)

    def fixed(self, findings: Evasion, view: View) -> tuple[SybilPair, Evasion]:
        """The finding on the threat model's pair and rounds: the plan's pair (from the sealed ``prepare``)
        must be the one the pipeline's attackers and graph place (``sybil_pair``); every recorded round is
        scored, one the finding names outside refused, one omitted scored as what one node receives (the
        baseline); the baselines themselves (what one node receives, its aggregate, the noise, the known
        bases) are the pipeline's own ``evade``, never the finding's."""
        pair = sybil_pair(self.name, view)
        own = evade(view, pair, view.seeds.torch("attack.noise"))
        expected = pd.DataFrame({"round": own.rounds})
        named = pd.DataFrame({"round": np.asarray(findings.rounds)})
        whose = "every round the transcript records"
        table, recovered = fixed_targets(self.name, named, findings.recovered, expected, whose)
        recovered = recovered[torch.as_tensor(pd.Index(table["round"]).get_indexer(own.rounds))]
        recovered = torch.where(torch.isnan(recovered).all(1, keepdim=True), own.received, recovered)
        recovery = findings.recovery
        if recovery is not None:
            fixed_targets(self.name, recovery.table[["round"]], recovery.steps, expected, whose)
            recovery = replace(recovery, table=recovery.table.assign(victim=pair.victim))
        return pair, replace(own, recovered=recovered.to(own.received.dtype), recovery=recovery)

    def evaluate(self, findings: Evasion, truth: Truth, view: View) -> Findings:
        pair, findings = self.fixed(findings, view)
        rounds = findings.rounds
        true = self.truth_updates(truth, view).to(findings.recovered.dtype)
        norm = true.norm(dim=1).clamp_min(1e-300)

        def rel(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor) -> np.ndarray:
            return ((x - y).norm(dim=1) / scale).numpy()

        true_step = findings.bases - true
        step_norm = true_step.norm(dim=1).clamp_min(1e-300)
        table = pd.DataFrame(
            {
                "round": rounds,
                "victim": pair.victim,
                "sybil_a": pair.a,
                "sybil_b": pair.b,
                "recovered_relative_error": rel(findings.recovered, true, norm),
                "received_relative_error": rel(findings.received, true, norm),
                "aggregate_relative_error": rel(findings.aggregate, true, norm),
                "base_known": ~torch.isnan(findings.bases).any(1).numpy(),
                "recovered_step_relative_error": rel(
                    findings.bases - findings.recovered, true_step, step_norm
                ),
                "received_step_relative_error": rel(findings.bases - findings.received, true_step, step_norm),
            }
        )
        known = table[table.base_known]
        summary = {
            "sybil_victim": pair.victim,
            "sybil_dropout_claim": pair.dropout,
            "sybil_rounds": len(table),
            "sybil_max_relative_error": float(table.recovered_relative_error.max()),
            "sybil_exact_fraction": float((table.recovered_relative_error <= EXACT).mean()),
            "received_min_relative_error": float(table.received_relative_error.min()),
            "aggregate_min_relative_error": float(table.aggregate_relative_error.min()),
            "sybil_steps_known": len(known),
            "sybil_step_max_relative_error": float(known.recovered_step_relative_error.max())
            if len(known)
            else float("nan"),
            "received_step_min_relative_error": float(known.received_step_relative_error.min())
            if len(known)
            else float("nan"),
        }
        summary["verdict"] = (
            f"sybil evasion: two Sybils around node {pair.victim} recovered its update in {len(table)} round(s), "
            f"relative error at most {summary['sybil_max_relative_error']:.2g} ({summary['sybil_exact_fraction']:.0%}"
            f" exact), against at best {summary['received_min_relative_error']:.2g} from what one node receives "
            f"and {summary['aggregate_min_relative_error']:.2g} from the aggregate."
        )
        figures = {"plots/sybil_evasion.png": partial(error_figure, table)}
        report = Findings(tables={"sybil_evasion": table}, summary=summary, figures=figures)
        verdict = summary["verdict"]
        report.merge(self.membership(findings, true, truth, view))
        report.summary["verdict"] = verdict  # the recovery is the attack; its MIA rows stay in the table
        if findings.recovery is not None:
            inverted, summary["sybil_inversion_nearest_mse"], figures = score_images(findings.recovery, truth)
            report.tables["sybil_inversion"] = inverted
            report.figures.update(figures)
        return report

    def membership(self, findings: Evasion, true: torch.Tensor, truth: Truth, view: View) -> Findings:
        """MIA on each view of v's update. Baselines: ``noise``, a model drawn without any data (what a
        view that carries no information scores, class-composition effects of the victim's set included);
        ``true_update``, the plain update (scoring reference: what a node seeing it in the clear tests)."""
        rounds = findings.rounds
        pick = np.flatnonzero((rounds % self.every == 0) | (rounds == rounds.max()))
        views = {
            "sybil_recovered": findings.recovered,
            "received": findings.received,
            "aggregate": findings.aggregate,
            "noise": findings.noise,
            "true_update": true,
        }
        table = pd.concat(
            [
                pd.DataFrame(
                    {
                        "round": rounds[pick],
                        "victim": view.plan.victim,
                        "attacker": view.plan.a,
                        "view": name,
                        "consensus_estimate": float("nan"),
                        "marginalised": False,
                    }
                )
                for name in views
            ],
            ignore_index=True,
        )
        models = torch.cat([torch.nan_to_num(m[torch.as_tensor(pick)]) for m in views.values()])
        scored = score_targets(
            view.model,
            Targets(table, models),
            truth,
            self.score,
            self.thresholds,
            view.seeds,
            self.permutations,
        )
        return mia_report(scored, prefix="sybil_mia")
