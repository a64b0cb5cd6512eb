"""Philox4x32-10, a counter-based generator in integer tensor ops: the same bits on any device.

Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011, Sec. 3.2 (the
Philox S-box: two 32 x 32 -> 64-bit multiplications a round, the key bumped by the Weyl constants) and
Table 2 (10 rounds, the multipliers and constants below). Every output word is a pure function of its
128-bit counter and 64-bit key, so a draw needs no state carried from one element to the next: it is
vectorised over any number of counters and gives the same integers on the CPU and on CUDA, since it
uses only exact integer operations (int64 tensors holding 32-bit words).

torch has no unsigned 64-bit product: each 32 x 32-bit product is taken in int64, whose wrap-around keeps
its 64 bits; shifts and masks read the two halves back (:func:`mulhilo`).
"""

import torch

MASK32 = 0xFFFFFFFF
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)  # Salmon et al., Table 2 (Philox4x32)
WEYL = (0x9E3779B9, 0xBB67AE85)  # the key schedule's increments: golden ratio and sqrt(3) - 1
ROUNDS = 10
CPU_SLICE = 8192  # counters a CPU pass takes at once: 64 KiB a word, in cache


def mulhilo(multiplier: int, word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit halves of ``multiplier * word``, both in [0, 2^32), for words in [0, 2^32).

    The product is below 2^64 but may pass 2^63: int64 then wraps it (two's complement, on the CPU and in
    CUDA alike), which keeps all 64 bits of the unsigned product; the arithmetic shift copies the sign
    into the upper bits and the mask drops them."""
    product = word * multiplier
    return (product >> 32) & MASK32, product & MASK32


def philox4x32(counter: torch.Tensor, key: tuple[int, int], rounds: int = ROUNDS) -> torch.Tensor:
    """Philox4x32-``rounds`` of every row of ``counter`` (..., 4) int64 (32-bit words) under ``key`` (two
    32-bit words): (..., 4) int64 words in [0, 2^32). Round r uses the key bumped r times (Random123's
    philox4x32_R).

    On the CPU the counters go through in slices of CPU_SLICE: the ten rounds' thirty-odd passes then
    stay in cache (about 5x faster on the 2-core machine than whole tensors; docs/speed.md)."""
    flat = counter.reshape(-1, 4)
    if flat.device.type != "cpu" or len(flat) <= CPU_SLICE:
        return torch.stack(philox_rounds(flat, key, rounds), dim=-1).reshape(counter.shape)
    out = torch.empty_like(flat)
    for begin in range(0, len(flat), CPU_SLICE):
        words = philox_rounds(flat[begin : begin + CPU_SLICE], key, rounds)
        torch.stack(words, dim=-1, out=out[begin : begin + CPU_SLICE])
    return out.reshape(counter.shape)


def philox_rounds(counter: torch.Tensor, key: tuple[int, int], rounds: int) -> tuple[torch.Tensor, ...]:
    """The four output words of the (N, 4) counters (Salmon et al., Sec. 3.2, Philox's S-box)."""
    c0, c1, c2, c3 = (counter[:, i] for i in range(4))
    k0, k1 = int(key[0]) & MASK32, int(key[1]) & MASK32
    for r in range(rounds):
        hi0, lo0 = mulhilo(MULTIPLIERS[0], c0)
        hi1, lo1 = mulhilo(MULTIPLIERS[1], c2)
        c0, c1, c2, c3 = (
            hi1.bitwise_xor_(c1).bitwise_xor_(k0),
            lo1,
            hi0.bitwise_xor_(c3).bitwise_xor_(k1),
            lo0,
        )
        if r + 1 < rounds:
            k0, k1 = (k0 + WEYL[0]) & MASK32, (k1 + WEYL[1]) & MASK32
    return c0, c1, c2, c3


class PhiloxStream:
    """A named stream (:meth:`decpriv.random.streams.Streams.counter`) drawn by Philox4x32-10 on the device that
    consumes it; :func:`decpriv.random.streams.normal` and :func:`decpriv.random.streams.uniform` accept it beside a CPU
    ``torch.Generator``.

    The counter of a draw's element is (row, draw, block): ``row`` the element's index along the draw's
    first dimension plus ``first_row`` (64 bits: words 0 and 1), ``draw`` how many draws the stream made
    before (word 2), ``block`` which four words of that row (word 3). A row's numbers therefore depend on
    its global index and the sequence of draws only: drawing trials 0-999 in one chunk or in two of 500
    (``first_row`` 0 and 500) gives every trial the same numbers. The key is the stream's 63-bit seed
    (:func:`decpriv.random.streams.derive_seed`), so streams stay independent by name.
    """

    def __init__(self, seed: int, first_row: int = 0):
        seed = int(seed)
        self.key = (seed & MASK32, (seed >> 32) & MASK32)
        self.first_row, self.draws = int(first_row), 0

    def words(self, rows: int, blocks: int, device: torch.device | str) -> torch.Tensor:
        """(rows, blocks, 4) int64 words of this stream's next draw."""
        if self.draws > MASK32 or blocks > MASK32 + 1:
            raise ValueError("a Philox stream draws at most 2^32 times, 2^34 words a row each time")
        row = torch.arange(self.first_row, self.first_row + rows, dtype=torch.int64, device=device)[:, None]
        counter = torch.empty(rows, blocks, 4, dtype=torch.int64, device=device)
        counter[..., 0], counter[..., 1], counter[..., 2] = row & MASK32, row >> 32, self.draws
        counter[..., 3] = torch.arange(blocks, dtype=torch.int64, device=device)
        self.draws += 1
        return philox4x32(counter, self.key)

    def uniform(self, shape: tuple[int, ...], device, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Uniforms on [0, 1): float64 from 53 bits of two words, float32 from 24 bits of one, each an
        integer times 2^-53 or 2^-24, exact in its dtype, so equal on every device."""
        dtype = dtype or torch.get_default_dtype()
        rows, columns = layout(shape)
        if dtype == torch.float64:
            return unit53(self.words(rows, -(-columns // 2), device), rows, columns).reshape(shape)
        if dtype != torch.float32:
            raise TypeError(f"Philox uniforms come as float32 or float64, not {dtype}")
        w = self.words(rows, -(-columns // 4), device).reshape(rows, -1)[:, :columns]
        return ((w >> 8).to(torch.float32) * 2.0**-24).reshape(shape)

    def normal(self, shape: tuple[int, ...], device, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Standard normals by Box and Muller (Ann. Math. Statist. 29, 1958): r = sqrt(-2 log(1 - u)),
        r cos(2 pi v) and r sin(2 pi v) from two 53-bit uniforms, in float64, then cast to ``dtype``.

        Not bit-exact across devices: the uniforms are, but log, cos and sin are the device's own
        (CUDA's and the CPU's libm differ in the last bit or two), so the normals agree to about 1e-16
        relative. What the audit counts does not see it: a trial's outcome is a threshold test on a
        continuous statistic, and a difference of 1e-16 flips it only for a statistic within that of the
        threshold, which happens with probability of order 1e-16 per trial.
        """
        dtype = dtype or torch.get_default_dtype()
        rows, columns = layout(shape)
        u = unit53(self.words(rows, -(-columns // 2), device), rows, 2 * -(-columns // 2))
        radius = torch.sqrt(-2.0 * torch.log1p(-u[:, 0::2]))  # 1 - u in (0, 1]: log is finite
        angle = (2.0 * torch.pi) * u[:, 1::2]
        z = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
        return z.reshape(rows, -1)[:, :columns].to(dtype).reshape(shape)


def layout(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, columns) of a draw: its first dimension are the rows (trials, nodes)."""
    shape = tuple(shape)
    if not shape:
        return 1, 1
    columns = 1
    for size in shape[1:]:
        columns *= int(size)
    return int(shape[0]), columns


def unit53(words: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """(rows, columns) float64 uniforms on [0, 1), each from two words: 27 + 26 bits."""
    pairs = words.reshape(rows, -1, 2)
    integer = ((pairs[..., 0] >> 5) << 26) | (pairs[..., 1] >> 6)  # < 2^53: exact in float64
    return (integer.to(torch.float64) * 2.0**-53)[:, :columns]
