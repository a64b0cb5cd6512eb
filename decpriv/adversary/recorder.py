"""The recorder keeps what the adversary sees while the protocol runs.

Memory is proportional to observed messages x recorded steps x parameters: only messages from observed
senders (broadcast protocols) or on observed edges (per-edge protocols) are copied, to the CPU.
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

    def column(self, sender: int, receiver: int = -1) -> int:
        hit = np.flatnonzero((self.senders == sender) & (self.receivers == receiver))
        if hit.size == 0:
            raise KeyError(f"no message from {sender} to {receiver} was observed")
        return int(hit[0])

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

    def transcript(self) -> Transcript:
        values = torch.stack(self._values) if self._values else torch.empty(0, self.senders.size, 0)
        return Transcript(
            self.senders, self.receivers, np.array(self._times, dtype=np.int64).reshape(-1, 2), values
        )
