"""The dissensus attack on gossip (He, Karimireddy, Jaggi 2022, ClippedGossip, Sec. 5): the Byzantine
neighbours of an honest node v all send it

    x_v - eps * sum_{k honest in N(v)} W_vk (x_k - x_v) / sum_{b Byzantine in N(v)} W_vb,

so v's gossip step x_v + sum_u W_vu (x_u - x_v) becomes x_v + (1 - eps) sum_k W_vk (x_k - x_v): at eps = 1
v stops moving towards its honest neighbours, above 1 it moves away, and the graph fails to reach
consensus. It exploits the mixing weights of the graph.

The sum runs over v's honest neighbours, whose messages a Byzantine node hears only where they are its own
neighbours too: with ``adversary.eavesdropper=true`` it hears every message (the paper's omniscient
attacker, declared in the config and recorded as ``dissensus_covered_receivers``), otherwise the sum
covers the neighbours of v it hears and the rest of v's pull stays.
"""

from typing import Annotated

import numpy as np
import torch

from decpriv.adversary.behaviour import Behaviour, Forgery
from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.poisoning.attack import Poisoning
from decpriv.attacks.poisoning.forgers import honest_links
from decpriv.config.types import Range, checked
from decpriv.graphs.network import Network


class DissensusForger(Behaviour):
    def __init__(self, network: Network, attackers: np.ndarray, heard: np.ndarray, epsilon: float):
        self.senders, self.receivers = honest_links(network, attackers)
        targets = np.unique(self.receivers)
        W = network.W[targets]
        honest_heard = ~np.isin(heard, attackers)
        pull = W[:, heard].toarray() * honest_heard[None, :]  # (R, S) W_vk over heard honest k
        pull[np.arange(len(targets)), np.searchsorted(heard, targets)] = 0.0  # k != v
        byzantine = np.asarray(W[:, attackers].sum(axis=1)).ravel()
        self.pull = torch.as_tensor(pull / byzantine[:, None] * epsilon)
        self.own = torch.as_tensor(np.searchsorted(heard, targets))
        self.row = torch.as_tensor(np.searchsorted(targets, self.receivers))

    def forge(self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor) -> Forgery:
        pull = self.pull.to(observed.dtype)
        x_v = observed[self.own]
        values = x_v - (pull @ observed - pull.sum(1, keepdim=True) * x_v)
        return Forgery(self.senders, self.receivers, values[self.row])


def covered(network: Network, attackers: np.ndarray, heard: np.ndarray) -> float:
    """The share of the attacked honest nodes whose every neighbour the adversary hears."""
    _, receivers = honest_links(network, attackers)
    targets = np.unique(receivers)
    missing = [np.setdiff1d(network.adjacency[[v]].indices, heard).size for v in targets]
    return float(np.mean(np.asarray(missing) == 0))


@checked("attack")
class Dissensus(Poisoning):
    name = "dissensus"

    def __init__(self, epsilon: Annotated[float, Range(gt=0, what="the attack's strength", eg=1.5)] = 1.5):
        self.epsilon = epsilon

    def plan(self, context: AttackContext) -> float:
        heard = context.adversary.observed_senders(context.network)
        return covered(context.network, context.adversary.nodes, heard)

    def behaviour(self, context: AttackContext, plan: float) -> DissensusForger:
        heard = context.adversary.observed_senders(context.network)
        return DissensusForger(context.network, context.adversary.nodes, heard, self.epsilon)

    def run(self, view: View) -> dict:
        return {**super().run(view), "dissensus_covered_receivers": view.plan}

    def settings(self) -> dict:
        return {"poisoning_epsilon": self.epsilon}

    def evaluate(self, findings, truth, view):
        out = super().evaluate(findings, truth, view)
        share = findings["dissensus_covered_receivers"]
        out.summary["dissensus_covered_receivers"] = share
        out.summary["verdict"] = (
            f"{out.summary['verdict'][:-1]}; the adversary hears every neighbour of {share:.0%} of the attacked "
            "nodes (adversary.eavesdropper=true: all)."
        )
        return out
