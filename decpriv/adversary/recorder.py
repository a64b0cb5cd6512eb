"""The recorder keeps what the adversary sees while the protocol runs.

Memory is proportional to observed messages x recorded steps x parameters: only messages from observed
senders (broadcast protocols) or on observed edges (per-edge protocols) are copied, to the CPU.
A defense that masks messages per receiver (secure aggregation) switches the columns to the edges the
adversary receives on (:meth:`Recorder.per_receiver`), adds the aggregates the corrupt nodes obtain, and
keeps the plain messages apart for scoring only (:meth:`Recorder.truth`, never in the Transcript).
A defense that encrypts messages (homomorphic encryption) marks the ones the adversary holds only as
ciphertexts (:meth:`Recorder.mark_encrypted`): their values carry no plaintext (NaN).
"""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class Transcript:
    """Messages the adversary saw. Row r of ``values`` is the step ``times[r] = (round, step)``; column k
    is the message from ``senders[k]`` to ``receivers[k]`` (-1: broadcast to every neighbour)."""

    senders: np.ndarray
    receivers: np.ndarray
    times: np.ndarray
    values: torch.Tensor
    aggregates: torch.Tensor | None = None  # (R, |A|, p) each corrupt node's secure-aggregation output
    encrypted: torch.Tensor | None = None  # (R, K) True: the adversary holds only a ciphertext of the message

    def columns(self, senders: np.ndarray, receivers: np.ndarray) -> np.ndarray:
        """The column of each (sender, receiver) pair (the first one recorded), -1 where none was."""
        senders, receivers = np.asarray(senders), np.asarray(receivers)
        ids = (self.senders, self.receivers, senders, receivers)
        base = max(int(a.max(initial=0)) for a in ids) + 2  # one key per pair; receivers start at -1
        keys = self.senders * base + self.receivers + 1
        order = np.argsort(keys, kind="stable")
        query = senders * base + receivers + 1
        at = np.searchsorted(keys[order], query)
        # a sentinel past the end: a query above every key reads as absent
        return np.where(np.append(keys[order], -1)[at] == query, np.append(order, -1)[at], -1)

    def column(self, sender: int, receiver: int = -1) -> int:
        hit = int(self.columns(np.array([sender]), np.array([receiver]))[0])
        if hit < 0:
            raise KeyError(f"no message from {sender} to {receiver} was observed")
        return hit

    def sent_by(self, sender: int, receiver: int = -1) -> torch.Tensor:
        """(R, p) every recorded message from ``sender`` (to ``receiver``)."""
        return self.values[:, self.column(sender, receiver)]


class Recorder:
    """Collects a :class:`Transcript`; disabled (free) when no attack is configured."""

    def __init__(self, senders: np.ndarray, receivers: np.ndarray, enabled: bool = True):
        self.senders = np.asarray(senders, dtype=np.int64)
        self.receivers = np.asarray(receivers, dtype=np.int64)
        self.enabled = enabled and self.senders.size > 0
        self._times: list[tuple[int, int]] = []
        self._values: list[torch.Tensor] = []
        self._aggregates: list[torch.Tensor] = []
        self._plain: list[torch.Tensor] = []
        self._encrypted: list[torch.Tensor] = []
        self.plain_senders = np.unique(self.senders)

    @classmethod
    def broadcast(cls, senders: np.ndarray, enabled: bool = True) -> "Recorder":
        return cls(senders, np.full(len(senders), -1), enabled)

    def record(self, round_: int, step: int, messages: torch.Tensor) -> None:
        """``messages``: (n, p) one broadcast value per node, or (k, p) already one row per observed edge."""
        if not self.enabled:
            return
        rows = (
            messages[torch.as_tensor(self.senders, device=messages.device)]
            if self.receivers[0] == -1
            else messages
        )
        self._times.append((round_, step))
        self._values.append(rows.detach().to("cpu", copy=True))

    def per_receiver(self, senders: np.ndarray, receivers: np.ndarray) -> None:
        """Record one column per (sender, receiver) edge instead; only before the first record."""
        if self._times:
            raise RuntimeError("the recorder's columns cannot change once recording started")
        self.senders = np.asarray(senders, dtype=np.int64)
        self.receivers = np.asarray(receivers, dtype=np.int64)
        self.plain_senders = np.unique(self.senders)

    def mark_encrypted(self, encrypted: torch.Tensor) -> None:
        """After each :meth:`record` of broadcast messages: (n,) True where the adversary holds only a
        ciphertext of that node's message."""
        if not self.enabled:
            return
        rows = encrypted[torch.as_tensor(self.senders, device=encrypted.device)]
        self._encrypted.append(rows.detach().to("cpu", copy=True))

    def record_hidden(self, aggregates: torch.Tensor, plain: torch.Tensor) -> None:
        """After :meth:`record` of masked messages: the corrupt nodes' (|A|, p) aggregates (seen) and the
        (n, p) plain messages (ground truth of the observed senders, for scoring only)."""
        if not self.enabled:
            return
        self._aggregates.append(aggregates.detach().to("cpu", copy=True))
        rows = plain[torch.as_tensor(self.plain_senders, device=plain.device)]
        self._plain.append(rows.detach().to("cpu", copy=True))

    def truth(self) -> dict[str, object]:
        """The plain messages behind masked ones (empty when nothing was masked): scoring only."""
        if not self._plain:
            return {}
        return {"plain_senders": self.plain_senders, "plain_messages": torch.stack(self._plain)}

    def transcript(self) -> Transcript:
        values = (
            torch.stack(self._values) if self._values else torch.empty(0, self.senders.size, 0, device="cpu")
        )
        aggregates = torch.stack(self._aggregates) if self._aggregates else None
        encrypted = torch.stack(self._encrypted) if self._encrypted else None
        return Transcript(
            self.senders,
            self.receivers,
            np.array(self._times, dtype=np.int64).reshape(-1, 2),
            values,
            aggregates,
            encrypted,
        )
