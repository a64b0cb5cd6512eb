"""What the recorded Delta z reveal about every node (Yu 2023, Theorem 1), from the transcript alone.

With B = B_{i|j} and the theta-averaged update of z_{j|i},

    Delta z_{j|i}^{t+1} = (1 - theta) Delta z_{j|i}^t + theta Delta z_{i|j}^t + 2 rho theta B (w_i^{t+1} - w_i^t)

so every model step s_i^t = w_i^{t+1} - w_i^t (t >= 1) is known (averaged over i's edges). Anchoring at
the corrupt nodes' model at t_max (Theorem 1.2) gives the trajectory w_i^t = w_c^{t_max} - sum_{tau >= t}
s_i^tau. The local optimality condition grad f_i(w_i^{t+1}) = -sum_j B z_{i|j}^t - rho d_i w_i^{t+1}
turns into gradient differences D_i^t = grad f_i(w_i^t) - grad f_i(w_i^{t+2}) in two forms:

- ``theorem`` (theta = 1), evaluated on the anchored trajectory, so the anchor error enters the value:
  exact (Eq. 2.13 / 4.4): rho d_i (w_i^t + w_i^{t+2}) - 2 rho sum_j w_j^{t+1};
  k_max = 1 (Eq. 4.3): (rho d_i - 1/alpha)(w_i^{t+2} - w_i^t) + w_i^{t+3} / alpha
  + (2 rho d_i - 1/alpha) w_i^{t+1} - 2 rho sum_j w_j^{t+2};
  QA (Eq. 4.22): (rho d_i - mu) w_i^{t+1} + (mu + rho d_i) w_i^{t+3} + mu (w_i^t - w_i^{t+2})
  - 2 rho sum_j w_j^{t+2}.
  In all three a constant anchor error e_i adds exactly 2 rho (d_i e_i - sum_j e_j). The derivation
  uses z_{i|j}^{t+1} - z_{i|j}^{t-1} = 2 rho B_{i|j} (w_i^t - w_j^{t+1}), which holds for theta = 1 only:
  for theta < 1 z keeps a geometric memory of every earlier w and z^0, so the form is refused there;
- ``messages``: with Q_i^t = sum_j B_{i|j} Delta z_{i|j}^t the same optimality conditions give
  exact: D^t = Q^t + Q^{t+1} + rho d (s^t + s^{t+1}),
  k_max = 1: D^t = (s^{t+2} - s^t) / alpha + Q^{t+1} + Q^{t+2} + rho d (s^t + s^{t+1}),
  QA: D^t = (mu + rho d)(s^{t+1} + s^{t+2}) - mu (s^t + s^{t+1}) + Q^{t+1} + Q^{t+2},
  which need no anchor for the value (only for the points w^t, w^{t+2} where it is evaluated).
Plain PDMM (z^0 = 0) leaks much more: z^t = sum_{tau <= t} Delta z^tau, so w_i^{t+1} follows from the
z-update without any anchor and the gradient itself is grad f_i(w_i^{t+1}) = -sum_j B z_{i|j}^t - rho d_i w_i^{t+1}.
"""

from dataclasses import dataclass

import numpy as np
import torch

from decpriv.adversary.view import AttackContext, View
from decpriv.errors import bad_value
from decpriv.graphs.network import Network
from decpriv.protocols.pdmm import directed_edges

FORMS = ("messages", "theorem")
UPDATES = ("exact", "k1", "qa")


@dataclass(eq=False)
class Leak:
    """Leaked quantities for rounds ``rounds`` (t) of the nodes ``nodes``: points w^t, w^{t+2} and D^t."""

    nodes: np.ndarray  # (m,) the nodes of every tensor's node axis
    rounds: np.ndarray  # (K,) t of each difference
    steps: torch.Tensor  # (T - 1, m, p) s^t, t = 1..T-1
    trajectory: torch.Tensor  # (T, m, p) anchored w^t, t = 1..T
    start: torch.Tensor  # (K, m, p) w^t
    end: torch.Tensor  # (K, m, p) w^{t+2}
    difference: torch.Tensor  # (K, m, p) D^t
    plain_models: torch.Tensor  # (T, m, p) w^t, t = 1..T, read off z assuming z^0 = 0 (plain PDMM)
    plain_gradient: torch.Tensor  # (T, m, p) grad f(w^t) assuming z^0 = 0, t = 1..T


def links(network: Network, nodes: np.ndarray, form: str = "messages") -> np.ndarray:
    """(L, 2) the directed edges :func:`extract` reads for ``nodes``: every link into or out of the nodes
    whose trajectories it walks (:func:`walked`)."""
    directed = directed_edges(network)
    return directed[np.isin(directed, walked(network, nodes, form)).any(axis=1)]


def walked(network: Network, nodes: np.ndarray, form: str) -> np.ndarray:
    """The nodes whose trajectories the leak of ``nodes`` needs: themselves, and their neighbours for the
    ``theorem`` form."""
    if form != "theorem":
        return nodes
    directed = directed_edges(network)
    return np.union1d(nodes, directed[np.isin(directed, nodes).any(axis=1)].ravel())


@dataclass(eq=False)
class _Edges:
    """Where the recorded columns go: the links out of the walked nodes (model steps) and into ``nodes``
    (the Q sums), with B_{i|j} per column; the node sums are ``index_add`` over these, no Python loop."""

    b: torch.Tensor  # (1, L, 1) B_{sender|receiver} = +1 if sender < receiver else -1
    rev: torch.Tensor  # (L,) the column of each link's reverse (0 where not recorded)
    out_walk: torch.Tensor  # columns sent by a walked node whose reverse is recorded
    walk_send: torch.Tensor  # their sender's position among the walked nodes
    into_node: torch.Tensor  # columns received by one of ``nodes``
    node_recv: torch.Tensor  # their receiver's position among ``nodes``
    into_walk_src: torch.Tensor  # their sender's position among the walked nodes
    degree_walk: torch.Tensor  # (1, walked, 1) degrees of the walked nodes
    at_walk: np.ndarray  # (n,) position of each node among the walked ones, -1 if not walked
    m: int  # len(nodes)
    p: int  # parameters

    def node_steps(self, z: torch.Tensor, rho: float, theta: float) -> torch.Tensor:
        """(T, walked, p) model steps read off consecutive z (Delta z, or z itself for plain PDMM)."""
        o = self.out_walk
        edge = self.b[:, o] * (z[1:, o] - (1 - theta) * z[:-1, o] - theta * z[:-1, self.rev[o]])
        total = torch.zeros(z.shape[0] - 1, len(self.degree_walk[0]), self.p, dtype=z.dtype).index_add_(
            1, self.walk_send, edge / (2 * rho * theta)
        )
        return total / self.degree_walk

    def into(self, values: torch.Tensor) -> torch.Tensor:
        """sum over the links j -> i of ``nodes``: (R, m, p) from per-column (R, L, p) values."""
        return torch.zeros(values.shape[0], self.m, self.p, dtype=values.dtype).index_add_(
            1, self.node_recv, values[:, self.into_node]
        )


def _edges(view: View, nodes: np.ndarray, walk: np.ndarray, dtype: torch.dtype) -> _Edges:
    net, tr = view.network, view.transcript
    reverse = tr.columns(tr.receivers, tr.senders)
    at_walk = np.full(net.n, -1)
    at_walk[walk] = np.arange(len(walk))
    at_node = np.full(net.n, -1)
    at_node[nodes] = np.arange(len(nodes))
    out_walk = np.flatnonzero((at_walk[tr.senders] >= 0) & (reverse >= 0))
    into_node = np.flatnonzero(at_node[tr.receivers] >= 0)
    return _Edges(
        b=torch.where(torch.as_tensor(tr.senders < tr.receivers), 1.0, -1.0).to(dtype)[None, :, None],
        rev=torch.as_tensor(np.maximum(reverse, 0)),
        out_walk=torch.as_tensor(out_walk),
        walk_send=torch.as_tensor(at_walk[tr.senders[out_walk]]),
        into_node=torch.as_tensor(into_node),
        node_recv=torch.as_tensor(at_node[tr.receivers[into_node]]),
        into_walk_src=torch.as_tensor(at_walk[tr.senders[into_node]]),
        degree_walk=torch.as_tensor(net.degrees[walk], dtype=dtype)[None, :, None],
        at_walk=at_walk,
        m=len(nodes),
        p=tr.values.shape[2],
    )


def _check_recorded(view: View, nodes: np.ndarray, form: str) -> None:
    needed = links(view.network, nodes, form)
    absent = view.transcript.columns(needed[:, 0], needed[:, 1]) < 0
    if absent.any():
        raise bad_value(
            "adversary",
            f"{int(absent.sum())} unrecorded link(s), e.g. {needed[absent][0].tolist()}",
            f"the leakage of nodes {nodes[:5].tolist()} needs the Delta z on all their links",
            "set adversary.eavesdropper=true",
        )


def _anchored(
    view: View, steps_walk: torch.Tensor, t_max: int, walk: np.ndarray, at_walk: np.ndarray
) -> torch.Tensor:
    """(T, walked, p) w^t, t = 1..T: the corrupt nodes' model at t_max minus the later steps
    (Theorem 1.2); the corrupt nodes' own trajectories are their own models."""
    own = view.public["own_models"].to(steps_walk.dtype)
    anchor = own[t_max].mean(0)
    after = torch.flip(torch.cumsum(torch.flip(steps_walk, [0]), 0), [0])  # sum_{tau >= t} s^tau
    trajectory = torch.cat([anchor - after, anchor.expand(1, len(walk), steps_walk.shape[2])])
    corrupt = np.flatnonzero(np.isin(view.attackers, walk))
    trajectory[:, torch.as_tensor(at_walk[view.attackers[corrupt]])] = own[1 : t_max + 1][:, corrupt]
    return trajectory


def _theorem_difference(
    w: torch.Tensor,
    w_walk: torch.Tensor,
    e: _Edges,
    rd: torch.Tensor,
    rho: float,
    update: str,
    alpha: float,
    mu: float,
) -> torch.Tensor:
    """D^t from the anchored trajectory (``w[k]`` = w^{k+1}), Eq. 2.13 / 4.4, 4.3 or 4.22."""
    T = len(w)
    K = T - 2 if update == "exact" else T - 3
    lag = 1 if update == "exact" else 2  # the neighbours' models enter at t+1 (exact) or t+2
    neighbours = torch.zeros(K, e.m, e.p, dtype=w.dtype).index_add_(
        1, e.node_recv, w_walk[lag : K + lag][:, e.into_walk_src]
    )
    if update == "exact":
        return rd * (w[:K] + w[2 : K + 2]) - 2 * rho * neighbours
    if update == "k1":
        return (
            (rd - 1 / alpha) * (w[2 : K + 2] - w[:K])
            + w[3 : K + 3] / alpha
            + (2 * rd - 1 / alpha) * w[1 : K + 1]
            - 2 * rho * neighbours
        )
    return (
        (rd - mu) * w[1 : K + 1]
        + (mu + rd) * w[3 : K + 3]
        + mu * (w[:K] - w[2 : K + 2])
        - 2 * rho * neighbours
    )


def _messages_difference(
    steps: torch.Tensor, Q: torch.Tensor, rd: torch.Tensor, update: str, alpha: float, mu: float
) -> torch.Tensor:
    """D^t from the Delta z and the steps directly (no anchor in the value)."""
    T = len(Q)
    if update == "exact":
        K = T - 2
        return Q[:K] + Q[1 : K + 1] + rd * (steps[:K] + steps[1 : K + 1])
    K = T - 3
    if update == "k1":
        return (
            (steps[2 : K + 2] - steps[:K]) / alpha
            + Q[1 : K + 1]
            + Q[2 : K + 2]
            + rd * (steps[:K] + steps[1 : K + 1])
        )
    return (
        (mu + rd) * (steps[1 : K + 1] + steps[2 : K + 2])
        - mu * (steps[:K] + steps[1 : K + 1])
        + Q[1 : K + 1]
        + Q[2 : K + 2]
    )


def extract(
    view: View,
    t_max: int,
    rho: float,
    theta: float,
    update: str = "exact",
    form: str = "messages",
    alpha: float = 0.1,
    mu: float = 1.0,
    nodes: np.ndarray | None = None,
) -> Leak:
    """Leakage of ``nodes`` (every node when None) from the Delta z recorded in rounds 1..t_max, with the
    adversary's assumed hyperparameters; the transcript must hold :func:`links` of those nodes."""
    net = view.network
    nodes = np.arange(net.n) if nodes is None else np.asarray(nodes, dtype=np.int64)
    walk = walked(net, nodes, form)
    _check_recorded(view, nodes, form)
    dz = view.transcript.values[:t_max].to(torch.float64)
    e = _edges(view, nodes, walk, dz.dtype)
    rd = (rho * torch.as_tensor(net.degrees[nodes], dtype=dz.dtype))[None, :, None]
    steps_walk = e.node_steps(dz, rho, theta)
    trajectory_walk = _anchored(view, steps_walk, t_max, walk, e.at_walk)
    mine = torch.as_tensor(e.at_walk[nodes])
    steps, trajectory = steps_walk[:, mine], trajectory_walk[:, mine]
    if form == "theorem":
        difference = _theorem_difference(trajectory, trajectory_walk, e, rd, rho, update, alpha, mu)
    else:
        difference = _messages_difference(steps, e.into(-e.b * dz), rd, update, alpha, mu)
    K = len(difference)
    z = torch.cat([torch.zeros_like(dz[:1]), torch.cumsum(dz, 0)])  # z^t if z^0 were 0, t = 0..T
    plain_models = e.node_steps(z, rho, theta)[:, mine]
    return Leak(
        nodes=nodes,
        rounds=np.arange(1, K + 1),
        steps=steps,
        trajectory=trajectory,
        start=trajectory[:K],
        end=trajectory[2 : K + 2],
        difference=difference,
        plain_models=plain_models,
        plain_gradient=-e.into(-e.b * z[:-1]) - rd * plain_models,
    )


def check_pdmm(context: AttackContext, attack: str) -> None:
    """Refuse a protocol that sends no Delta z of the decentralized PDMM/ADMM update (the Theorem-1 forms
    need its declared rho, theta and update rule), or a threat model without eavesdropper and corrupt node."""
    declared = context.protocol.hyper
    if context.protocol.recorder_kind != "edges" or not {"rho", "theta", "update"} <= declared.keys():
        raise bad_value(
            "protocol",
            context.protocol.name,
            f"attack={attack} reads the Delta z messages of decentralized PDMM/ADMM",
            "use protocol=pdmm or protocol=admm (centralized PDMM's server: attack=gradient_inversion)",
        )
    adv = context.adversary
    if not adv.eavesdropper or adv.nodes.size == 0:
        raise bad_value(
            "adversary",
            f"eavesdropper={adv.eavesdropper}, nodes={adv.nodes.tolist()}",
            f"attack={attack} needs an eavesdropper on every edge and at least one corrupt node",
            "set adversary.eavesdropper=true adversary.nodes=[0]",
        )


@dataclass(frozen=True)
class Assumed:
    """The hyperparameters the adversary plugs into Theorem 1 (declared ones unless overridden)."""

    rho: float
    theta: float
    update: str
    alpha: float
    mu: float

    @classmethod
    def resolve(
        cls,
        hyper: dict,
        rho: float | None,
        theta: float | None,
        update: str | None,
        alpha: float | None,
        mu: float | None,
    ) -> "Assumed":
        declared = {"exact": "exact", "inexact": "k1", "qa": "qa"}[hyper["update"]]
        return cls(
            rho if rho is not None else hyper["rho"],
            theta if theta is not None else hyper["theta"],
            update if update is not None else declared,
            alpha if alpha is not None else hyper["alpha"],
            mu if mu is not None else hyper["mu"],
        )


def check_theorem_form(form: str, assumed_theta: float, prefix: str) -> None:
    """The Theorem-1 forms are derived for theta = 1 (PDMM); refuse them for ADMM-type averaging."""
    if form == "theorem" and assumed_theta != 1:
        raise bad_value(
            f"{prefix}.form",
            form,
            f"Theorem 1's closed forms (Yu 2023, Eq. 2.13, 4.3, 4.22) hold for theta = 1, not {assumed_theta}",
            f"use {prefix}.form=messages, which covers any theta",
        )


def check_assumptions(update: str | None, form: str, theta: float | None, prefix: str) -> None:
    if update is not None and update not in UPDATES:
        raise bad_value(
            f"{prefix}.update", update, "unknown update rule", f"use one of {', '.join(UPDATES)} or null"
        )
    if form not in FORMS:
        raise bad_value(f"{prefix}.form", form, "unknown leakage form", f"use one of {', '.join(FORMS)}")
    if theta is not None and not 0 < theta <= 1:
        raise bad_value(
            f"{prefix}.theta", theta, "theta lies in (0, 1]", "use 1 or null (the declared value)"
        )
