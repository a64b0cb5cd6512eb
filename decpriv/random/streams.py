"""Named random streams derived from one root seed (docs/ARCHITECTURE.md, "Rules").

Every consumer (data, graph, init, per-node noise, attack restarts, ...) asks for its own stream by name,
so adding a consumer never shifts the numbers another one draws.

Every stream is a CPU generator, whatever device the run uses, and every draw goes through the functions
below: drawn on the CPU, then moved to the device that consumes it. CUDA's generator (Philox) and the
CPU's (Mersenne twister) give other numbers for one seed, so a draw made on the device would make the
same config and seed give other tables on a GPU (docs/simulation.md, "Same numbers on any device").

A stream may instead be counter-based (:meth:`Streams.counter`, :class:`decpriv.random.philox.PhiloxStream`):
drawn on the device itself, the same integers and uniforms there as on the CPU, its normals to the
last bit of the device's log and cos. The audit's trials draw from it (docs/speed.md).
"""

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import torch

from decpriv.random.philox import PhiloxStream


def derive_seed(root: int, name: str) -> int:
    """A 63-bit seed that depends only on the root seed and the stream's name."""
    digest = hashlib.sha256(f"{int(root)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class Streams(ABC):
    """Generators keyed by name, from whatever ``seed(name)`` the subclass defines."""

    @abstractmethod
    def seed(self, name: str) -> int:
        """The stream's 63-bit seed."""

    def numpy(self, name: str) -> np.random.Generator:
        return np.random.default_rng(self.seed(name))

    def torch(self, name: str) -> torch.Generator:
        """The stream as a CPU generator (draw from it with :func:`normal`, :func:`uniform` ...)."""
        return torch.Generator().manual_seed(self.seed(name))

    def counter(self, name: str, first_row: int = 0) -> PhiloxStream:
        """The stream as a counter-based generator drawn on any device, its rows numbered from
        ``first_row`` (a chunk of trials starting there draws what those trials draw in any chunk)."""
        return PhiloxStream(self.seed(name), first_row)


class Seeds(Streams):
    """Factory of independent, reproducible generators keyed by name."""

    def __init__(self, root: int):
        self.root = int(root)

    def seed(self, name: str) -> int:
        return derive_seed(self.root, name)


class ScopedSeeds(Streams):
    """The streams whose names start with ``prefix`` only: an attack gets ``attack.*``, never the streams
    of the defense's noise or of the data. It holds no root seed: ``source`` (a callable of the process
    that holds the root) answers each name. Pickled, it carries its prefix only; in the sealed attack
    process (:mod:`decpriv.seal.process`) the pipeline answers each name over the process's channel, so
    the root seed never enters the attack's process and the same names give the same numbers there."""

    def __init__(self, source: Callable[[str], int], prefix: str = "attack."):
        self._source, self.prefix = source, prefix

    def seed(self, name: str) -> int:
        if not str(name).startswith(self.prefix):
            raise PermissionError(f"stream {name!r} is outside {self.prefix!r}*")
        return int(self._source(name))

    def __reduce__(self):
        return ScopedSeeds, (served_stream, self.prefix)


def scoped(seeds: Seeds, prefix: str) -> Callable[[str], int]:
    """The pipeline's side of a :class:`ScopedSeeds`: the seed of a stream under ``prefix`` only (it
    refuses other names itself, as the sealed process's requests reach it unchecked)."""
    return ScopedSeeds(seeds.seed, prefix).seed


# set by the sealed attack process: asks the pipeline for a stream's seed; None in any other process
CHANNEL: Callable[[str], int] | None = None


def served_stream(name: str) -> int:
    if CHANNEL is None:
        raise PermissionError(f"stream {name!r}: no pipeline serves attack streams in this process")
    return CHANNEL(name)


Shape = int | tuple[int, ...] | torch.Size
Generator = torch.Generator | PhiloxStream


def _size(shape: Shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def normal(
    shape: Shape,
    generator: Generator,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Standard normal draws from the CPU ``generator``, moved to ``device``: the same numbers there as on
    the CPU. A :class:`PhiloxStream` draws on ``device`` itself."""
    if isinstance(generator, PhiloxStream):
        return generator.normal(_size(shape), device, dtype)
    return torch.randn(_size(shape), generator=generator, dtype=dtype).to(device)


def uniform(
    shape: Shape,
    generator: Generator,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Uniform draws on [0, 1) from the CPU ``generator``, moved to ``device`` (a :class:`PhiloxStream`
    draws on ``device``, exactly the CPU's numbers)."""
    if isinstance(generator, PhiloxStream):
        return generator.uniform(_size(shape), device, dtype)
    return torch.rand(_size(shape), generator=generator, dtype=dtype).to(device)


def integers(
    low: int,
    high: int,
    shape: Shape,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """Integers uniform on [low, high) from the CPU ``generator``, moved to ``device``."""
    return torch.randint(low, high, _size(shape), generator=generator, dtype=dtype).to(device)


def permutation(n: int, generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """A uniform permutation of range(n) from the CPU ``generator``, moved to ``device``."""
    return torch.randperm(n, generator=generator).to(device)
