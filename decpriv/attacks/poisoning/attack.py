"""Poisoning attacks (an adversary that sends): its Byzantine nodes are the adversary's nodes; each round
they replace what they send their honest neighbours (:mod:`decpriv.attacks.poisoning.forgers`), through
the defense's aggregation rule, a robust one included (:mod:`decpriv.defenses.robust`). D-SGD only.

Read by the honest nodes' test accuracy beside the same run with every node honest (``accuracy_drop``),
and for the backdoor by its success on triggered inputs beside the clean model's (docs/poisoning.md)."""

from typing import Any

import numpy as np

from decpriv.adversary.view import AttackContext, DataSpec, View
from decpriv.attacks.base import Attack
from decpriv.attacks.poisoning.data_poisons import Trigger
from decpriv.attacks.poisoning.scoring import scores
from decpriv.errors import bad_value
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth

ACCURACY = Headline(
    "poisoned_test_accuracy", "clean_test_accuracy", "lower", "the same run without Byzantine nodes"
)


class Poisoning(Attack):
    """Shared by every poisoning attack: the refusals, the (empty) run, the scoring against the clean run."""

    active = True  # forges messages (behaviour)
    clean_baseline = True  # the pipeline runs the same config with every node honest, for evaluate
    headline = (ACCURACY,)

    def prepare(self, context: AttackContext) -> Any:
        protocol, net, attackers = context.protocol, context.network, context.adversary.nodes
        if protocol.name != "dsgd":
            raise bad_value(
                "protocol",
                protocol.name,
                f"attack={self.name} forges the models D-SGD's nodes send their neighbours",
                "use protocol=dsgd (topology=star for a federated server)",
            )
        if attackers.size == 0:  # an eavesdropper alone sends nothing
            raise bad_value(
                "adversary.nodes",
                [],
                "Byzantine nodes must be nodes of the graph",
                "set adversary.count or adversary.nodes",
            )
        reach = np.setdiff1d(net.adjacency[attackers].indices, attackers)
        if reach.size == 0:
            raise bad_value(
                "adversary.nodes",
                attackers.tolist(),
                "the Byzantine nodes have no honest neighbour",
                "corrupt fewer nodes",
            )
        if context.data.task != "classification":
            raise bad_value(
                "data", context.data.name, "poisoning is scored by test accuracy", "use classification data"
            )
        return self.plan(context)

    def plan(self, context: AttackContext) -> Any:
        """What the attack decides before the run (plain data)."""
        return None

    def trigger(self, spec: DataSpec) -> Trigger | None:
        """The backdoor's trigger (None: no backdoor)."""
        return None

    def run(self, view: View) -> dict:
        return {"byzantine_nodes": len(view.attackers)}

    def settings(self) -> dict:
        """The attack's strength, for the summary and the verdict."""
        return {}

    def evaluate(self, findings: dict, truth: Truth, view: View) -> Findings:
        summary = {
            **scores(view.model, truth, view.attackers, self.trigger(view.data_spec)),
            **self.settings(),
        }
        summary["verdict"] = verdict(self.name, summary)
        return Findings(summary=summary)


def verdict(name: str, s: dict) -> str:
    text = (
        f"{name} from {s['byzantine_nodes']} Byzantine node(s): the honest nodes' test accuracy "
        f"{s['poisoned_test_accuracy']:.3f} against {s['clean_test_accuracy']:.3f} in the same run without "
        f"Byzantine nodes (drop {s['accuracy_drop']:.3f})"
    )
    if "poisoned_backdoor_success" in s:
        text += (
            f"; backdoor success {s['poisoned_backdoor_success']:.3f} against the clean model's "
            f"{s['clean_backdoor_success']:.3f} on the same triggered inputs"
        )
    return text + "."
