"""A verifiable ledger of FedAvg/FedSGD updates: the "Privacy in DML" slides' blockchain-based gradient
exchange, simulated as what it guarantees (integrity), not as a consensus network.

Each round t every chosen client u posts a hash commitment c_u = SHA-256(t, u, r_u, update_u) with a
fresh 32-byte nonce r_u (hiding as far as SHA-256 behaves as a random oracle, binding by its collision
resistance; Halevi and Micali, CRYPTO 1996) and sends the opening (update_u, r_u) to the aggregator. The
aggregator appends a block: the previous block's hash, the round's commitments as the clients posted
them, the openings it aggregated and the aggregate. Every node verifies the block (:func:`verify`): it
links to the chain's head, every opening matches its client's commitment, no posted commitment lacks an
opening, and the aggregate is the n_u-weighted mean of the openings, recomputed bit for bit. A failed
check rejects the block: the nodes keep the previous global model, and the run records the round.

Verifying the aggregate against hash commitments needs their openings, so every update is on the
ledger in the clear: the ledger hides nothing from the nodes (nor from the aggregator); it makes the
aggregation accountable. Pedersen commitments would verify the sum without openings, and zero-knowledge
proofs a property of an update (its norm bound); neither is simulated (no maintained Python library does
vector Pedersen commitments or such proofs at this scale). Client signatures on the commitments, and the
consensus that orders blocks, are assumed, not simulated.

``tamper`` makes the aggregator active from round ``tamper_from`` on: ``alter`` aggregates a forged update
(the sign-flipped one) in place of the round's first client's while publishing that client's honest
opening; ``drop`` leaves that client out of the aggregate and of the openings.
"""

import hashlib
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch

from decpriv.config_types import Range, checked
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.errors import bad_value

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder

GENESIS = bytes(32)
NONCE_BYTES = 32


def commitment(round_: int, client: int, nonce: bytes, update: np.ndarray) -> bytes:
    """SHA-256 over the round, the client, the nonce and the update's bytes as sent."""
    digest = hashlib.sha256(round_.to_bytes(8, "little") + client.to_bytes(8, "little") + nonce)
    digest.update(np.ascontiguousarray(update).tobytes())
    return digest.digest()


def weighted_mean(openings: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The FedAvg aggregate of (k, p) updates weighted by local set sizes, in float64; the aggregator and
    every verifier compute it with this one function, so an honest aggregate matches bit for bit."""
    w = weights.astype(np.float64)
    return (w[:, None] * openings.astype(np.float64)).sum(0) / w.sum()


@dataclass(frozen=True, eq=False)
class Block:
    round: int
    previous: bytes  # hash of the block before (GENESIS for the first)
    clients: np.ndarray  # (k,) who posted a commitment this round, as they posted them
    commitments: tuple[bytes, ...]
    opened: np.ndarray  # (j,) whose openings the aggregator published
    nonces: tuple[bytes, ...]
    openings: np.ndarray  # (j, p) the updates it says it aggregated
    aggregate: np.ndarray  # (p,) float64

    def digest(self) -> bytes:
        h = hashlib.sha256(self.round.to_bytes(8, "little") + self.previous)
        h.update(self.clients.astype(np.int64).tobytes() + b"".join(self.commitments))
        h.update(self.opened.astype(np.int64).tobytes() + b"".join(self.nonces))
        h.update(np.ascontiguousarray(self.openings).tobytes() + self.aggregate.tobytes())
        return h.digest()

    def chain_bytes(self) -> int:
        """What the chain itself stores: header (round, two hashes) and the (client, commitment) pairs;
        the openings and the aggregate are referenced by the block hash and downloaded to verify."""
        return 8 + 2 * 32 + len(self.clients) * (8 + 32)


def verify(block: Block, head: bytes, weights: np.ndarray) -> str | None:
    """What an honest node checks; the first failure in words, None when the block is valid.
    ``weights``: every node's public local set size."""
    if block.previous != head:
        return "the block does not extend the chain's head"
    posted = dict(zip(block.clients.tolist(), block.commitments, strict=True))
    for client, nonce, opening in zip(block.opened.tolist(), block.nonces, block.openings, strict=True):
        if posted.get(client) != commitment(block.round, client, nonce, opening):
            return f"client {client}'s published update does not match its commitment"
    missing = np.setdiff1d(block.clients, block.opened)
    if len(missing):
        return f"client {int(missing[0])} committed an update the aggregate leaves out"
    if not np.array_equal(weighted_mean(block.openings, weights[block.opened]), block.aggregate):
        return "the aggregate is not the weighted mean of the committed updates"
    return None


@checked("defense")
class UpdateLedger(Defense):
    name = "ledger"

    def __init__(
        self,
        tamper: Literal["none", "alter", "drop"] = "none",
        tamper_from: Annotated[int, Range(ge=0, what="the first tampered round", eg=3)] = 0,
    ):
        self.tamper, self.tamper_from = tamper, tamper_from
        self.chain: list[Block] = []
        self.head = GENESIS
        self._cost = {"chain": 0, "openings": 0, "commit": 0.0, "verify": 0.0}
        self.detected: tuple[int, str] | None = None
        self.rejected = 0

    def bind(self, setup: Built) -> None:
        if setup.protocol.name not in ("fedavg", "fedsgd"):
            raise bad_value(
                "defense",
                self.name,
                f"the ledger checks a server's aggregate against its clients' commitments, and "
                f"protocol={setup.protocol.name} has no server",
                "use protocol=fedavg or fedsgd",
            )
        if self.tamper != "none" and self.tamper_from >= setup.protocol.rounds:
            raise bad_value(
                "defense.tamper_from",
                self.tamper_from,
                f"the run has rounds 0..{setup.protocol.rounds - 1}",
                f"use defense.tamper_from <= {setup.protocol.rounds - 1}",
            )
        self._nonces = setup.seeds.numpy("defense.ledger_nonces")

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        recorder.record(round_, 0, sent_to_server(updates, chosen, held))
        order = torch.sort(chosen).values.cpu().numpy()
        sent = updates[torch.as_tensor(order, device=updates.device)].cpu().numpy()
        sizes = weights.cpu().numpy()
        clock = time.perf_counter()
        nonces = tuple(self._nonces.bytes(NONCE_BYTES) for _ in order)
        posted = tuple(commitment(round_, int(u), r, x) for u, r, x in zip(order, nonces, sent, strict=True))
        block = self._aggregate(round_, order, posted, nonces, sent, sizes)
        committed = time.perf_counter()
        failure = verify(block, self.head, sizes)
        self._cost["verify"] += time.perf_counter() - committed
        self._cost["commit"] += committed - clock
        self._cost["chain"] += block.chain_bytes()
        self._cost["openings"] += block.openings.nbytes + block.aggregate.nbytes + NONCE_BYTES * len(nonces)
        if failure is not None:
            self.rejected += 1
            if self.detected is None:
                self.detected = (round_, failure)
                warnings.warn(
                    f"ledger: the nodes reject round {round_}'s block ({failure}) and every block that fails "
                    "after it, keeping the last verified global model",
                    stacklevel=2,
                )
            return held
        self.chain.append(block)
        self.head = block.digest()
        return torch.as_tensor(block.aggregate, dtype=held.dtype, device=held.device)

    def _aggregate(self, round_, clients, posted, nonces, sent, sizes) -> Block:
        """The aggregator's block: honest, or tampered with from ``tamper_from`` on."""
        opened, used, published = clients, sent, sent
        if self.tamper != "none" and round_ >= self.tamper_from:
            if self.tamper == "alter":
                used = sent.copy()
                used[0] = -sent[0]
            else:
                opened, used, published, nonces = clients[1:], sent[1:], sent[1:], nonces[1:]
        aggregate = weighted_mean(used, sizes[opened])
        return Block(round_, self.head, clients, posted, opened, nonces, published, aggregate)

    def summary(self) -> dict[str, Any]:
        rounds = max(len(self.chain) + self.rejected, 1)
        detected = self.detected
        return {
            "ledger_commitment": "SHA-256 hash commitment",
            "ledger_blocks": len(self.chain),
            "ledger_chain_bytes_per_round": self._cost["chain"] / rounds,
            "ledger_opening_bytes_per_round": self._cost["openings"] / rounds,
            "ledger_commit_seconds_per_round": self._cost["commit"] / rounds,
            "ledger_verify_seconds_per_round": self._cost["verify"] / rounds,
            "ledger_tamper": self.tamper,
            "ledger_rejected_rounds": self.rejected,
            "ledger_detected_round": detected[0] if detected else None,
            "ledger_detection": detected[1] if detected else "",
        }
