"""Homomorphic encryption of FedAvg/FedSGD updates: CKKS (Cheon, Kim, Kim, Song, "Homomorphic Encryption
for Arithmetic of Approximate Numbers", ASIACRYPT 2017) through TenSEAL (Benaissa et al., "TenSEAL: A
Library for Encrypted Tensor Operations Using Homomorphic Encryption", ICLR 2021 DPML workshop), which
wraps Microsoft SEAL, the library the "Privacy in DML" slides name.

Key holders and server: the clients share one CKKS secret key (TenSEAL has no threshold decryption, so
no key committee); the server holds the public context only (encryption and evaluation keys, no secret
key). Each round every chosen client encrypts its weighted update (n_u / sum n) theta_u, packed
``slots`` = N / 2 values to a ciphertext (one batched CKKS tensor a client, one TenSEAL call), and sends
the serialized ciphertexts; the server deserializes them under its public context, adds them and sends
the serialized sum back; the key holders decrypt it: the new global model, exact up to CKKS's
approximation error (measured every round: about 2^(13 - scale_bits) a coordinate at N = 8192, 4e-8 at
scale_bits = 40, 0.05 at 20; a warning when it exceeds 1e-4). Every step is real: real keys,
real ciphertexts of the real updates, their real sizes and times.

The server receives the decrypted sum back. A CKKS decryption is approximate, m + e, and its exact value
shown to whoever holds the ciphertext reveals e, a linear equation in the secret key: Li and Micciancio's
passive key-recovery attack ("On the Security of Homomorphic Encryption on Approximate Numbers",
EUROCRYPT 2021; their IND-CPA^D setting). ``flood_bits`` adds noise of std 2^flood_bits times CKKS's
error to the released sum (noise flooding, the remedy they discuss and OpenFHE implements): it drowns e at
the cost of precision (flood_bits=30 at scale_bits=59 adds about 1.5e-5 a coordinate). Without it (the
default) the runs model the exposure; the key recovery itself is not simulated. The sum is not kept among
the clients: the attacks read the users' view of the global model from the server's transcript.

SEAL draws keys and encryption noise from the operating system (TenSEAL takes no seed): two runs of one
config repeat within the bound :meth:`Homomorphic.repeatable_within` records, which ``decpriv diff`` uses.
The flooding noise is drawn from the run's seeded stream ``defense.flood`` (the key holders' randomness,
which the simulated server never holds), so two flooded runs differ by CKKS's error alone.

What the adversary records (``adversary=server``): for each honest client only the fact that it sent a
ciphertext (``Recorder.mark_encrypted``; no plaintext, NaN values), and the decrypted aggregate
(``Transcript.aggregates``), which every client receives. A single shared key means any key holder can
decrypt any update it intercepts: if the adversary controls a client (``adversary.nodes``), it holds the
key and its record is every update in the clear.
"""

import time
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Built, Defense, sent_to_server
from decpriv.defenses.ckks import CkksParameters, check_flood, flood_std
from decpriv.errors import bad_value

if TYPE_CHECKING:
    from decpriv.adversary.recorder import Recorder

PROTOCOLS = ("fedavg", "fedsgd")
# summary keys that measure the noise, the serialized sizes (compressed: they vary by a few bytes) or the
# machine: two runs of one config never repeat them exactly
VARIES = (
    *(f"he_{step}_seconds_per_round" for step in ("encrypt", "aggregate", "decrypt")),
    *("he_max_abs_error", "he_mean_round_max_abs_error", "he_error_bound", "he_repeat_rtol"),
    *("he_bytes_per_update", "he_expansion_over_float32", "he_bytes_per_round", "he_sum_bytes"),
)
LARGE_ERROR = 1e-4  # a decryption error a coordinate above this is warned of (a learning step's scale)

Degree = Literal[2048, 4096, 8192, 16384, 32768]


class KeyHolders:
    """The clients' side: the shared secret key; encrypts updates and decrypts the server's sum."""

    def __init__(self, params: CkksParameters):
        import tenseal as ts

        self._ts, self.params = ts, params
        self._secret = ts.context(
            ts.SCHEME_TYPE.CKKS,
            poly_modulus_degree=params.poly_modulus_degree,
            coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes),
        )
        self._secret.global_scale = 2.0**params.scale_bits
        self.public_context = self._secret.serialize(save_secret_key=False)  # what the server receives

    def chunks(self, p: int) -> int:
        return -(-p // self.params.slots)

    def encrypt(self, update: np.ndarray) -> bytes:
        """One client's (p,) update packed into ceil(p / slots) ciphertexts (one batched tensor: slot s
        of ciphertext c holds coordinate c * slots + s), serialized as sent."""
        slots, chunks = self.params.slots, self.chunks(len(update))
        padded = np.zeros(slots * chunks)
        padded[: len(update)] = update
        packed = padded.reshape(chunks, slots).T
        # TenSEAL 0.3 batches a (slots, 1) tensor as its first value repeated: one ciphertext goes flat
        plain = self._ts.plain_tensor(packed[:, 0] if chunks == 1 else packed)
        return self._ts.ckks_tensor(self._secret, plain, batch=True).serialize()

    def decrypt(self, ciphertext: bytes, p: int) -> np.ndarray:
        tensor = self._ts.ckks_tensor_from(self._secret, ciphertext).decrypt()
        return np.asarray(tensor.tolist(), dtype=np.float64).T.reshape(-1)[:p]


class Server:
    """The aggregator's side: the public context only (no secret key), so it can add but not decrypt."""

    def __init__(self, public_context: bytes):
        import tenseal as ts

        self._ts = ts
        self._public = ts.context_from(public_context)

    def add(self, ciphertexts: list[bytes]) -> bytes:
        total = self._ts.ckks_tensor_from(self._public, ciphertexts[0])
        for blob in ciphertexts[1:]:
            total += self._ts.ckks_tensor_from(self._public, blob)
        return total.serialize()


@checked("defense")
class Homomorphic(Defense):
    name = "homomorphic"
    hides_updates = True

    def __init__(
        self,
        poly_modulus_degree: Degree = 8192,
        coeff_mod_bit_sizes: tuple[int, ...] = (60, 40, 40, 60),
        scale_bits: Annotated[int, Range(ge=20, le=59, what="the CKKS scale's bits", eg=40)] = 40,
        flood_bits: Annotated[int, Range(ge=1, le=40, what="the flooding noise's bits", eg=20)] | None = None,
    ):
        self.params = CkksParameters(poly_modulus_degree, tuple(coeff_mod_bit_sizes), scale_bits)
        # Li and Micciancio's passive key recovery reads the exact decryption: flooding drowns its error
        self.flood_std = None if flood_bits is None else flood_std(scale_bits, flood_bits)
        self.params.check()
        check_flood(scale_bits, flood_bits)
        self._cost = {"bytes_up": 0, "bytes_down": 0, "encrypt": 0.0, "aggregate": 0.0, "decrypt": 0.0}
        self._rounds, self._updates, self._p = 0, 0, 0
        self._errors: list[float] = []  # the released sum's, flooding included
        self._ckks_errors: list[float] = []  # the decryption's alone: what two runs of one config differ by
        self._flood: np.random.Generator | None = None
        self._key_leaked = False
        self._warned = False

    def bind(self, setup: Built) -> None:
        from decpriv.protocols.fedavg import client_nodes

        protocol = setup.protocol
        if protocol.name not in PROTOCOLS:
            raise bad_value(
                "defense",
                self.name,
                f"under {type(protocol).__name__} (the protocol chosen) every node combines the values it "
                "receives itself, so it "
                "would need the key to every message and encryption would hide nothing from it",
                "use protocol=fedavg or fedsgd, where a server adds ciphertexts it cannot decrypt",
            )
        self._keys = KeyHolders(self.params)
        self._flood = setup.seeds.numpy("defense.flood")
        self._server = Server(self._keys.public_context)
        self._p = setup.model.p
        nodes = np.asarray(setup.adversary.nodes, dtype=np.int64)
        self._attackers = torch.as_tensor(nodes, device=setup.device)
        # one shared key: a corrupt client hands it to the adversary, which then decrypts every update
        self._key_leaked = bool(np.isin(nodes, client_nodes(setup.network)).any())

    def federate(
        self,
        updates: torch.Tensor,
        weights: torch.Tensor,
        chosen: torch.Tensor,
        held: torch.Tensor,
        recorder: "Recorder",
        round_: int,
    ) -> torch.Tensor:
        order = torch.sort(chosen).values
        w = weights[order].to(torch.float64)
        contributions = (w[:, None] / w.sum() * updates[order].to(torch.float64)).cpu().numpy()
        self._check_range(contributions)
        clock = time.perf_counter()
        wire = [self._keys.encrypt(row) for row in contributions]  # each client encrypts its own update
        encrypted = time.perf_counter()
        summed = self._server.add(wire)
        added = time.perf_counter()
        decrypted = self._keys.decrypt(summed, self._p)
        aggregate = self._flooded(decrypted)
        cost = self._cost
        cost["encrypt"] += encrypted - clock
        cost["aggregate"] += added - encrypted
        cost["decrypt"] += time.perf_counter() - added
        cost["bytes_up"] += sum(len(blob) for blob in wire)
        cost["bytes_down"] += len(summed)
        self._errors.append(float(np.abs(aggregate - contributions.sum(0)).max()))
        self._ckks_errors.append(float(np.abs(decrypted - contributions.sum(0)).max()))
        if self._errors[-1] > LARGE_ERROR and not self._warned and self.flood_std is None:
            self._warned = True
            warnings.warn(
                f"homomorphic: CKKS decrypts the round-{round_} aggregate {self._errors[-1]:.2g} off a coordinate "
                f"(about 2^(13 - scale_bits) = {self.params.error_bound:.2g}); raise defense.scale_bits "
                "(40 gives about 4e-8)",
                stacklevel=2,
            )
        self._rounds += 1
        self._updates += len(wire)
        result = torch.as_tensor(aggregate, dtype=held.dtype, device=held.device)
        if recorder.enabled:
            self._record(updates, order, held, result, recorder, round_)
        return result

    def _flooded(self, decrypted: np.ndarray) -> np.ndarray:
        """The decrypted sum as the key holders release it: with ``flood_bits``, plus Gaussian noise of
        std 2^flood_bits times CKKS's error (noise flooding, OpenFHE's NOISE_FLOODING_DECRYPT), drawn from
        the key holders' seeded stream: the same in two runs of one config, unknown to the server."""
        if self.flood_std is None or self._flood is None:
            return decrypted
        return decrypted + self._flood.normal(0.0, self.flood_std, decrypted.shape)

    def _check_range(self, contributions: np.ndarray) -> None:
        peak = float(np.abs(contributions).sum(0).max()) if contributions.size else 0.0
        if not peak < self.params.limit:
            raise RuntimeError(
                f"homomorphic: an aggregate of magnitude {peak:.3g} exceeds CKKS's range {self.params.limit:.3g} "
                "(the model diverged, or lower defense.scale_bits)"
            )

    def _record(self, updates, order, held, aggregate, recorder: "Recorder", round_: int) -> None:
        """The server's view: ciphertexts of the honest clients (no plaintext), the decrypted aggregate;
        every update in the clear when the adversary controls a client (it holds the shared key)."""
        plain = sent_to_server(updates, order, held)
        hidden = torch.zeros(len(updates), dtype=torch.bool, device=updates.device)
        hidden[order] = True
        hidden[self._attackers] = False
        if self._key_leaked:
            hidden[:] = False
        recorder.record(round_, 0, torch.where(hidden[:, None], torch.nan, plain))
        recorder.mark_encrypted(hidden)
        recorder.record_hidden(aggregate[None], plain)

    def _error_bound(self) -> float:
        """A decrypted coordinate's CKKS error, per value: the larger of the run's measured largest and the
        analytic 2^(13 - scale_bits). Flooding is left out: two runs of one config draw the same."""
        return max(self._ckks_errors + [self.params.error_bound])

    def _repeat_rtol(self) -> float:
        """How far two runs of one config may drift apart, relative: each round's aggregate is off by at
        most the bound in each run, so the two global models differ by at most 2 x bound a coordinate a
        round, 2 R bound sqrt(p) in L2 after R rounds when training does not amplify a perturbation (a
        first-order estimate, not a proof: a deep model's chaos, or a prediction on a decision boundary,
        can exceed it, and diff then says so)."""
        return 2.0 * max(self._rounds, 1) * self._error_bound() * float(np.sqrt(max(self._p, 1)))

    def repeatable_within(self) -> dict[str, Any]:
        return {
            "name": "CKKS",
            "why": "CKKS (defense=homomorphic): SEAL draws its keys and encryption noise from the operating "
            "system, not from the run's seed",
            "error_per_coordinate": self._error_bound(),
            "rtol": self._repeat_rtol(),
            "rule": "2 x rounds x error_per_coordinate x sqrt(p): the two models' L2 distance when training "
            "does not amplify a perturbation",
            # measurements of the noise and of the machine themselves, never repeated exactly
            "varies": list(VARIES),
        }

    def summary(self) -> dict[str, Any]:
        cost, rounds = self._cost, max(self._rounds, 1)
        per_update = cost["bytes_up"] / max(self._updates, 1)
        params = self.params
        return {
            "he_scheme": "CKKS (TenSEAL / Microsoft SEAL)",
            "he_poly_modulus_degree": params.poly_modulus_degree,
            "he_coeff_mod_bit_sizes": "-".join(map(str, params.coeff_mod_bit_sizes)),
            "he_scale_bits": params.scale_bits,
            "he_security_bits": 128,
            "he_key": "one secret key shared by the clients",
            "he_adversary_holds_key": self._key_leaked,  # it controls a client: every update in the clear
            "he_ciphertexts_per_update": -(-self._p // params.slots),
            "he_bytes_per_update": per_update,
            "he_expansion_over_float32": per_update / (4 * self._p) if self._p else float("nan"),
            "he_bytes_per_round": cost["bytes_up"] / rounds,  # the clients' uploads, as sa_/ss_bytes count
            "he_sum_bytes": cost["bytes_down"] / rounds,  # the encrypted sum the server returns
            "he_encrypt_seconds_per_round": cost["encrypt"] / rounds,
            "he_aggregate_seconds_per_round": cost["aggregate"] / rounds,
            "he_decrypt_seconds_per_round": cost["decrypt"] / rounds,
            "he_max_abs_error": max(self._errors, default=float("nan")),
            "he_mean_round_max_abs_error": float(np.mean(self._errors)) if self._errors else float("nan"),
            "he_error_bound": self._error_bound(),
            # SEAL draws the encryption noise from the operating system: runs repeat within the bound
            "he_repeat_rtol": self._repeat_rtol(),
            "he_decryption": "flooded" if self.flood_std is not None else "exact, to the server (IND-CPA^D)",
            "he_flood_std": self.flood_std,
        }
