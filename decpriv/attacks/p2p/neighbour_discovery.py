"""Neighbour discovery by subset search (Pasquini et al. 2023, Sec. 4.2.1 and App. B).

An attacker that hears every neighbour of victim v (N(v) inside its closed neighbourhood, or every node
for an eavesdropper) looks for the set Q that v averaged: theta_v^{t+1/2} = mean_Q theta_u^{t-1/2} -
lr * step. The paper's test E(Q) = 0 (Eq. 12) holds for every Q in exact arithmetic and only works
through float rounding; the spec's residual ||theta_v^{t+1/2} - mean_Q theta_u^{t-1/2}|| is dominated
by the step itself (measured: under 15% exact on torus-16). We use instead a property of the true step:
the first layer of an MLP has weight gradient sum_i delta_i x_i^T over a batch of b samples, of rank at
most r - 1 = b * local_steps. For each Q the candidate step's first-layer block A(Q) is sketched to an
r x r matrix Psi A(Q) Omega (random Gaussian Psi, Omega), which is singular for the true Q and almost
surely regular otherwise. The score is the Hadamard ratio |det C| / prod_j ||c_j|| (scale-free, in
[0, 1]); the argmin over all Q wins, per round and summed (in logs) over the rounds seen so far, since
the neighbourhood does not change. Linear in Q, so all 2^free subsets cost one matmul and one batched
determinant.
"""

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pandas as pd
import torch

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.neighbourhood import closed, recorded_rounds, require_neighbours, updates
from decpriv.attacks.targets import fixed_targets
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.random import streams as rng
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth


@dataclass(eq=False)
class Discovered:
    table: pd.DataFrame  # victim, round, found, found_cumulative, candidates


def all_subsets(free: int) -> torch.Tensor:
    """(2^free, free) 0/1 rows, every subset of ``free`` items."""
    codes = torch.arange(2**free)
    return ((codes[:, None] >> torch.arange(free)) & 1).to(torch.float64)


def hadamard_log_ratio(C: torch.Tensor) -> torch.Tensor:
    """log(|det C| / prod_j ||c_j||) <= 0, -inf for a singular C."""
    return torch.linalg.slogdet(C).logabsdet - C.norm(dim=-2).log().sum(-1)


def discover(
    pool: np.ndarray,
    required: np.ndarray,
    victim: int,
    first: torch.Tensor,
    rounds: np.ndarray,
    psi: torch.Tensor,
    omega: torch.Tensor,
) -> pd.DataFrame:
    """Best Q per round and cumulatively for ``victim``; ``first`` (R, k, h, d) first-layer weights of the
    updates of ``pool`` (sorted) over the recorded rounds."""
    fixed = np.isin(pool, np.append(required, victim))
    free = np.flatnonzero(~fixed)
    S = torch.zeros(2 ** len(free), len(pool), dtype=torch.float64)
    S[:, torch.as_tensor(free)] = all_subsets(len(free))
    S[:, torch.as_tensor(np.flatnonzero(fixed))] = 1.0
    consecutive = np.flatnonzero(rounds[1:] == rounds[:-1] + 1) + 1
    target = first[consecutive, int(np.searchsorted(pool, victim))]  # (T, h, d)
    D = first[consecutive - 1] - target[:, None]  # (T, k, h, d): mean_Q D = -step for the true Q
    B = torch.einsum("ih,tkhd,dj->tkij", psi, D.double(), omega)
    scores = torch.stack([hadamard_log_ratio(torch.einsum("sk,kij->sij", S, b)) for b in B])
    best = scores.argmin(1)
    best_cum = scores.cumsum(0).argmin(1)

    def names(rows: torch.Tensor) -> list[str]:
        return [str(pool[S[i].bool().numpy()].tolist()) for i in rows.tolist()]

    return pd.DataFrame(
        {
            "victim": victim,
            "round": rounds[consecutive],
            "found": names(best),
            "found_cumulative": names(best_cum),
            "candidates": len(S),
        }
    )


@checked("attack")
class NeighbourDiscovery(Attack):
    """Find each neighbour's closed neighbourhood among the nodes the attacker hears."""

    name = "neighbour_discovery"
    headline = (Headline("discovery_final_exact_rate", 0.0, "higher", "a random guess of as many nodes"),)

    def __init__(
        self,
        max_free: Annotated[
            int, Range(ge=1, le=20, what="max_free (2^max_free subsets are searched)", eg=16)
        ] = 16,
    ):
        self.max_free = max_free

    def prepare(self, context: AttackContext) -> int:
        """Plan: the rank of one round's first-layer update, batch x local steps + 1 (the sketch's size)."""
        proto, model = context.protocol, context.model
        if proto.name != "dsgd" or proto.gossip_steps != 1:
            raise bad_value(
                "protocol", proto.name, "discovery reads D-PSGD updates", "use protocol=dsgd gossip_steps=1"
            )
        if proto.rounds < 2:
            raise bad_value(
                "protocol.rounds", proto.rounds, "needs two consecutive rounds", "use protocol.rounds >= 2"
            )
        if proto.momentum or proto.weight_decay:
            raise bad_value(
                "protocol.momentum",
                proto.momentum,
                "momentum and weight decay break the low-rank step the search relies on",
                "use protocol.momentum=0 protocol.weight_decay=0",
            )
        shape = model.shapes[0]
        batch = proto.batch_size if proto.batch_size is not None else int(context.data.local_sizes.max())
        rank = batch * proto.local_steps + 1
        if len(shape) != 2 or rank > min(shape):
            raise bad_value(
                "protocol.batch_size",
                proto.batch_size,
                f"the first layer {shape} must be a linear layer wider than batch x local steps ({rank - 1})",
                "use model=mlp with a smaller batch",
            )
        adv, net = context.adversary, context.network
        if not adv.eavesdropper:
            require_neighbours(net, adv.nodes)
        heard = net.n if adv.eavesdropper else int(net.degrees[adv.nodes].max()) + 1
        free = heard - (1 if adv.eavesdropper else 2)
        if free > self.max_free:
            raise bad_value(
                "attack.max_free",
                self.max_free,
                f"the search would range over 2^{free} subsets",
                f"raise attack.max_free to {free} or use a smaller graph",
            )
        return rank

    def run(self, view: View) -> Discovered:
        rounds = recorded_rounds(view.transcript)
        h, d = view.model.shapes[0]
        rank = view.plan
        gen = view.seeds.torch("attack.sketch")
        psi = rng.normal((rank, h), gen, dtype=torch.float64)
        omega = rng.normal((d, rank), gen, dtype=torch.float64)

        def first_layer(pool: np.ndarray) -> torch.Tensor:
            U = updates(view.transcript, pool)
            return U[..., : h * d].reshape(*U.shape[:2], h, d)

        tables = []
        if view.eavesdropper:
            pool = np.arange(view.network.n)
            first = first_layer(pool)
            none = np.array([], dtype=np.int64)
            tables = [
                discover(pool, none, int(v), first, rounds, psi, omega).assign(heard_by=-1) for v in pool
            ]
        else:
            for a in view.attackers:
                pool = closed(view.network, int(a))
                first = first_layer(pool)
                victims = np.setdiff1d(pool, view.attackers)
                tables += [
                    discover(pool, np.array([a]), int(v), first, rounds, psi, omega).assign(heard_by=int(a))
                    for v in victims
                ]
        return Discovered(pd.concat(tables, ignore_index=True))

    def expected(self, view: View) -> pd.DataFrame:
        """The searches the threat model fixes, rebuilt from the pipeline's view: every node, heard by
        the eavesdropper (``heard_by`` -1), or every honest node of each attacker's closed neighbourhood,
        heard by that attacker; each round with a previous one."""
        rounds = recorded_rounds(view.transcript)
        rounds = rounds[np.flatnonzero(rounds[1:] == rounds[:-1] + 1) + 1]
        if view.eavesdropper:
            victims, heard = np.arange(view.network.n), np.full(view.network.n, -1)
        else:  # a loop over the few attackers; their neighbourhoods as arrays
            hoods = [np.setdiff1d(closed(view.network, int(a)), view.attackers) for a in view.attackers]
            victims, heard = np.concatenate(hoods), np.repeat(view.attackers, [len(h) for h in hoods])
        return pd.DataFrame(
            {
                "victim": np.repeat(victims, len(rounds)).astype(np.int64),
                "round": np.tile(rounds, len(victims)).astype(np.int64),
                "heard_by": np.repeat(heard, len(rounds)).astype(np.int64),
            }
        )

    def fixed(self, findings: Discovered, view: View) -> pd.DataFrame:
        """The finding on the threat model's searches: one outside is refused, one omitted found nothing
        (never exact: the random guess's baseline)."""
        whose = "every node the eavesdropper hears, or each attacker's honest neighbours, each round after the first"
        table, _ = fixed_targets(
            self.name, findings.table, torch.zeros(len(findings.table), 1), self.expected(view), whose
        )
        return table.fillna({"found": "", "found_cumulative": "", "candidates": 0})

    def evaluate(self, findings: Discovered, truth: Truth, view: View) -> Findings:
        table = self.fixed(findings, view)
        true = {v: str(closed(view.network, int(v)).tolist()) for v in table.victim.unique()}
        table["true"] = table.victim.map(true)
        table["exact"] = table.found == table.true
        table["exact_cumulative"] = table.found_cumulative == table.true
        last = table[table["round"] == table["round"].max()]
        summary = {
            "discovery_exact_rate": float(table.exact.mean()),
            "discovery_exact_rate_cumulative": float(table.exact_cumulative.mean()),
            "discovery_final_exact_rate": float(last.exact_cumulative.mean()),
            "discovery_trials": len(table),
        }
        degree = float(np.mean([len(closed(view.network, int(v))) - 1 for v in true]))
        summary["verdict"] = (
            f"neighbour discovery: the exact neighbourhood of {len(true)} victim(s) (mean degree {degree:.1f}) "
            f"found in {summary['discovery_exact_rate']:.1%} of {len(table)} trials one round at a time, "
            f"{summary['discovery_final_exact_rate']:.1%} accumulated to the last round (a guess of as many "
            "nodes at random is almost never exact)."
        )
        return Findings(tables={"neighbour_discovery": table}, summary=summary)
