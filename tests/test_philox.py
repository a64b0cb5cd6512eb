"""Philox4x32-10 against Random123's known answers and a Python-integer reference; its uniforms exact; the
DP-SGD audit's trials drawn from it the same in any chunking (what lets them run on a GPU with the CPU's
outcomes: docs/speed.md)."""

import numpy as np
import pytest
import torch

from decpriv.attacks.audit.likelihood import heldout_counts
from decpriv.attacks.audit.subsampled import SampledTrials, canary_draw, learn_step_test
from decpriv.defenses.dp import DPSGD
from decpriv.random import streams as rng
from decpriv.random.philox import CPU_SLICE, MASK32, MULTIPLIERS, ROUNDS, WEYL, PhiloxStream, philox4x32
from decpriv.random.streams import Seeds

# Random123's tests/kat_vectors (github.com/DEShawResearch/random123), its three "philox4x32 10" lines:
# counter (4 words), key (2 words), expected output (4 words)
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def reference(counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int = ROUNDS) -> tuple:
    """Philox4x32 of one counter in Python integers (unbounded: no splitting), to check the tensor path."""
    c, k = list(counter), list(key)
    for r in range(rounds):
        p0, p1 = MULTIPLIERS[0] * c[0], MULTIPLIERS[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK32, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK32]
        if r + 1 < rounds:
            k = [(k[0] + WEYL[0]) & MASK32, (k[1] + WEYL[1]) & MASK32]
    return tuple(c)


@pytest.mark.parametrize(("counter", "key", "expected"), KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(counter, key, expected):
    assert tuple(philox4x32(torch.tensor(counter), key).tolist()) == expected
    assert reference(counter, key) == expected


def test_tensor_philox_equals_the_python_integer_reference_across_cpu_slices():
    gen = np.random.default_rng(0)
    counters = gen.integers(0, 2**32, size=(CPU_SLICE + 37, 4), dtype=np.uint64).astype(np.int64)
    key = (0x89ABCDEF, 0xFEDCBA98)
    words = philox4x32(torch.from_numpy(counters), key)
    assert words.shape == (CPU_SLICE + 37, 4) and int(words.min()) >= 0 and int(words.max()) <= MASK32
    for i in (0, 1, CPU_SLICE - 1, CPU_SLICE, CPU_SLICE + 36):  # both sides of a slice's edge
        assert tuple(words[i].tolist()) == reference(tuple(int(c) for c in counters[i]), key)


def test_a_streams_counters_are_row_draw_and_block():
    stream = PhiloxStream(0x0123456789ABCDEF, first_row=2**32 + 5)
    stream.words(1, 1, "cpu")  # draw 0
    words = stream.words(2, 3, "cpu")  # draw 1
    key = (0x89ABCDEF, 0x01234567)
    assert tuple(words[1, 2].tolist()) == reference((6, 1, 1, 2), key)  # row 2^32 + 6: words (6, 1)


def test_uniforms_are_exact_multiples_of_their_dtypes_unit():
    u64 = rng.uniform((1000, 7), PhiloxStream(3), dtype=torch.float64)
    u32 = rng.uniform((1000, 7), PhiloxStream(3), dtype=torch.float32)
    assert u64.dtype == torch.float64 and u32.dtype == torch.float32
    for u, bits in ((u64, 53), (u32, 24)):
        scaled = u.double() * 2.0**bits
        assert torch.equal(scaled, scaled.floor()) and float(u.min()) >= 0 and float(u.max()) < 1
    assert abs(float(u64.mean()) - 0.5) < 0.02 and abs(float(u32.mean()) - 0.5) < 0.02


def test_normals_are_standard():
    z = rng.normal((200000,), PhiloxStream(11), dtype=torch.float64)
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
    assert abs(float((z**4).mean()) - 3) < 0.05  # the tails of a normal, not of a uniform's sum


def dpsgd_trials(sampler: str) -> SampledTrials:
    defense = DPSGD(clip=1.0, sigma=1.0, sampler=sampler)
    defense.expected_batch = 4
    return SampledTrials(defense, steps=3, size=24, batch=4)


@pytest.mark.parametrize("sampler", ["poisson", "fixed"])
def test_audit_trials_are_the_same_in_any_chunking(sampler):
    """The trials 0-599 drawn at once, and in chunks of 200 and 400 drawn in reverse order: every trial's
    sign and updates are identical bits."""
    draw = canary_draw(dpsgd_trials(sampler), Seeds(5))
    whole, signs = draw("eval.0", 600, 0)
    later, later_signs = draw("eval.1", 400, 200)
    first, first_signs = draw("eval.0", 200, 0)
    assert torch.equal(torch.cat([first, later], dim=1), whole)
    assert torch.equal(torch.cat([first_signs, later_signs], dim=1), signs)
    assert float(signs.sum()) == 0 and float(first_signs.sum()) == 0  # balanced in every chunk
    fit, _ = draw("fit", 600, 0)
    assert not torch.equal(fit, whole)  # the fit trials are other trials


def test_the_canary_moves_the_audited_updates():
    """The canary's mean shift of the audited updates is its rate 4/24 x C / expected batch 4 = 1/24:
    over seeds 0-11 one seed's 2000 trials spread 0.0067 (std) around it, a mean of four seeds' 0.0034,
    the tolerance; seeds 0-3 give 0.0437. A canary at 0.8x or 1.2x its rate (0.0083 off) fails."""
    shifts = []
    for seed in range(4):
        updates, signs = canary_draw(dpsgd_trials("poisson"), Seeds(seed))("fit", 2000, 0)
        present = signs[0] > 0
        shifts.append(float(updates[:, present].mean() - updates[:, ~present].mean()))
    assert np.mean(shifts) == pytest.approx(1.0 / 24, abs=0.0034)
    statistic = learn_step_test(updates, signs[0])
    t = statistic(updates)[0]
    assert float(t[present].mean()) > float(t[~present].mean())


@pytest.mark.slow
def test_audit_counts_do_not_see_normals_a_few_ulp_off(monkeypatch):
    """What CUDA's log and cos did on an H100 (16% of float64 normals 1-3 ulp off the CPU's; docs/speed.md),
    emulated on the CPU: every count equal, thresholds and the KS distance within 1e-12."""
    exact = PhiloxStream.normal

    def nudged(self, shape, device, dtype=None):
        z = exact(self, shape, device, dtype)
        pick = torch.rand(z.shape, generator=torch.Generator().manual_seed(self.draws)) < 0.16
        up = torch.full_like(z, np.inf)
        return torch.where(pick, torch.nextafter(torch.nextafter(z, up), up), z)

    counted = []
    for normal in (exact, nudged):
        monkeypatch.setattr(PhiloxStream, "normal", normal)
        draw = canary_draw(dpsgd_trials("poisson"), Seeds(2))
        counted.append(heldout_counts(draw, 4000, 8000, 4000, 0.0125, 1e-5, 1, learn_step_test))
    a, b = counted
    assert np.array_equal(a.counts, b.counts) and a.counts[0, 0].sum() > 0
    assert np.allclose(a.thresholds, b.thresholds, rtol=1e-12, atol=0)  # gpu_check holds float64 to 1e-9
    assert np.allclose(a.ks, b.ks, rtol=0, atol=1e-12)


def reference_words(seed: int, row: int, draw: int, count: int) -> list[int]:
    """The first ``count`` words of a stream's row ``row`` in its draw ``draw``, block after block, each
    block Philox4x32-10 of the counter (row's low word, its high word, draw, block) under the seed's key."""
    key = (seed & MASK32, (seed >> 32) & MASK32)
    words = []
    for block in range(-(-count // 4)):
        words += reference((row & MASK32, row >> 32, draw, block), key)
    return words[:count]


def reference_unit53(seed: int, row: int, draw: int, count: int) -> list[float]:
    """53-bit uniforms written out: the top 27 bits of one word and the top 26 of the next, over 2^53."""
    w = reference_words(seed, row, draw, 2 * count)
    return [((w[2 * j] >> 5) * 2**26 + (w[2 * j + 1] >> 6)) / 2**53 for j in range(count)]


SEED, FIRST_ROW = 0x0123456789ABCDEF, 2**32 - 2  # rows on both sides of the counter's word boundary


def test_float64_uniforms_are_53_bit_known_answers():
    """Every float64 uniform equals the reference's, exactly: a uniform made from fewer bits (32) fails."""
    stream = PhiloxStream(SEED, first_row=FIRST_ROW)
    stream.words(1, 1, "cpu")  # the stream's draw 0: the uniforms below are its draw 1
    u = rng.uniform((4, 3), stream, dtype=torch.float64)
    expected = [reference_unit53(SEED, FIRST_ROW + r, 1, 3) for r in range(4)]
    assert u.tolist() == expected
    low_bits = [(round(x * 2**53) & 0x1FFFFF) for row in expected for x in row]
    assert any(low_bits)  # the known answers use the bits below the top 32


def test_float32_uniforms_are_24_bit_known_answers():
    u = rng.uniform((3, 5), PhiloxStream(SEED, first_row=FIRST_ROW), dtype=torch.float32)
    expected = [[w >> 8 for w in reference_words(SEED, FIRST_ROW + r, 0, 5)] for r in range(3)]
    assert (u.double() * 2**24).tolist() == [[float(x) for x in row] for row in expected]


def test_normals_are_box_muller_of_the_known_uniforms():
    """Box and Muller in Python floats from the reference's 53-bit uniforms: radius from the even ones,
    angle from the odd, cosine then sine; within 4 ulp (the libm's last bits, not the uniforms')."""
    import math

    z = rng.normal((3, 5), PhiloxStream(SEED, first_row=FIRST_ROW), dtype=torch.float64)
    for r in range(3):
        u = reference_unit53(SEED, FIRST_ROW + r, 0, 6)
        expected = []
        for a, b in zip(u[0::2], u[1::2], strict=True):
            radius = math.sqrt(-2.0 * math.log1p(-a))
            expected += [radius * math.cos(2 * math.pi * b), radius * math.sin(2 * math.pi * b)]
        for got, want in zip(z[r].tolist(), expected[:5], strict=False):
            assert abs(got - want) <= 4 * math.ulp(want)
