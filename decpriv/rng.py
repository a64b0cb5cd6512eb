"""Named random streams derived from one root seed (docs/ARCHITECTURE.md, "Rules").

Every consumer (data, graph, init, per-node noise, attack restarts, ...) asks for its own stream by name,
so adding a consumer never shifts the numbers another one draws.
"""

import hashlib

import numpy as np
import torch


def derive_seed(root: int, name: str) -> int:
    """A 63-bit seed that depends only on the root seed and the stream's name."""
    digest = hashlib.sha256(f"{int(root)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class Seeds:
    """Factory of independent, reproducible generators keyed by name."""

    def __init__(self, root: int):
        self.root = int(root)

    def seed(self, name: str) -> int:
        return derive_seed(self.root, name)

    def numpy(self, name: str) -> np.random.Generator:
        return np.random.default_rng(self.seed(name))

    def torch(self, name: str, device: torch.device | str = "cpu") -> torch.Generator:
        gen = torch.Generator(device=device)
        gen.manual_seed(self.seed(name))
        return gen


class ScopedSeeds(Seeds):
    """The streams whose names start with ``prefix`` only: an attack gets ``attack.*``, never the streams
    of the defense's noise or of the data."""

    def __init__(self, root: int, prefix: str):
        super().__init__(root)
        self.prefix = prefix

    def seed(self, name: str) -> int:
        if not name.startswith(self.prefix):
            raise PermissionError(f"stream {name!r} is outside {self.prefix!r}*")
        return super().seed(name)
