"""What a D-PSGD attacker knows about its neighbourhood (Pasquini et al. 2023, Sec. 2 and 4): the closed
neighbourhoods N(v) of the public graph and the broadcast updates theta^{t+1/2} it received."""

import numpy as np
import torch

from decpriv.adversary.recorder import Transcript
from decpriv.adversary.view import View
from decpriv.errors import bad_value
from decpriv.graphs.network import Network


def closed(network: Network, v: int) -> np.ndarray:
    """N(v) with v itself, sorted (the set D-PSGD averages over)."""
    return np.union1d(network.neighbours(v), [v])


def columns(transcript: Transcript, nodes: np.ndarray) -> np.ndarray:
    """Transcript columns of the broadcasts of ``nodes`` (all must have been observed)."""
    order = np.argsort(transcript.senders)
    pos = np.searchsorted(transcript.senders, nodes, sorter=order)
    pos = np.minimum(pos, len(order) - 1)
    found = transcript.senders[order[pos]] == nodes
    if not found.all():
        raise KeyError(f"nodes {nodes[~found].tolist()} were not observed")
    return order[pos]


def updates(transcript: Transcript, nodes: np.ndarray) -> torch.Tensor:
    """(R, k, p) the broadcast updates of ``nodes`` over every recorded round (gossip step 0)."""
    rows = transcript.times[:, 1] == 0
    return transcript.values[torch.as_tensor(np.flatnonzero(rows))][
        :, torch.as_tensor(columns(transcript, nodes))
    ]


def recorded_rounds(transcript: Transcript) -> np.ndarray:
    return transcript.times[transcript.times[:, 1] == 0, 0]


def victims_of_nodes(net: Network, attackers: np.ndarray) -> np.ndarray:
    """Every honest neighbour of an attacker."""
    honest = np.setdiff1d(np.arange(net.n), attackers)
    return honest[(net.adjacency[attackers][:, honest].toarray() > 0).any(0)]


def victims_of(view: View) -> tuple[np.ndarray, np.ndarray]:
    """Every honest neighbour of an attacker, with the attacker (lowest index) that attacks it."""
    net, attackers = view.network, view.attackers
    honest = np.setdiff1d(np.arange(net.n), attackers)
    adj = net.adjacency[attackers][:, honest].toarray() > 0
    reached = adj.any(0)
    return honest[reached], attackers[adj[:, reached].argmax(0)]


def coverable(network: Network, attackers: np.ndarray, heard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Honest neighbours of the attackers whose whole neighbourhood is heard, with the attacker that
    forges for each (the lowest-index adjacent one)."""
    honest = np.setdiff1d(np.arange(network.n), attackers)
    adj = network.adjacency[attackers][:, honest].toarray() > 0
    heard_mask = np.zeros(network.n, dtype=bool)
    heard_mask[heard] = True
    inside = ~((network.adjacency[honest].toarray() > 0) & ~heard_mask[None, :]).any(1)
    ok = adj.any(0) & inside
    return honest[ok], attackers[adj[:, ok].argmax(0)]


def require_neighbours(network: Network, attackers: np.ndarray) -> None:
    """Corrupt nodes exist, each has neighbours, and some neighbour is honest: else there is nothing to
    attack (an eavesdropping server owns no node; every node corrupt leaves no victim)."""
    if attackers.size == 0:
        raise bad_value(
            "adversary.count",
            0,
            "this attack is run by corrupt nodes and there is none (adversary=server owns no node)",
            "use adversary=curious or set adversary.count >= 1",
        )
    if not victims_of_nodes(network, attackers).size:
        raise bad_value(  # named by count or by nodes: the attack sees the corrupt nodes, not the keys
            "adversary",
            f"{attackers.size} corrupt nodes of {network.n}",
            "no honest node neighbours the corrupt ones, so there is no victim",
            f"corrupt fewer nodes (adversary.count <= {network.n - 1}, or fewer adversary.nodes)",
        )
    lonely = attackers[network.degrees[attackers] == 0]
    if lonely.size:
        raise bad_value(
            "adversary.nodes",
            attackers.tolist(),
            f"attacker {int(lonely[0])} has no neighbours and receives no updates",
            "choose connected attacker nodes",
        )


def require_victim(network: Network, attacker: int, victim: int, key: str = "attack.victim") -> None:
    if not 0 <= victim < network.n or victim not in set(network.neighbours(attacker).tolist()):
        raise bad_value(
            key,
            victim,
            f"the victim must be a neighbour of attacker {attacker}",
            f"use one of {network.neighbours(attacker).tolist()}",
        )


def marginalise(received: torch.Tensor, k: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Functional marginalisation (Pasquini et al. 2023, Eqs. 7-8):
    hat theta_v = |N(A)| (theta_v - sum_{u in N(A), u != v} theta_u / |N(A)|) = (|N(A)| + 1) theta_v - total,
    with ``total`` the sum of every update A received and its own, and ``k`` = |N(A)| (A and v counted)."""
    return (k + 1)[..., None] * received - total
