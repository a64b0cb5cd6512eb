"""State override (Pasquini et al. 2023, Sec. 5.2.1, Eq. 15).

A rushing attacker A that hears every neighbour of victim v (N(v) inside N(A)) waits for this round's
updates, then sends v
    theta_A -> v = (theta_tilde - sum_{u in N(v), u != A} W_vu theta_u^{t+1/2}) / W_vA
(for uniform W: |N(v)| theta_tilde - sum_{u != A} theta_u^{t+1/2}), so v's aggregate is theta_tilde
exactly. The non-rushing variant cancels the previous round's updates instead (App. A, Fig. 16).
All victims are overridden at once, one forged message each.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.adversary import Adversary
from decpriv.adversary.behaviour import Behaviour, Forgery
from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.neighbourhood import closed, columns, coverable, require_neighbours
from decpriv.attacks.targets import fixed_targets
from decpriv.errors import bad_value
from decpriv.graphs.network import Network
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth

TARGETS = ("own", "zeros")
CONTROLLED = 0.987  # a victim counts as held from this controlled fraction on (the paper's worst case)


def override_targets(
    network: Network, adversary: Adversary, victim: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The victims an override reaches (every coverable neighbour, or ``victim`` alone), the attacker
    forging for each, and the senders the attackers hear; refuses (ConfigError) when there is none."""
    attackers = adversary.nodes
    require_neighbours(network, attackers)
    heard = adversary.observed_senders(network)
    victims, forgers = coverable(network, attackers, heard)
    if victim is not None and victim not in set(victims.tolist()):
        adjacent = 0 <= victim < network.n and bool(network.adjacency[attackers][:, [victim]].sum())
        if not adjacent:
            raise bad_value(
                "attack.victim",
                victim,
                f"the victim must be a neighbour of attacker {' or '.join(map(str, attackers.tolist()))}",
                f"use one of {victims.tolist()}",
            )
        raise bad_value(
            "attack.victim",
            victim,
            f"the attackers do not hear the victim's neighbours {np.setdiff1d(closed(network, victim), heard).tolist()}",
            "corrupt one of them too or pick a victim whose neighbours all neighbour the attackers",
        )
    if victims.size == 0:
        raise bad_value(
            "adversary.nodes",
            attackers.tolist(),
            "no neighbour of the attackers has all its neighbours among the attackers' neighbours",
            "corrupt more or better-connected nodes (adversary.strategy=max_degree)",
        )
    if victim is not None:
        keep = victims == victim
        victims, forgers = victims[keep], forgers[keep]
    return victims, forgers, heard


class Override(Behaviour):
    """Forges, from round ``start`` on, one message per victim so its aggregate becomes the target."""

    def __init__(
        self,
        network: Network,
        attackers: np.ndarray,
        victims: np.ndarray,
        forgers: np.ndarray,
        senders: np.ndarray,
        start: int,
        rushing: bool,
        target: str,
    ):
        self.victims, self.forgers, self.start = victims, forgers, start
        self.rushing, self.target = rushing, target
        self.attackers = attackers
        W = network.W
        self.others = torch.as_tensor(W[victims][:, senders].toarray())  # (V, S)
        self.others[np.arange(len(victims)), columns_in(senders, forgers)] = 0.0
        self.self_weight = torch.as_tensor(np.asarray(W[victims, forgers]).ravel())
        self.previous: torch.Tensor | None = None
        self.targets: dict[int, torch.Tensor] = {}

    def aim(self, own: torch.Tensor) -> torch.Tensor:
        """(V, p) the model each victim should hold."""
        source = own[np.searchsorted(self.attackers, self.forgers)]
        return torch.zeros_like(source) if self.target == "zeros" else source

    def forge(
        self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor
    ) -> Forgery | None:
        basis = observed if self.rushing else self.previous
        self.previous = observed.clone()
        if round_ < self.start or basis is None:
            return None
        aim = self.aim(own)
        others = self.others.to(observed.device, observed.dtype) @ basis
        values = (aim - others) / self.self_weight.to(observed.device, observed.dtype)[:, None]
        self.targets[round_] = aim.detach().cpu()
        return Forgery(self.forgers, self.victims, values)


def columns_in(senders: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    return np.searchsorted(senders, nodes)


def worst_round(replay: pd.DataFrame) -> dict[str, float]:
    """The lowest controlled fraction over every round and victim of the replay, and its round (nan for
    a rushing attacker, which controls every round exactly)."""
    if not len(replay):
        return {
            "override_worst_round": float("nan"),
            "override_worst_round_controlled_fraction": float("nan"),
        }
    at = replay.controlled_fraction.idxmin()
    return {
        "override_worst_round": int(replay["round"][at]),
        "override_worst_round_controlled_fraction": float(replay.controlled_fraction[at]),
    }


def override_victims(view: View, victim: int | None) -> tuple[pd.DataFrame, str]:
    """The victims an override's threat model fixes, rebuilt outside the attack from the pipeline's
    network and attackers and the configured ``attack.victim``: ``override_targets``, the rule the
    attack's ``prepare`` applied before the run; with the words naming them."""
    adversary = Adversary(nodes=view.attackers, eavesdropper=view.eavesdropper)
    victims, _, _ = override_targets(view.network, adversary, victim)
    whose = (
        f"attack.victim={victim}"
        if victim is not None
        else "every neighbour whose neighbours the attackers hear"
    )
    return pd.DataFrame({"victim": victims}), whose


@dataclass(eq=False)
class Overridden:
    victims: np.ndarray
    targets: torch.Tensor  # (V, p) the aimed state at the last round
    honest: torch.Tensor  # (V, p) the aggregate each victim would have reached without the attack
    replay: pd.DataFrame  # non-rushing: the fraction an override at each round would control


def replayed_rounds(view: View, forger: "Override", senders: np.ndarray) -> pd.DataFrame:
    """What a non-rushing override at round t controls, for every recorded round t >= 1 of a run honest
    before it: the forged message cancels round t - 1's updates, so the victim's aggregate misses the
    target by exactly sum_{u != A} W_vu (theta_u^t - theta_u^{t-1}), and the controlled fraction is
    1 - ||miss|| / ||honest aggregate - target|| (Pasquini et al. 2023, App. A, Fig. 16 at every round
    instead of at the end of runs of a few lengths). At the run's last round it is the measured override."""
    if forger.rushing:
        return pd.DataFrame(columns=["round", "victim", "controlled_fraction"])
    T = view.transcript
    rounds = T.times[:, 0]
    values = T.values[:, torch.as_tensor(columns(T, senders))].double()  # (R, S, p)
    W = torch.as_tensor(view.network.W[forger.victims][:, senders].toarray())  # (V, S)
    others = forger.others.double()
    honest = torch.einsum("vs,rsp->rvp", W, values)[1:]
    miss = torch.einsum("vs,rsp->rvp", others, values[1:] - values[:-1])
    own = values[:, columns_in(senders, forger.forgers)][1:]  # (R-1, V, p) each forger's own model
    aim = torch.zeros_like(own) if forger.target == "zeros" else own
    controlled = 1 - miss.norm(dim=2) / (honest - aim).norm(dim=2)  # (R-1, V)
    return pd.DataFrame(
        {
            "round": np.repeat(rounds[1:], len(forger.victims)),
            "victim": np.tile(forger.victims, len(rounds) - 1),
            "controlled_fraction": controlled.flatten().numpy(),
        }
    )


class StateOverride(Attack):
    """Set each coverable neighbour's aggregate to a chosen model; report how much of its state is ours."""

    name = "state_override"
    headline = (Headline("override_mean_controlled_fraction", 0.0, "higher", "the honest run"),)
    active = True  # forges messages (behaviour)

    def __init__(
        self, victim: int | None = None, start: int | None = None, rushing: bool = True, target: str = "own"
    ):
        if target not in TARGETS:
            raise bad_value(
                "attack.target", target, "unknown target model", f"use one of {', '.join(TARGETS)}"
            )
        if start is not None and start < 0:
            raise bad_value(
                "attack.start", start, "rounds start at 0", "use a round >= 0 or null (last round)"
            )
        self.victim, self.start, self.rushing, self.target = victim, start, rushing, target

    def prepare(self, context: AttackContext) -> Override:
        """Plan: the forger itself (victims, start round); it keeps the models it aimed at for ``run``."""
        net, adv, protocol = context.network, context.adversary, context.protocol
        if protocol.name != "dsgd" or protocol.gossip_steps != 1:
            raise bad_value(
                "protocol",
                protocol.name,
                "the override targets D-PSGD's averaging",
                "use protocol=dsgd gossip_steps=1",
            )
        rounds = protocol.rounds
        if self.start is not None and self.start >= rounds:
            raise bad_value(
                "attack.start", self.start, f"the run has {rounds} rounds", f"use 0..{rounds - 1}"
            )
        victims, forgers, heard = override_targets(net, adv, self.victim)
        start = rounds - 1 if self.start is None else self.start
        return Override(net, adv.nodes, victims, forgers, heard, start, self.rushing, self.target)

    def behaviour(self, context: AttackContext, plan: Override) -> Override:
        return plan

    def run(self, view: View) -> Overridden:
        forger = view.plan
        last = int(view.hyper["rounds"]) - 1
        senders = np.sort(view.transcript.senders)
        honest_msgs = view.transcript.values[-1][torch.as_tensor(columns(view.transcript, senders))]
        W = torch.as_tensor(view.network.W[forger.victims][:, senders].toarray(), dtype=honest_msgs.dtype)
        aim = forger.targets.get(last)
        if aim is None:
            aim = torch.full((len(forger.victims), honest_msgs.shape[1]), float("nan"))
        return Overridden(forger.victims, aim, W @ honest_msgs, replayed_rounds(view, forger, senders))

    def fixed(self, findings: Overridden, view: View) -> Overridden:
        """The finding on the victims the threat model fixes: ``override_targets`` on the pipeline's
        network and attackers with the configured ``attack.victim`` (fixed before the run); the honest
        aggregate each would reach is the pipeline's own, off its transcript. A victim the finding names
        outside is refused; one it omits has no aim (NaN), scored as the honest run (controlled 0)."""
        expected, whose = override_victims(view, self.victim)
        table, aim = fixed_targets(
            self.name, pd.DataFrame({"victim": findings.victims}), findings.targets, expected, whose
        )
        victims = table.victim.to_numpy()
        senders = np.sort(view.transcript.senders)
        last = view.transcript.values[-1][torch.as_tensor(columns(view.transcript, senders))]
        honest = torch.as_tensor(view.network.W[victims][:, senders].toarray(), dtype=last.dtype) @ last
        return Overridden(victims, aim, honest, findings.replay)

    def evaluate(self, findings: Overridden, truth: Truth, view: View) -> Findings:
        given = len(findings.victims)
        findings = self.fixed(findings, view)
        reached = truth.final_states[torch.as_tensor(findings.victims)].to(findings.honest.dtype)
        aim = findings.targets.to(reached.dtype)
        miss = (reached - aim).norm(dim=1)
        span = (findings.honest - aim).norm(dim=1)
        controlled = 1 - miss / span
        controlled[given:] = 0.0  # an omitted victim: the honest run's
        table = pd.DataFrame(
            {
                "victim": findings.victims,
                "controlled_fraction": controlled.numpy(),
                "distance_to_target": miss.numpy(),
                "honest_distance_to_target": span.numpy(),
            }
        )
        summary = {
            "override_victims": len(table),
            "override_rushing": self.rushing,
            "override_min_controlled_fraction": float(controlled.min()),
            "override_mean_controlled_fraction": float(controlled.mean()),
            # beside the mean, how many victims the attacker holds at least as well as the paper's worst
            # case (Pasquini et al. 2023, App. D: 98.7% without rushing)
            "override_fraction_of_victims_controlled": float((controlled >= CONTROLLED).double().mean()),
        }
        summary.update(worst_round(findings.replay))
        summary["verdict"] = (
            f"state override ({'rushing' if self.rushing else 'not rushing'}): the final states of {len(table)} "
            f"victim(s) moved {summary['override_mean_controlled_fraction']:.1%} (worst "
            f"{summary['override_min_controlled_fraction']:.1%}) of the way from where the honest run ends to the "
            "attacker's target (0: no effect, 100%: full control); "
            f"{int((controlled >= CONTROLLED).sum())} of {len(table)} at least {CONTROLLED:.1%}."
        )
        tables = {"state_override": table}
        if len(findings.replay):
            tables["override_rounds"] = findings.replay
        return Findings(tables=tables, summary=summary)
