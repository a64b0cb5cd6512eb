"""A verifiable ledger of FedAvg/FedSGD updates: the "Privacy in DML" slides' blockchain-based gradient
exchange, simulated as what it guarantees (integrity), not as a consensus network.

Each round t every chosen client u posts a hash commitment c_u = SHA-256(tag, t, u, dtype, shape, |r_u|,
r_u, update_u) on the chain itself, each field length-prefixed after a domain tag (:func:`commitment`): an
opening binds its bytes and how they are read, so the same bytes published as int32, reshaped, or with
the nonce's boundary moved open nothing, with a fresh 32-byte nonce r_u from the operating system (``secrets``: hiding as far as SHA-256
behaves as a random oracle, binding by its collision resistance; Halevi and Micali, CRYPTO 1996; a nonce
drawn from the run's seed would hide nothing from whoever knows the config), and sends the opening
(update_u, r_u) to the aggregator. The aggregator appends a block: the previous block's hash, the round's
commitments, the openings it aggregated and the aggregate. Every client verifies the block against what
the clients posted (:func:`verify`): it is well formed (its round, client ids, nonce lengths, the dtype
and shape of its openings and aggregate are the ones the clients know; anything else is rejected in a
sentence, never a crash), it links to the chain's head, it lists exactly the round's clients,
each once, with the commitment each posted itself (a client checks its own), every listed client is
opened exactly once and nobody else, every opening matches its commitment, and the aggregate is the
n_u-weighted mean of the openings, recomputed bit for bit (NaN equal to NaN: an honest update that
diverged is not tampering). A failed check rejects the block: the nodes keep the previous global model,
and the run records the round.

Verifying the aggregate against hash commitments needs their openings, so every update is on the
ledger in the clear: the ledger hides nothing from the nodes (nor from the aggregator); it makes the
aggregation accountable. Pedersen commitments would verify the sum without openings, and zero-knowledge
proofs a property of an update (its norm bound); neither is simulated (no maintained Python library does
vector Pedersen commitments or such proofs at this scale). Client signatures on the commitments, and the
consensus that orders blocks, are assumed, not simulated.

``tamper`` makes the aggregator active from round ``tamper_from`` on, each way a lie the verifier must
catch: ``alter`` aggregates a forged update (the sign-flipped one) in place of the round's first client's
while publishing that client's honest opening; ``drop`` leaves that client out of the block, its
commitment with it; ``duplicate`` opens the first client's honest update once for every client (its
weight the whole round's); ``replace`` puts a commitment of its own making, opened consistently, in place
of the first client's.
"""

import hashlib
import secrets
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.errors import bad_value

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder

GENESIS = bytes(32)
NONCE_BYTES = 32
# format 2: dtype, shape and nonce length bound, each field framed (format 1 hashed round, client, nonce
# and the update's raw bytes back to back: the same bytes read as another dtype or shape opened it)
FORMAT = 2
COMMITMENT_TAG = b"decpriv/update-ledger/commitment/v2"
BLOCK_TAG = b"decpriv/update-ledger/block/v2"


def _framed(*fields: bytes) -> bytes:
    """Each field preceded by its length (8 bytes): no field's end can move into the next."""
    return b"".join(len(f).to_bytes(8, "little") + f for f in fields)


def _array_fields(array: np.ndarray) -> tuple[bytes, bytes, bytes]:
    """An array as its dtype, its shape and its bytes: all three, so bytes read another way differ."""
    array = np.ascontiguousarray(array)
    shape = np.asarray(array.shape, dtype="<i8").tobytes()
    return array.dtype.str.encode(), shape, array.tobytes()


def commitment(round_: int, client: int, nonce: bytes, update: np.ndarray) -> bytes:
    """SHA-256 of the domain tag, the round, the client, the update's dtype and shape, the nonce (its
    length with it) and the update's bytes, each field length-prefixed."""
    head = (COMMITMENT_TAG, int(round_).to_bytes(8, "little", signed=True), int(client).to_bytes(8, "little"))
    dtype, shape, data = _array_fields(update)
    return hashlib.sha256(_framed(*head, dtype, shape, bytes(nonce), data)).digest()


@dataclass(frozen=True)
class UpdateForm:
    """What every client knows of an update before any block: its dtype and its number of values (the
    model is public)."""

    dtype: np.dtype
    values: int


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
    format: int = FORMAT  # the commitment encoding: a verifier accepts its own only

    def digest(self) -> bytes:
        """The block's hash (the next block's ``previous``): every field framed, arrays with their dtype
        and shape, after a domain tag of its own."""
        fields = [BLOCK_TAG, int(self.round).to_bytes(8, "little", signed=True), self.previous]
        for array in (self.clients, self.opened, self.openings, self.aggregate):
            fields += _array_fields(array)
        fields += [*self.commitments, *self.nonces]
        return hashlib.sha256(_framed(*fields)).digest()

    def chain_bytes(self) -> int:
        """What the chain itself stores: header (round, two hashes) and the (client, commitment) pairs;
        the openings and the aggregate are referenced by the block hash and downloaded to verify."""
        return 8 + 2 * 32 + len(self.clients) * (8 + 32)


def verify(
    block: Block, head: bytes, weights: np.ndarray, posted: dict[int, bytes], form: UpdateForm
) -> str | None:
    """What the honest clients check; the first failure in words, None when the block is valid; it never
    raises (a block no check names is rejected with the error it caused). ``weights``: every node's
    public local set size; ``posted``: each of the round's clients and the commitment it posted on the
    chain itself (a client knows its own; the round's clients are public); ``form``: the updates' dtype
    and size."""
    try:
        return malformed(block, form, len(weights)) or _checked(block, head, weights, posted)
    except Exception as error:  # a malformation no check names: the nodes reject, they do not crash
        return f"the block is malformed ({type(error).__name__}: {error})"


def _checked(block: Block, head: bytes, weights: np.ndarray, posted: dict[int, bytes]) -> str | None:
    """The checks of a well-formed block: chain, listing, openings, aggregate."""
    if block.previous != head:
        return "the block does not extend the chain's head"
    problem = _listed(block.clients.tolist(), block.commitments, posted) or _opened_once(block)
    if problem is not None:
        return problem
    for client, nonce, opening in zip(block.opened.tolist(), block.nonces, block.openings, strict=True):
        if posted[client] != commitment(block.round, client, nonce, opening):
            return f"client {client}'s published update does not match its commitment"
    recomputed = weighted_mean(block.openings, weights[block.opened])
    if not np.array_equal(recomputed, block.aggregate, equal_nan=True):
        return "the aggregate is not the weighted mean of the committed updates"
    return None


def malformed(block: Block, form: UpdateForm, nodes: int) -> str | None:
    """The block's fields are of the kinds the commitments were made of, or the first that is not, in
    words: a block reinterpreting the clients' bytes (another dtype, shape, nonce boundary) is named."""
    if block.format != FORMAT:
        return (
            f"the block is in commitment format {block.format!r}, and this verifier reads format {FORMAT} "
            "(dtype, shape and nonce length bound); an older chain is rebuilt, not verified"
        )
    if isinstance(block.round, bool) or not isinstance(block.round, int | np.integer) or block.round < 0:
        return f"the block's round {block.round!r} is not a round (an integer 0 or more)"
    if not isinstance(block.previous, bytes) or len(block.previous) != 32:
        return "the block's link to the previous block is not a 32-byte SHA-256 hash"
    for name in ("clients", "opened"):
        problem = _ids(getattr(block, name), name, nodes)
        if problem is not None:
            return problem
    return _framing(block) or _arrays(block, form)


def _ids(ids: object, name: str, nodes: int) -> str | None:
    what = {"clients": "listed clients", "opened": "opened clients"}[name]
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind not in "iu":
        kind = f"{ids.dtype} of shape {ids.shape}" if isinstance(ids, np.ndarray) else type(ids).__name__
        return f"the block's {what} are {kind}, not a list of integer client ids"
    outside = next((int(c) for c in ids if not 0 <= c < nodes), None)
    if outside is not None:
        return f"the block's {what} include {outside}, and the nodes are 0..{nodes - 1}"
    return None


def _framing(block: Block) -> str | None:
    """One 32-byte commitment a listed client, one nonce of NONCE_BYTES an opened client."""
    if len(block.commitments) != len(block.clients):
        return f"the block carries {len(block.commitments)} commitments for {len(block.clients)} clients"
    bad = next((i for i, c in enumerate(block.commitments) if not isinstance(c, bytes) or len(c) != 32), None)
    if bad is not None:
        return f"client {block.clients[bad]}'s commitment in the block is not a 32-byte SHA-256 digest"
    if len(block.nonces) != len(block.opened):
        return f"the block carries {len(block.nonces)} nonces for {len(block.opened)} openings"
    for client, nonce in zip(block.opened.tolist(), block.nonces, strict=True):
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            size = f"{len(nonce)} bytes" if isinstance(nonce, bytes) else type(nonce).__name__
            return f"client {client}'s nonce is {size}, not {NONCE_BYTES} bytes (the nonce's boundary moved)"
    return None


def _arrays(block: Block, form: UpdateForm) -> str | None:
    """The openings are the clients' dtype, one row of ``form.values`` per opened client; the aggregate
    float64 of ``form.values``."""
    openings, aggregate, rows = block.openings, block.aggregate, len(block.opened)
    if not isinstance(openings, np.ndarray) or openings.dtype != form.dtype:
        kind = openings.dtype if isinstance(openings, np.ndarray) else type(openings).__name__
        return f"the openings are published as {kind}, and the clients' updates are {np.dtype(form.dtype)}"
    if openings.shape != (rows, form.values):
        return (
            f"the openings have shape {openings.shape}, and {rows} updates of {form.values} values have "
            f"shape ({rows}, {form.values})"
        )
    if (
        not isinstance(aggregate, np.ndarray)
        or aggregate.dtype != np.float64
        or aggregate.shape != (form.values,)
    ):
        kind = (
            f"{aggregate.dtype} of shape {aggregate.shape}"
            if isinstance(aggregate, np.ndarray)
            else "not an array"
        )
        return f"the aggregate is {kind}, not float64 of shape ({form.values},)"
    return None


def _listed(clients: list[int], commitments: tuple[bytes, ...], posted: dict[int, bytes]) -> str | None:
    """The block lists each of the round's clients once, each with the commitment it posted itself."""
    twice = next((c for c in clients if clients.count(c) > 1), None)
    if twice is not None:
        return f"the block lists client {twice} {clients.count(twice)} times"
    left_out = sorted(set(posted) - set(clients))
    if left_out:
        return f"client {left_out[0]} posted a commitment the block leaves out"
    stranger = next((c for c in clients if c not in posted), None)
    if stranger is not None:
        return f"the block lists client {stranger}, which posted nothing this round"
    for client, made in zip(clients, commitments, strict=True):
        if made != posted[client]:
            return f"client {client}'s commitment in the block is not the one it posted"
    return None


def _opened_once(block: Block) -> str | None:
    """Every listed client opened exactly once, nobody else."""
    opened = block.opened.tolist()
    twice = next((c for c in opened if opened.count(c) > 1), None)
    if twice is not None:
        return f"client {twice}'s update is opened {opened.count(twice)} times"
    missing = sorted(set(block.clients.tolist()) - set(opened))
    if missing:
        return f"client {missing[0]} committed an update the aggregate leaves out"
    stranger = next((c for c in opened if c not in set(block.clients.tolist())), None)
    if stranger is not None:
        return f"the block opens an update of client {stranger}, which is not listed"
    return None


@checked("defense")
class UpdateLedger(Defense):
    name = "ledger"

    def __init__(
        self,
        tamper: Literal["none", "alter", "drop", "duplicate", "replace"] = "none",
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
                f"{type(setup.protocol).__name__} (the protocol chosen) has no server",
                "use protocol=fedavg or fedsgd",
            )
        if self.tamper != "none" and self.tamper_from >= setup.protocol.rounds:
            raise bad_value(
                "defense.tamper_from",
                self.tamper_from,
                f"the run has rounds 0..{setup.protocol.rounds - 1}",
                f"use defense.tamper_from <= {setup.protocol.rounds - 1}",
            )

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
        nonces = tuple(secrets.token_bytes(NONCE_BYTES) for _ in order)  # the clients' own, not the seed's
        posted = tuple(commitment(round_, int(u), r, x) for u, r, x in zip(order, nonces, sent, strict=True))
        block = self._aggregate(round_, order, posted, nonces, sent, sizes)
        committed = time.perf_counter()
        form = UpdateForm(sent.dtype, sent.shape[1])  # the clients' own updates: known before the block
        failure = verify(block, self.head, sizes, dict(zip(order.tolist(), posted, strict=True)), form)
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
        if self.tamper == "none" or round_ < self.tamper_from:
            return Block(
                round_, self.head, clients, posted, clients, nonces, sent, weighted_mean(sent, sizes[clients])
            )
        opened, used, published = clients, sent, sent
        if self.tamper == "alter":
            used = sent.copy()
            used[0] = -sent[0]
        elif self.tamper == "drop":
            clients, posted, nonces = clients[1:], posted[1:], nonces[1:]
            opened, used, published = clients, sent[1:], sent[1:]
        elif self.tamper == "duplicate":
            opened = np.full_like(clients, clients[0])
            used = published = np.repeat(sent[:1], len(clients), axis=0)
            nonces = (nonces[0],) * len(clients)
        else:  # replace: a commitment of its own, opened consistently, for the first client
            used = published = sent.copy()
            used[0] = -sent[0]
            own = secrets.token_bytes(NONCE_BYTES)
            posted = (commitment(round_, int(clients[0]), own, used[0]), *posted[1:])
            nonces = (own, *nonces[1:])
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
