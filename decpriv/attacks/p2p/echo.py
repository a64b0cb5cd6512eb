"""Echo attack (Pasquini et al. 2023, Sec. 5.1 and App. A, Algorithm 2).

Each round the attacker A broadcasts, instead of its own update, the victim v's marginalised update
    theta_tilde = (|N(A)| - 1) theta_v^{t+1/2} - sum_{u in N(A), u != v, A} theta_u^{t+1/2}
(|N(A)| counts A and v), or the received theta_v^{t+1/2} itself (``variant=received``), pushing v to
overfit its own data. Scored by the local generalisation error of the victim vs the other neighbours
of A over rounds, and by membership inference on the updates v sends.
"""

from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.behaviour import Behaviour, Forgery
from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.mia import Targets, attacked_rounds, forward_many, rows_of, score_targets
from decpriv.attacks.p2p.neighbourhood import closed, require_neighbours, require_victim, updates
from decpriv.attacks.targets import fixed_targets
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.metrics.rates import hit_rate
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.report.plots import metric_plot
from decpriv.seal.truth import Truth


class Echoing(Behaviour):
    """Replaces attacker ``a``'s broadcast by the victim's (marginalised) update, to every neighbour."""

    def __init__(self, attacker: int, victim: int, hood: np.ndarray, senders: np.ndarray, variant: str):
        self.attacker, self.victim, self.variant = attacker, victim, variant
        self.receivers = np.setdiff1d(hood, [attacker])
        others = np.setdiff1d(hood, [attacker, victim])
        self.v_col = int(np.searchsorted(senders, victim))
        self.others = torch.as_tensor(np.searchsorted(senders, others))
        self.k = len(hood)

    def forge(self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor) -> Forgery:
        theta_v = observed[self.v_col]
        echo = theta_v
        if self.variant == "marginalised":
            echo = (self.k - 1) * theta_v - observed[self.others.to(observed.device)].sum(0)
        values = echo.expand(len(self.receivers), -1)
        return Forgery(np.full(len(self.receivers), self.attacker), self.receivers, values)


@dataclass(eq=False)
class Echoed:
    victim: int
    watched: np.ndarray  # the attacker's honest neighbours (victim included)
    rounds: np.ndarray
    models: torch.Tensor  # (R, len(watched), p) their updates
    targets: Targets  # every watched node's updates, for membership inference


@checked("attack")
class Echo(Attack):
    """One attacker echoes one neighbour's update back to its whole neighbourhood every round."""

    name = "echo"
    headline = (
        Headline(
            "echo_victim_mia_advantage", "echo_others_mia_advantage", "higher", "the neighbours not echoed"
        ),
    )
    active = True  # forges messages (behaviour)

    def __init__(
        self,
        victim: int | None = None,
        variant: Literal["marginalised", "received"] = "marginalised",
        every: Annotated[int, Range(ge=1, what="the attack's round spacing", eg=5)] = 5,
        thresholds: int = 150,
    ):
        self.victim, self.variant, self.every, self.thresholds = victim, variant, every, thresholds

    def prepare(self, context: AttackContext) -> int:
        """Plan: the neighbour whose update is echoed (``attack.victim`` or the least connected)."""
        net, adv, protocol = context.network, context.adversary, context.protocol
        if protocol.name != "dsgd" or protocol.gossip_steps != 1:
            raise bad_value(
                "protocol", protocol.name, "echo targets D-PSGD", "use protocol=dsgd gossip_steps=1"
            )
        if context.data.test_size == 0:
            raise bad_value(
                "data", context.data.name, "no held-out set to score against", "use data with a test split"
            )
        require_neighbours(net, adv.nodes)
        return self.echoed(net, adv.nodes)

    def echoed(self, net, attackers: np.ndarray) -> int:
        """The neighbour whose update is echoed: ``attack.victim`` or the first attacker's least
        connected honest neighbour (public knowledge: ``prepare`` decides it, ``evaluate`` scores it)."""
        a = int(attackers[0])
        if self.victim is not None:
            require_victim(net, a, self.victim)
            return self.victim
        hood = np.setdiff1d(net.neighbours(a), attackers)
        if hood.size == 0:
            raise bad_value(
                "adversary.nodes",
                attackers.tolist(),
                f"attacker {a} has only corrupt neighbours",
                "corrupt fewer nodes",
            )
        return int(hood[np.argmin(net.degrees[hood])])

    def behaviour(self, context: AttackContext, plan: int) -> Echoing:
        a = int(context.adversary.nodes[0])
        senders = context.adversary.observed_senders(context.network)
        return Echoing(a, plan, closed(context.network, a), senders, self.variant)

    def run(self, view: View) -> Echoed:
        a = int(view.attackers[0])
        watched = np.setdiff1d(closed(view.network, a), view.attackers)
        rounds = attacked_rounds(view, self.every)
        models = updates(view.transcript, watched)[torch.as_tensor(rows_of(view, rounds))]
        r_idx, v_idx = np.meshgrid(np.arange(len(rounds)), np.arange(len(watched)), indexing="ij")
        table = pd.DataFrame(
            {
                "round": rounds[r_idx.ravel()],
                "victim": watched[v_idx.ravel()],
                "attacker": a,
                "view": np.where(watched[v_idx.ravel()] == view.plan, "echo_victim", "other_neighbour"),
                "consensus_estimate": np.nan,
                "marginalised": False,
            }
        )
        return Echoed(
            view.plan, watched, rounds, models, Targets(table, models.reshape(-1, models.shape[-1]))
        )

    def expected(self, view: View) -> tuple[pd.DataFrame, int]:
        """The targets, fixed by the threat model: every honest node of the first attacker's
        neighbourhood, every round ``attack.every`` reads, the echoed one (:meth:`echoed`) marked so."""
        a, victim = int(view.attackers[0]), self.echoed(view.network, view.attackers)
        watched = np.setdiff1d(closed(view.network, a), view.attackers)
        rounds = attacked_rounds(view, self.every)
        r, v = (x.ravel() for x in np.meshgrid(rounds, watched, indexing="ij"))
        label = np.where(v == victim, "echo_victim", "other_neighbour")
        return pd.DataFrame({"round": r, "victim": v, "view": label, "attacker": a}), victim

    def evaluate(self, findings: Echoed, truth: Truth, view: View) -> Findings:
        expected, victim = self.expected(view)
        whose = f"attacker {int(view.attackers[0])}'s honest neighbours, node {victim} the echoed one"
        found = findings.targets
        table, models = fixed_targets(self.name, found.table, found.models, expected, whose)
        table["marginalised"] = table["marginalised"].eq(True)
        findings = replace(findings, victim=victim, targets=Targets(table, models))
        table = score_targets(view.model, findings.targets, truth, "mentr", self.thresholds, view.seeds).table
        local = truth.local
        v = torch.as_tensor(table.victim.to_numpy().copy())
        with torch.no_grad():
            own = forward_many(view.model, findings.targets.models, local.x[v], shared=False).argmax(-1)
        train_acc = hit_rate(own == local.y[v], 1, local.mask[v])
        with torch.no_grad():
            outside = forward_many(view.model, findings.targets.models, truth.dataset.x_test, shared=True)
        test_acc = hit_rate(outside.argmax(-1) == truth.dataset.y_test, 1)
        # a model holding NaN or inf is refused (mia.py): its argmax is no prediction, its accuracies unknown
        refused = torch.as_tensor(~table.finite_model.to_numpy())
        train_acc = torch.where(refused, torch.nan, train_acc.double())
        test_acc = torch.where(refused, torch.nan, test_acc.double())
        # both parts kept: the error cannot exceed 1 - test accuracy, which caps the echo's amplification
        table["local_train_accuracy"] = train_acc.numpy()
        table["test_accuracy"] = test_acc.numpy()
        table["local_generalisation_error"] = (train_acc - test_acc).numpy()
        last = table[table["round"] == table["round"].max()]
        victim, others = last[last.view == "echo_victim"], last[last.view == "other_neighbour"]
        summary = {
            "echo_victim": findings.victim,
            "echo_variant": self.variant,
            "echo_victim_local_generalisation_error": float(victim.local_generalisation_error.mean()),
            "echo_others_local_generalisation_error": float(others.local_generalisation_error.mean()),
            "echo_victim_mia_advantage": float(victim.advantage.mean()),
            "echo_others_mia_advantage": float(others.advantage.mean()),
        }
        summary["verdict"] = (
            f"echo ({self.variant}) on node {findings.victim}: its local model's train - test accuracy "
            f"{summary['echo_victim_local_generalisation_error']:.3f} and MIA advantage "
            f"{summary['echo_victim_mia_advantage']:.3f}, against {summary['echo_others_local_generalisation_error']:.3f} "
            f"and {summary['echo_others_mia_advantage']:.3f} for the attacker's other neighbours (not echoed), "
            "last round."
        )
        if refused.any():
            summary["verdict"] += (
                f" {int(refused.sum())} of {len(table)} tested model(s) hold NaN or inf: refused (no accuracy, "
                "MIA at chance), a failure of the attack."
            )
        drawing = partial(
            metric_plot,
            table.rename(columns={"view": "node"}),
            x="round",
            y="local_generalisation_error",
            hue="node",
            title=f"echo on node {findings.victim}: local train - test accuracy (others: mean, std)",
        )
        return Findings(
            tables={"echo": table}, summary=summary, figures={"plots/echo_generalisation.png": drawing}
        )
