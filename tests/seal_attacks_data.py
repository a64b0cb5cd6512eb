"""Attacks made of data only, for tests/test_seal_data.py (issue 45): answers that would make the decoder
spin or grow the pipeline, and findings of NaN and inf that a scorer could read as a success.

Not a test module: the sealed attack process imports it to unpickle the attack.
"""

import sys

import numpy as np
import pandas as pd
import torch

from decpriv.attacks.base import Attack
from decpriv.attacks.centralized import GradientInversion
from decpriv.attacks.knowledge.attack import KnowledgeMatrix
from decpriv.attacks.p2p.echo import Echo
from decpriv.attacks.p2p.mia import MembershipInference
from decpriv.report.findings import Findings

FILLS = {
    "nans": float("nan"),
    "infs": float("inf"),
    "negative_infs": float("-inf"),
}  # config words: nan is a float


def dag_bomb(levels: int = 22) -> bytes:
    """About 270 bytes whose memo makes each level a tagged tuple ``("list", [previous, previous])``, the
    previous level read twice by memo GET: a tree of 2**levels lists for whoever walks it (the decoder
    before issue 45 spun on it, growing to gigabytes)."""
    out = bytearray(b"\x80\x05\x8c\x04list\x940N")  # memo 0: the tag; the innermost value: None
    for level in range(levels):
        held = bytes([level + 1])  # the previous level, memoized then popped, read back twice
        out += b"\x940h\x00](h" + held + b"h" + held + b"e\x86"
    return bytes(out + b".")


def deep_nesting(depth: int = 10_000) -> bytes:
    """A list inside a list ``depth`` times: 2 bytes a level, deeper than any recursion limit."""
    return b"\x80\x05" + b"]" * depth + b"a" * (depth - 1) + b"."


def declared_length(length: int = 1 << 40) -> bytes:
    """BINBYTES8 declaring ``length`` bytes, none of which follow: Python's unpickler allocates them first."""
    return b"\x80\x05\x8e" + length.to_bytes(8, "little")


def memo_index(index: int = 1 << 31) -> bytes:
    """9 bytes: LONG_BINPUT ``index``, which makes Python's unpickler grow (and zero) its memo to 2 * index."""
    return b"\x80\x05)r" + index.to_bytes(4, "little") + b"."


PAYLOADS = {"dag": dag_bomb, "deep": deep_nesting, "length": declared_length, "memo": memo_index}


def send_bytes(data: bytes) -> None:
    """Write ``data`` as is on the answer stream (bypassing the sealed process's own encoding)."""
    frame = sys._getframe(1)
    while "reply" not in frame.f_locals:
        frame = frame.f_back
    frame.f_locals["reply"].write(data)
    frame.f_locals["reply"].flush()


class Bomb(Attack):
    """Answers with one of :data:`PAYLOADS`, written raw."""

    name = "bomb"
    needs_adversary = False

    def __init__(self, payload: str = "dag"):
        self.payload = payload

    def run(self, view):
        send_bytes(PAYLOADS[self.payload]())
        return pd.DataFrame({"way": [self.payload]})

    def evaluate(self, findings, truth, view):
        return Findings(tables={"bomb": findings})


class NonFiniteMembership(MembershipInference):
    """decpriv's membership attack, every tested model replaced by NaN (or inf): the data of a fake."""

    def __init__(self, fill: str = "nans", **options):
        super().__init__(**options)
        self.fill = fill

    def run(self, view):
        targets = super().run(view)
        targets.models = torch.full_like(targets.models, FILLS[self.fill])
        return targets


class NonFiniteInversion(GradientInversion):
    """Gradient inversion whose every reconstruction is NaN (or inf)."""

    def __init__(self, fill: str = "nans", **options):
        super().__init__(**options)
        self.fill = fill

    def run(self, view):
        found = super().run(view)
        for inversion in found.inversions:
            inversion.x.fill_(FILLS[self.fill])
        return found


class NonFiniteKnowledge(KnowledgeMatrix):
    """The knowledge-matrix attack with every recovered value NaN (or inf), each still claimed recovered."""

    def __init__(self, fill: str = "nans", **options):
        super().__init__(**options)
        self.fill = fill

    def run(self, view):
        found = super().run(view)
        found.values = np.full_like(np.asarray(found.values, dtype=float), FILLS[self.fill])
        return found


class NonFiniteEcho(Echo):
    """The echo attack with every watched node's model NaN (or inf)."""

    def __init__(self, fill: str = "nans", **options):
        super().__init__(**options)
        self.fill = fill

    def run(self, view):
        found = super().run(view)
        found.targets.models = torch.full_like(found.targets.models, FILLS[self.fill])
        return found
