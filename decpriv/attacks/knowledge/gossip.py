"""Reconstructing private values from gossip averaging (El Mrini, Cyffers & Bellet, ICML 2024, Sec. 3).

The attackers pool their own values x_a^0 and their neighbours' broadcasts x_v^t = (W^t x^0)_v, t < T, into
K_T X = Y_T (Eq. 3) and solve it wherever it determines x_j (see :mod:`.matrix`).
"""

from collections.abc import Iterator

import numpy as np

from decpriv.adversary.view import View
from decpriv.attacks.knowledge.matrix import (
    Knowledge,
    exact_knowledge,
    gossip_row_space,
    knowledge_blocks,
    observed_nodes,
)


def observations(view: View, steps: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks (K_t, Y_t) of the system: the attackers' own x^0, then their neighbours' x^t, from the
    transcript (whose columns are the observed senders)."""
    senders = view.transcript.senders
    order = np.argsort(senders)
    values = view.transcript.values.double().numpy()
    flat = values.reshape(values.shape[0], values.shape[1], -1)
    seen = observed_nodes(view.network.adjacency, view.attackers)
    for t, K_t in knowledge_blocks(view.network.W, view.attackers, steps):
        nodes = view.attackers if t < 0 else seen
        yield K_t, flat[max(t, 0)][order[np.searchsorted(senders[order], nodes)]]


def reconstruct(
    view: View, steps: int, rcond: float | None, tol: float, exact: bool
) -> tuple[Knowledge, Knowledge | None]:
    """The answer (with values) from the first ``steps`` recorded messages x^0 .. x^{T-1}: float64 where its
    margins are clear, certified by modular arithmetic where not (first, on large networks); when ``exact``,
    also sympy's rational RREF of the same K_T (an independent check)."""
    W, attackers = view.network.W, view.attackers
    floating = gossip_row_space(W, attackers, steps, observations(view, steps), rcond, tol)
    rational = exact_knowledge(view.network.W, view.attackers, steps) if exact else None
    return floating, rational
