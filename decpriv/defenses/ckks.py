"""CKKS's parameters as Microsoft SEAL takes them, checked without SEAL or torch: a setting SEAL would
refuse mid-run (its primes, its scale, its security bound) is refused before anything is built, each
with its own sentence (``decpriv run`` calls :func:`check_config` before torch loads).

SEAL (``CoeffModulus::Create``) finds, for each bit size b in ``coeff_mod_bit_sizes``, primes p = 1 mod
2N just below 2^b, searching down from 2^b - 2N + 1 in steps of 2N and stopping at 2^(b-1) ("failed to
find enough qualifying primes" when too few exist: small primes at a large N). The last prime is the
special key-switching prime; the others hold the data, and the CKKS encoder refuses a scale with
log2(scale) + 1 >= the data primes' product's bit count ("scale out of bounds"). The 128-bit security
bound caps the bits of all primes together (:data:`MAX_MODULUS_BITS_128`).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from decpriv.errors import bad_value

# Largest total coefficient modulus (bits) for 128-bit classical security with a ternary secret: the
# HomomorphicEncryption.org standard (Albrecht et al. 2018, Table 1), SEAL's CoeffModulus::MaxBitCount.
MAX_MODULUS_BITS_128 = {2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}
PRIME_BITS = (2, 60)  # SEAL's CoeffModulus::Create (SEAL_USER_MOD_BIT_COUNT_MIN/MAX); whether enough primes
# = 1 mod 2N exist at a size is checked apart, as SEAL finds them
SCALE_BITS = (20, 59)  # decpriv's own range of defense.scale_bits (Homomorphic's declaration)
WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)  # a deterministic Miller-Rabin below 2^64


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in WITNESSES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@cache
def seal_primes(degree: int, bits: int, count: int) -> tuple[int, ...]:
    """The ``count`` primes SEAL picks for ``bits`` at ring dimension ``degree`` (largest first; fewer
    when fewer exist: SEAL then refuses)."""
    step = 2 * degree
    value, floor, found = 2**bits - step + 1, 2 ** (bits - 1), []
    while len(found) < count and value > floor:
        if is_prime(value):
            found.append(value)
        value -= step
    return tuple(found)


@dataclass(frozen=True)
class CkksParameters:
    """CKKS's parameters: ring dimension N (N / 2 slots a ciphertext), the coefficient modulus's primes
    (bits; the last is SEAL's special key-switching prime) and the encoding scale 2^scale_bits."""

    poly_modulus_degree: int
    coeff_mod_bit_sizes: tuple[int, ...]
    scale_bits: int

    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2

    @property
    def limit(self) -> float:
        """Largest magnitude a decrypted value may have: scaled, it must stay below half the modulus the
        ciphertext lives in (every prime but the special one), with one bit of margin."""
        return float(2.0 ** (sum(self.coeff_mod_bit_sizes[:-1]) - self.scale_bits - 2))

    @property
    def error_bound(self) -> float:
        """The decryption error a coordinate to expect, measured: about 2^(13 - scale_bits) (N = 8192:
        the encoding's rounding and the fresh encryption noise, summed over the ring, over the scale)."""
        return 2.0 ** (13 - self.scale_bits)

    def check(self) -> None:
        """Refuse parameters below 128-bit security or that SEAL rejects, each in its own sentence."""
        _check_shape(self.poly_modulus_degree, self.coeff_mod_bit_sizes, self.scale_bits)
        _check_primes(self.poly_modulus_degree, self.coeff_mod_bit_sizes, self.scale_bits)
        _check_scale(self.poly_modulus_degree, self.coeff_mod_bit_sizes, self.scale_bits)


KEY = "defense.coeff_mod_bit_sizes"


def fits(n: int, bits: Sequence[int], scale_bits: int) -> bool:
    """Whether SEAL takes these parameters: the checks below, without their sentences."""
    low, high = PRIME_BITS
    if len(bits) < 2 or not all(low <= b <= high for b in bits) or sum(bits) > MAX_MODULUS_BITS_128[n]:
        return False
    if any(len(seal_primes(n, size, list(bits).count(size))) < list(bits).count(size) for size in set(bits)):
        return False
    return scale_bits + 1 < _data_modulus(n, bits).bit_length()


def _data_modulus(n: int, bits: Sequence[int]) -> int:
    """The data primes' product (every prime but the last, the special one), as SEAL builds it."""
    data = 1
    for size in sorted(set(bits[:-1])):
        for prime in seal_primes(n, size, list(bits[:-1]).count(size)):
            data *= prime
    return data


def _fitting(n: int, scale_bits: int) -> tuple[int, ...] | None:
    """The default's shape where it fits, else the fewest bits: one data prime, one special."""
    shapes = [(60, 40, 40, 60), (60, 40, 60), (60, 60)]
    shapes += [(data, special) for data in range(scale_bits + 2, 61) for special in range(60, 1, -1)]
    return next((bits for bits in shapes if fits(n, bits, scale_bits)), None)


@cache
def example(n: int, scale_bits: int) -> str:
    """A setting SEAL takes at ring dimension ``n``, within decpriv's ranges, for a refusal's fix, as typed:
    primes at this scale, else the largest scale that has some, else the default ring dimension."""
    low, high = SCALE_BITS
    for scale in range(min(max(scale_bits, low), high), low - 1, -1):
        bits = _fitting(n, scale)
        if bits is not None:
            primes = f"{KEY}=[{','.join(map(str, bits))}]"
            return primes if scale == scale_bits else f"defense.scale_bits={scale} {primes}"
    return "defense.poly_modulus_degree=8192"


def _check_shape(n: int, bits: Sequence[Any], scale_bits: int = 40) -> None:
    if len(bits) < 2:
        raise bad_value(
            KEY,
            list(bits),
            "needs two or more primes: the last is SEAL's special prime for key switching, the others "
            "hold the data",
            f"use e.g. {example(n, scale_bits)}",
        )
    wrong = next((b for b in bits if not isinstance(b, int) or isinstance(b, bool)), None)
    if wrong is not None:
        raise bad_value(
            KEY,
            list(bits),
            f"lists {wrong!r}, and each entry is a prime's bit count",
            f"use e.g. {example(n, scale_bits)}",
        )
    low, high = PRIME_BITS
    outside = next((b for b in bits if not low <= b <= high), None)
    if outside is not None:
        raise bad_value(
            KEY,
            list(bits),
            f"lists a {outside}-bit prime, and SEAL takes {low} to {high} bits a prime (SEAL: bit_sizes is "
            "invalid)",
            f"use e.g. {example(n, scale_bits)}",
        )
    top = MAX_MODULUS_BITS_128[n]
    if sum(bits) > top:
        raise bad_value(
            KEY,
            list(bits),
            f"sums to {sum(bits)} bits, and 128-bit security at N={n} allows at most {top}",
            f"drop or shrink primes (e.g. {example(n, scale_bits)}), or raise defense.poly_modulus_degree",
        )


def _check_primes(n: int, bits: Sequence[int], scale_bits: int = 40) -> None:
    for size in sorted(set(bits)):
        wanted = list(bits).count(size)
        found = len(seal_primes(n, size, wanted))
        if found < wanted:
            raise bad_value(
                KEY,
                list(bits),
                f"asks for {wanted} prime{'' if wanted == 1 else 's'} of {size} bits at N={n}, and only {found} such "
                f"prime{'' if found == 1 else 's'} (= 1 mod 2N) exist (SEAL: failed to find enough qualifying primes)",
                f"use fewer or larger primes (e.g. {example(n, scale_bits)}), or a smaller "
                "defense.poly_modulus_degree",
            )


def _check_scale(n: int, bits: Sequence[int], scale_bits: int) -> None:
    data = _data_modulus(n, bits)
    if scale_bits + 1 >= data.bit_length():
        most = data.bit_length() - 2
        lower = f"defense.scale_bits <= {most}, or " if most >= SCALE_BITS[0] else ""
        raise bad_value(
            "defense.scale_bits",
            scale_bits,
            f"the scale 2^{scale_bits} must stay below the data primes' modulus with a bit to spare, and "
            f"{list(bits[:-1])} at N={n} make a {data.bit_length()}-bit one (SEAL: scale out of bounds)",
            f"use {lower}larger data primes (e.g. {example(n, scale_bits)})",
        )


def flood_std(scale_bits: int, flood_bits: int) -> float:
    """The flooding noise's std a coordinate: 2^flood_bits times CKKS's error 2^(13 - scale_bits)."""
    return float(2.0 ** (flood_bits + 13 - scale_bits))


def check_flood(scale_bits: int, flood_bits: int | None) -> None:
    """Flooding noise of std 1 or more a coordinate is as large as the weights it is added to: the released
    model is noise, and training only diverges ("lower protocol.lr" would be the wrong fix)."""
    if flood_bits is None or flood_std(scale_bits, flood_bits) < 1:
        return
    most = scale_bits - 14  # the largest flood_bits whose std, 2^(flood_bits + 13 - scale_bits), is below 1
    fix = [f"defense.flood_bits={most}" if most >= 1 else ""]
    fix += [f"defense.scale_bits={flood_bits + 14}" if flood_bits + 14 <= SCALE_BITS[1] else ""]
    raise bad_value(
        "defense.flood_bits",
        flood_bits,
        f"at defense.scale_bits={scale_bits} it adds noise of std 2^{flood_bits + 13 - scale_bits} = "
        f"{flood_std(scale_bits, flood_bits):g} a coordinate to the released model, as large as its weights",
        f"use {' or '.join(f for f in fix if f)} (noise std 2^(flood_bits + 13 - scale_bits), below 1)",
    )


def check_config(node: Any) -> None:
    """The defense's config node checked before anything is built (torch not loaded)."""
    get = node.get
    n = get("poly_modulus_degree", 8192)
    bits = get("coeff_mod_bit_sizes", (60, 40, 40, 60))
    scale = get("scale_bits", 40)
    if n not in MAX_MODULUS_BITS_128 or not isinstance(scale, int) or not isinstance(bits, Sequence | list):
        return  # refused by the keys' own declarations, in their words
    CkksParameters(n, tuple(bits), scale).check()
    flood = get("flood_bits")
    check_flood(scale, flood if isinstance(flood, int) and not isinstance(flood, bool) else None)
