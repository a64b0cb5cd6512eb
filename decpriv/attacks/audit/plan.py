"""What the audit runs and against which accountant: the trial runner, the observers, the currency.

Per accountant, the adversary's view and the worst-case neighbouring datasets its derivation identifies:

- ``network_dp`` with Muffliato gossip: observer v sees every message of its closed neighbourhood at every
  gossip step (Cyffers et al., NeurIPS 2022, Def. 3); the source u's value moves by 2C.
- ``rdp`` / ``secldp`` with ldp: every gradient step releases u's clipped contribution plus noise; the
  contributions move by 2C in every step (fixed inputs, the accountants' composition). cdp: the released
  average. decor under the eavesdropper: every node's message of every step (Allouah et al., ICML 2024).

The currency is the accountant's: Renyi epsilon at its order alpha (alpha mu^2 / 2, the exact divergence of
a Gaussian view) for network_dp; for rdp and secldp the epsilon at the accountant's delta that the
accountant's own conversion gives a Gaussian mechanism of parameter mu.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.csgraph import shortest_path

from decpriv.adversary.view import AttackContext
from decpriv.attacks.audit.mechanisms import GossipTrials, GradientTrials, SGDGossipTrials
from decpriv.attacks.audit.subsampled import BLIND_SPOTS as SAMPLED_BLIND_SPOTS
from decpriv.attacks.audit.subsampled import SampledTrials
from decpriv.attacks.audit.walk import WalkTrials
from decpriv.defenses.base import Defense
from decpriv.errors import bad_value
from decpriv.privacy.network_dp import MAX_PAIR_ROWS
from decpriv.privacy.sampled_gaussian import gaussian_dp_epsilon

COVERED = (
    "defense=muffliato with protocol=gossip and defense=ldp with protocol=dsgd (Muffliato-SGD) under "
    "accountant=network_dp, defense=ldp|cdp at the user level with protocol=dsgd under accountant=rdp|secldp, "
    "defense=decor at the user level under accountant=secldp (every threat), defense=dpsgd (or ldp at the "
    "example level) under accountant=rdp, defense=ldp with protocol=random_walk under accountant=random_walk"
)


LINEAR_BLIND_SPOTS = (
    "directions whose variance is near float64's rounding (the float-rank class of error: the "
    "rational-arithmetic tests guard it), observers beyond the audited ones, and contributions other than "
    "the worst-case +-C"
)


WALK_BLIND_SPOTS = (
    "everything but the last model each observer held (its test reads one release; the models it held at "
    "earlier visits and the visit times are not used, so the bound is loose: docs/privacy.md)"
)


@dataclass(frozen=True, eq=False)
class Observer:
    """One adversary: its label in the accountant's table, the senders whose rows it sees (-1: the
    released aggregate) and the sources it is audited against."""

    label: Any
    senders: np.ndarray
    sources: np.ndarray


@dataclass(frozen=True)
class Currency:
    """The accountant's unit: its table's column, and the value a Gaussian view of parameter mu has in it."""

    accountant: str
    column: str
    delta: float
    alpha: float | None = None
    pairwise: bool = False  # the accountant's table has one row per (source, observer)
    gaussian_view: bool = True  # false: the view is no Gaussian shift, only the (epsilon, delta) bound holds

    def of_mu(self, mu: float) -> float:
        if mu <= 0:
            return 0.0
        if self.accountant == "network_dp":
            return self.alpha * mu**2 / 2.0
        # rdp reports PLD and secldp the exact Gaussian view: as tight as a Gaussian allows
        return gaussian_dp_epsilon(mu, self.delta)

    @property
    def axis(self) -> str:
        return f"Renyi epsilon (order {self.alpha:g})" if self.alpha else f"epsilon at delta={self.delta:g}"

    @property
    def label(self) -> str:
        if not self.gaussian_view:
            return f"epsilon at delta={self.delta:g} (Clopper-Pearson, no assumption)"
        if self.accountant == "network_dp":
            return f"Renyi epsilon at order {self.alpha:g}"
        return f"epsilon at delta={self.delta:g} of a Gaussian view (exact)"


@dataclass(frozen=True, eq=False)
class Audited:
    """What the auditor uses: the run's public context and the mechanism it reruns (the protocol, the
    defense after calibration, the accountant's settings), never the nodes' data."""

    context: AttackContext
    protocol: Any
    defense: Defense
    accountant: Any

    @property
    def network(self):
        return self.context.network

    @property
    def steps(self) -> int:
        """Noisy gradient steps of a node over the run (rounds x local steps)."""
        return self.protocol.rounds * getattr(self.protocol, "local_steps", 1)


@dataclass(frozen=True, eq=False)
class AuditPlan:
    trials: GossipTrials | SGDGossipTrials | GradientTrials | SampledTrials | WalkTrials
    observers: list[Observer]
    currency: Currency
    clip: float
    n: int
    distance: np.ndarray | None  # hop distances (pairwise audits)
    blind_spots: str = LINEAR_BLIND_SPOTS  # what the audit cannot see, said in its verdict


def refuse(audited: Audited, why: str) -> Exception:
    accountant = getattr(audited.accountant, "name", "none")
    mechanism = audited.defense.mechanism()
    level = mechanism.at_level if mechanism is not None else ""
    return bad_value(
        "attack",
        "audit",
        f"{why} (defense={audited.defense.name}{level}, protocol={audited.protocol.name}, "
        f"accountant={accountant}); "
        f"the audit covers {COVERED}",
        "drop attack=audit or audit a covered pair",
    )


def plan_audit(audited: Audited, max_observers: int) -> AuditPlan:
    """The audit of this run's defense against its accountant; refuses (exit 2) what it does not cover."""
    accountant, mechanism, protocol = audited.accountant, audited.defense.mechanism(), audited.protocol
    if accountant is None or mechanism is None:
        raise refuse(audited, "the audit checks an accountant's value and there is none to check")
    if accountant.name == "network_dp" and mechanism.on == "values" and protocol.noised == "values":
        return gossip_plan(audited, max_observers, GossipTrials)
    if accountant.name == "network_dp" and mechanism.local_gaussian and protocol.name == "dsgd":
        return gossip_plan(audited, max_observers, SGDGossipTrials)
    if accountant.name == "random_walk" and mechanism.local_gaussian and protocol.walks:
        return walk_plan(audited)
    if hasattr(protocol, "steps_per_round"):
        raise refuse(audited, "FedAvg's local epochs are not audited yet")
    user_gradients = mechanism.on == "gradients" and mechanism.level == "user"
    if accountant.name == "rdp" and mechanism.level == "example" and not mechanism.central:
        return canary_plan(audited)
    if accountant.name in ("rdp", "secldp") and user_gradients:
        return gradient_plan(audited)
    raise refuse(audited, "this pair is not audited yet")


def gossip_plan(audited: Audited, max_observers: int, runner: type) -> AuditPlan:
    network, accountant = audited.network, audited.accountant
    n = network.n
    if n > MAX_PAIR_ROWS:
        raise refuse(audited, f"network_dp's table keeps per-pair rows up to {MAX_PAIR_ROWS} nodes only")
    observers = np.arange(n)
    if n > max_observers:
        observers = np.sort(
            audited.context.seeds.numpy("attack.audit.observers").choice(n, max_observers, replace=False)
        )
    A = network.adjacency
    neighbourhoods = [np.append(v, A.indices[A.indptr[v] : A.indptr[v + 1]]) for v in observers]
    pairs = [
        Observer(int(v), hood, np.delete(np.arange(n), v))
        for v, hood in zip(observers, neighbourhoods, strict=True)
    ]
    senders = np.unique(np.concatenate(neighbourhoods))
    currency = Currency("network_dp", "epsilon_rdp", accountant.delta, accountant.alpha, pairwise=True)
    distance = shortest_path(network.adjacency, unweighted=True, directed=False)
    return AuditPlan(runner(audited, senders), pairs, currency, audited.defense.clip, n, distance)


def decor_observers(network, threat: str, collusion: int) -> list[Observer]:
    """The eavesdropper sees every message; a coalition Q sees the honest nodes' messages and the secrets
    of its own edges (rows n + e). Curious: every single node; collusion: for each node, the coalition of
    its ``collusion`` first neighbours (then nearest nodes), a subset of the accountant's coalitions."""
    n, edges = network.n, network.edges
    if threat == "eavesdropper":
        return [Observer("eavesdropper", np.arange(n), np.arange(n))]
    coalitions = {(j,) for j in range(n)}
    if threat == "collusion":  # u itself is first at distance 0
        distance = shortest_path(network.adjacency, unweighted=True, directed=False)
        coalitions = {
            tuple(sorted(np.argsort(distance[u], kind="stable")[1 : collusion + 1])) for u in range(n)
        }
    observers = []
    for Q in sorted(coalitions):
        honest = np.setdiff1d(np.arange(n), Q)
        held = n + np.flatnonzero(np.isin(edges, Q).any(axis=1))
        label = f"{threat} {' '.join(map(str, Q))}"
        observers.append(Observer(label, np.concatenate([honest, held]), honest))
    return observers


def walk_plan(audited: Audited) -> AuditPlan:
    """Every pair (u, v), u != v, of the random walk, against the accountant's (epsilon, delta)."""
    n = audited.network.n
    u, v = np.nonzero(~np.eye(n, dtype=bool))
    currency = Currency(
        "random_walk", "epsilon", audited.accountant.delta, pairwise=True, gaussian_view=False
    )
    observers = [Observer(int(o), np.zeros(0, dtype=np.int64), u[v == o]) for o in range(n)]
    distance = shortest_path(audited.network.adjacency, unweighted=True, directed=False)
    trials = WalkTrials(
        audited, (np.concatenate([o.sources for o in observers]), np.repeat(np.arange(n), n - 1))
    )
    return AuditPlan(trials, observers, currency, audited.defense.clip, n, distance, WALK_BLIND_SPOTS)


def canary_plan(audited: Audited) -> AuditPlan:
    """DP-SGD: the node with the smallest local set (the largest sampling rate b / m) audited with a gradient
    canary, through the defense's own sampler and gradients, against the accountant's (epsilon, delta)."""
    sizes = audited.context.data.local_sizes
    node = int(np.argmin(sizes))
    trials = SampledTrials(audited.defense, audited.steps, int(sizes[node]), audited.protocol.batch_size)
    currency = Currency("rdp", "epsilon", audited.accountant.delta, gaussian_view=False)
    observers = [Observer("any", np.zeros(0, dtype=np.int64), np.full(1, node))]
    n = audited.network.n
    return AuditPlan(trials, observers, currency, audited.defense.clip, n, None, SAMPLED_BLIND_SPOTS)


def gradient_plan(audited: Audited) -> AuditPlan:
    accountant, mechanism, n = audited.accountant, audited.defense.mechanism(), audited.network.n
    everyone = np.arange(n)
    if mechanism.central:
        observers = [Observer("average_model", np.full(1, -1), everyone)]
    elif mechanism.correlated:
        observers = decor_observers(audited.network, accountant.threat, getattr(accountant, "collusion", 1))
    else:  # every message is private on its own: the source's own releases
        observers = [Observer("any", np.full(1, u), np.full(1, u)) for u in everyone]
    currency = Currency(accountant.name, "epsilon", accountant.delta)
    steps = audited.steps
    if steps > 5000:
        raise refuse(
            audited, f"{steps} noisy steps x the trials do not fit the audit's memory; use fewer rounds"
        )
    return AuditPlan(GradientTrials(audited, steps), observers, currency, mechanism.clip, n, None)
