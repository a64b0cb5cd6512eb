"""The sealed attack process: an attack's code runs where the truth does not exist.

For each run (and for the precheck's ``prepare``) the pipeline (:mod:`decpriv.experiment`) has the zygote
(:mod:`decpriv.seal.zygote`, a clean interpreter started once) fork a session, and hands it over a socket,
pickled: the attack as it was built from its config (before any of its methods ran), then the
:class:`~decpriv.adversary.view.AttackContext`, the per-round observations of an active behaviour and the
:class:`~decpriv.adversary.view.View`. The child gets no root seed (its :class:`~decpriv.random.streams.ScopedSeeds`
asks the pipeline for each ``attack.*`` stream), no config, no run folder, no command line of ours and an
environment reduced to :data:`decpriv.seal.zygote.KEPT_ENV`; the simulation, the data set and
:class:`~decpriv.seal.truth.Truth` live in the pipeline's process only. What comes back is data, never code:
the child answers in primitives and the pipeline builds plain values from them (:mod:`decpriv.seal.plain`),
warnings and errors as built-in types. A declared oracle (``attack.oracle=true``) is the one way the
truth crosses, put in the View by the pipeline itself. Under the namespace seal the child also sees no
other process and no run folder, and its whole tree ends with the session (:mod:`decpriv.seal.zygote`).

What it does not close (docs/ARCHITECTURE.md, "The seal"): the root seed, which the attacker's own data
and its stream seeds fingerprint; code the pipeline itself runs (the attack module's import, ``evaluate``);
under the process seal, what root or the same user can read of another process. Linux and macOS only
(fork, file descriptors passed over Unix sockets; namespaces on Linux).
"""

import builtins
import gc
import os
import pickle
import shutil
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from decpriv.adversary.behaviour import Behaviour, Forgery
from decpriv.device import set_attack_device
from decpriv.errors import ConfigError
from decpriv.random import streams as rng
from decpriv.seal import plain, sandbox, zygote
from decpriv.seal.primitives import TooLarge

THEIRS = "decpriv.seal.process: the plan the sealed process's prepare returned"
PROCESS_SEAL = (
    "the attack runs under the process seal ({why}): the truth stays out of its process, but it can read "
    "and write what this user can, reach the network and this terminal, and see other processes "
    "(docs/ARCHITECTURE.md, 'The seal')"
)
_said_process_seal: list[bool] = []  # once a process
PLAIN = "numbers, strings, lists, tuples, dicts, numpy arrays, torch tensors, pandas frames"


class NotPlainResult(RuntimeError):
    """What the sealed process sent back is not plain data: the run fails, naming the attack and the type."""

    def __init__(self, attack: str, method: str, kind: str):
        super().__init__(
            f"attack={attack}: its {method} returned a {kind}, which cannot leave the sealed attack process; "
            f"return plain data ({PLAIN}) or decpriv's own result types"
        )


class SealedBehaviour(Behaviour):
    """The pipeline's stand-in for an active attack's behaviour: each round's observations go to the
    sealed process, which forges; the protocol (and its ``sim``) stays on this side."""

    def __init__(self, sealed: "Sealed"):
        self._sealed = sealed

    def forge(
        self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor
    ) -> Forgery | None:
        forgery = self._sealed.call("forge", round_, senders, observed.cpu(), own.cpu())
        return self._sealed.expect(forgery, "behaviour's forge", Forgery, type(None))


class Sealed:
    """The pipeline's handle on one run's sealed attack process: the :class:`~decpriv.attacks.base.Attack`
    methods that see only the adversary's knowledge (``prepare``, ``kept_links``, ``behaviour``, ``run``),
    each run over there. ``streams`` answers the process's ``attack.*`` stream names. What comes back is
    read as plain data (:mod:`decpriv.seal.plain`); anything else fails the run, naming the attack and the type."""

    def __init__(
        self,
        attack: bytes,
        name: str,
        module: str,
        streams: Callable[[str], int],
        limits: sandbox.Limits | None = None,
        device: str = "cpu",
    ):
        self.name, self._streams, self._plan = name, streams, THEIRS  # no plan until prepare ran there
        self.limits = limits or sandbox.Limits()
        gpu = torch.device(device).type == "cuda"
        processes = zygote.warm(module, gpu)
        self.seal = processes.seal  # bubblewrap | process, for run.json
        if self.seal == "process" and not _said_process_seal:
            _said_process_seal.append(True)
            warnings.warn(PROCESS_SEAL.format(why=zygote.why_process()), stacklevel=2)
        self._output = processes.output
        self._output.start(self.limits.output_kib)
        self._waited = 0.0  # seconds the run has waited on the process (sandbox.wall_seconds)
        self._socket, self._lifeline = processes.session(module, self.limits)
        self._said = b""  # what the warden said on the lifeline (how the child ended)
        self._file = self._socket.makefile("rwb")
        self._to_cpu = False  # GPU tensors cross as the CPU's where the process cannot use the GPU
        self._send((attack, device))
        self.device = self._usable(device)  # where the attack computes, for run.json and summary.csv
        self._to_cpu = gpu and self.device == "cpu"

    def _usable(self, device: str) -> str:
        """The device the sealed process can compute on (it tried the run's); where it cannot use the
        run's GPU, the attack computes on the CPU, said in a warning, and its inputs cross as CPU tensors."""
        answer = self._receive("start")
        if answer[0] != "device" or len(answer) != 4:
            raise NotPlainResult(self.name, "start", "message of another form")
        if answer[1] != device:
            warnings.warn(
                f"attack={self.name}: its sealed process cannot use {device} ({answer[2]}); the attack "
                "computes on the CPU (attack_device=cpu in run.json and summary.csv)",
                stacklevel=3,
            )
        return answer[1]

    def __enter__(self) -> "Sealed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, message: Any) -> None:
        kind = ToCPU if self._to_cpu else pickle.Pickler
        kind(self._file, pickle.HIGHEST_PROTOCOL).dump(message)
        self._file.flush()

    def _receive(self, method: str) -> tuple:
        # the wall clock counts the attack's calls, not its process's start (the zygote may still import)
        wall = self.limits.wall_seconds if method != "start" else 0
        started = time.monotonic()
        self._socket.settimeout(max(wall - self._waited, 1e-3) if wall else None)
        try:
            message = plain.load(self._file, self.limits.answer_mib * sandbox.MIB)
        except TimeoutError:
            self.close()
            raise RuntimeError(
                f"attack={self.name}: the run waited on its sealed attack process past "
                f"sandbox.wall_seconds={wall:g} (in attack.{method}); raise sandbox.wall_seconds"
            ) from None
        except TooLarge as error:
            self.close()
            raise RuntimeError(
                f"attack={self.name}: its answer to attack.{method} passed sandbox.answer_mib="
                f"{self.limits.answer_mib} ({error.size} bytes, refused as it arrived); raise sandbox.answer_mib"
            ) from None
        except EOFError:
            raise RuntimeError(
                f"attack={self.name}: the sealed attack process ended during attack.{method}: "
                + zygote.ending(self._heard(), self.limits)
            ) from None
        except plain.NotPlain as error:
            raise NotPlainResult(self.name, method, error.kind) from None
        finally:
            self._waited += (time.monotonic() - started) if wall else 0
        if not well_formed(message):
            raise NotPlainResult(self.name, method, f"message {plain.type_name(message)} of another form")
        return message

    def call(self, method: str, *args: Any) -> Any:
        """Run ``method`` over there; serve its stream requests; re-raise its warnings and its error here,
        as built-in types."""
        try:
            self._send(("call", method, args))
        except OSError:
            raise RuntimeError(
                f"attack={self.name}: the sealed attack process ended before attack.{method}: "
                + zygote.ending(self._heard(), self.limits)
            ) from None
        while True:
            message = self._receive(method)
            if message[0] == "stream":
                try:
                    self._send(("seed", self._streams(message[1])))
                except PermissionError as error:
                    self._send(("refused", str(error)))
                continue
            for category, text in message[-1]:
                kind = builtin(category, Warning, UserWarning)
                warnings.warn(
                    text if kind.__name__ == category else f"{category}: {text}", kind, stacklevel=3
                )
            if message[0] == "done":
                return message[1]
            if message[0] == "notplain":
                raise NotPlainResult(self.name, method, message[1])
            raise rebuilt_error(*message[1:4], where=f"attack={self.name}, in attack.{method}")

    def expect(self, value: Any, method: str, *kinds: type) -> Any:
        """``value`` when it is of one of ``kinds``, else the run fails naming the attack and its type."""
        if not isinstance(value, kinds):
            raise NotPlainResult(self.name, method, plain.type_name(value))
        return value

    def prepare(self, context) -> Any:
        """The plan, as plain data; a plan that is not (an active attack's forger) stays over there, and
        this side holds a :class:`KeptThere` in its place."""
        answer = self.expect(self.call("prepare", context), "prepare", tuple)
        if len(answer) != 2 or answer[0] not in ("plan", "kept"):
            raise NotPlainResult(self.name, "prepare", "tuple of another form")
        self._plan = KeptThere(self.name, str(answer[1])) if answer[0] == "kept" else answer[1]
        return self._plan

    def _theirs(self, plan: Any) -> Any:
        """The plan as the process should read it: its own object when it is the one its prepare returned
        (an active attack's plan is its forger, which keeps state over the run), else the pipeline's."""
        return THEIRS if plan is self._plan else plan

    def kept_links(self, context, plan: Any, observed: np.ndarray) -> np.ndarray:
        kept = self.call("kept_links", context, self._theirs(plan), observed)
        return self.expect(kept, "kept_links", np.ndarray)

    def behaviour(self, context, plan: Any) -> Behaviour | None:
        active = self.expect(self.call("behaviour", context, self._theirs(plan)), "behaviour", bool)
        return SealedBehaviour(self) if active else None

    def run(self, view) -> Any:
        return self.call("run", replace(view, plan=self._theirs(view.plan)))

    def _heard(self, wait: float = 2.0) -> bytes:
        """What the warden said on the lifeline so far (how the child ended; ``\\0`` once its tree ended)."""
        with suppress(OSError):
            self._lifeline.settimeout(wait)
            while b"\0" not in self._said:
                more = self._lifeline.recv(256)
                if not more:
                    break
                self._said += more
                if b"\n" in self._said and wait < ENDING:
                    break
        return self._said

    def close(self) -> None:
        """End the session: the process and everything it started end before this returns."""
        with suppress(OSError):
            self._file.close()
        self._socket.close()
        if self._lifeline.fileno() < 0:
            return
        with suppress(OSError):
            self._lifeline.shutdown(socket.SHUT_WR)
        self._heard(ENDING)  # the warden answers once the tree has ended (or it is gone itself)
        self._lifeline.close()
        note = self._output.note()
        if note:
            sys.stdout.write(note)
            sys.stdout.flush()


class ToCPU(pickle.Pickler):
    """Pickles a GPU tensor as the CPU's: for a sealed process that cannot use the run's GPU."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


# what the sealed process may say: (kind, its fields as types, then the warnings it raised)
ANSWERS: dict[str, tuple[type, ...]] = {
    "device": (str, str),
    "stream": (str,),
    "done": (object,),
    "notplain": (str,),
    "error": (str, str, str),
}


def well_formed(message: Any) -> bool:
    """An answer of a known kind, its fields of their types, ending with (category, text) warnings."""
    if type(message) is not tuple or not message or message[0] not in ANSWERS:
        return False
    fields = ANSWERS[message[0]]
    if message[0] == "stream":
        return len(message) == 2 and type(message[1]) is str
    if len(message) != len(fields) + 2 or not all(
        isinstance(v, t) for v, t in zip(message[1:], fields, strict=False)
    ):
        return False
    kept = message[-1]
    return type(kept) is list and all(
        type(w) is tuple and len(w) == 2 and all(type(p) is str for p in w) for w in kept
    )


ENDING = 10.0  # seconds to wait for the warden to end a session's processes


@dataclass(frozen=True)
class KeptThere:
    """The pipeline's stand-in for a plan that is not plain data: it stays in the sealed process, which
    reads its own; ``evaluate`` cannot read it."""

    attack: str
    kind: str

    def __getattr__(self, key: str) -> Any:
        raise AttributeError(
            f"attack={self.attack}: its plan (a {self.kind}) stays in the sealed attack process, so "
            f"evaluate cannot read view.plan.{key}; make the plan plain data ({PLAIN})"
        )


def builtin(name: Any, base: type, fallback: type) -> type:
    """The built-in class ``name`` when it is a subclass of ``base``, else ``fallback``: a class of the
    attack's never crosses (its constructor would run here)."""
    kind = vars(builtins).get(name) if type(name) is str else None
    return kind if isinstance(kind, type) and issubclass(kind, base) else fallback


def rebuilt_error(name: str, text: str, trace: str, where: str = "") -> Exception:
    """The sealed process's error as a built-in one (a refusal as decpriv's ConfigError: exit status 2),
    its traceback as a note. Any other error's text starts with ``where`` (the attack and its method), so
    the one line a failed run prints says the attack failed, not the pipeline; a refusal names its key."""
    kind = ConfigError if name == "ConfigError" else builtin(name, Exception, RuntimeError)
    if where and kind is not ConfigError:
        text = f"{where}: {text}"
    try:
        error = kind(text) if kind.__name__ == name else RuntimeError(f"{name}: {text}")
    except Exception:  # a built-in that wants other arguments (UnicodeDecodeError ...)
        error = RuntimeError(f"{name}: {text}")
    error.add_note(f"in the sealed attack process:\n{trace}")
    return error


def _is_theirs(plan: Any) -> bool:
    return isinstance(plan, str) and plan == THEIRS


@dataclass(frozen=True)
class Unloaded:
    """The sealed process's attack when it could not be unpickled there."""

    why: str


def _serve(attack: Any, state: dict[str, Any], method: str, args: tuple) -> Any:
    if isinstance(attack, Unloaded):
        raise RuntimeError(
            f"the attack could not be rebuilt in its sealed process ({attack.why}): its module must import "
            "there as it does here (the same PYTHONPATH, no state outside the attack object)"
        )
    if method == "run" and _is_theirs(args[0].plan):
        args = (replace(args[0], plan=state["plan"]),)
    elif method in ("kept_links", "behaviour") and _is_theirs(args[1]):
        args = (args[0], state["plan"], *args[2:])
    if method == "prepare":
        state["plan"] = attack.prepare(*args)
        try:
            plain.flatten(state["plan"])
        except plain.NotPlain as error:
            return ("kept", error.kind)
        return ("plan", state["plan"])
    if method == "behaviour":
        state["behaviour"] = attack.behaviour(*args)
        return state["behaviour"] is not None
    if method == "forge":
        return state["behaviour"].forge(*args)
    if method not in ("kept_links", "run"):
        raise ValueError(f"the sealed attack process serves no {method!r}")
    return getattr(attack, method)(*args)


def _answer(reply, attack: Any, state: dict[str, Any], method: str, args: tuple) -> None:
    """Serve one call; send back its result, or its error as (type name, text, traceback), with the
    warnings it raised as (category name, text): data only (:mod:`decpriv.seal.plain`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            message: tuple = ("done", _serve(attack, state, method, args))
        except Exception as error:
            said = " ".join(part for part in (_text(error), _hint(error).strip()) if part)
            message = ("error", type(error).__name__, said, traceback.format_exc())
    kept = [(w.category.__name__, _text(w.message)) for w in caught]
    try:
        data = plain.dumps((*message, kept))
    except plain.NotPlain as error:
        data = plain.dumps(("notplain", error.kind, kept))
    reply.write(data)
    reply.flush()


def _hint(error: Exception) -> str:
    """An error that a limit of the child's own (:class:`decpriv.seal.sandbox.Limits`) may have caused names
    it: out of memory (Python's or torch's allocator), a process that could not start."""
    if not LIMITS:
        return ""
    text = _text(error)
    if isinstance(error, MemoryError) or "can't allocate memory" in text:
        return f" (the attack process's memory limit, sandbox.memory_gib={LIMITS[0].memory_gib:g}; raise it)"
    if isinstance(error, BlockingIOError) and not LIMITS[0].processes:
        return " (if it was starting a process: the sandbox starts none, sandbox.processes=0; raise it)"
    return ""


LIMITS: list[sandbox.Limits] = []  # this child's limits (its session's)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown>"


def session(connection: socket.socket, limits: sandbox.Limits) -> None:
    """One forked child, under its ``limits``: the attack first, then calls until the pipeline closes the
    socket. It works in its own empty directory."""
    LIMITS[:] = [limits]
    folder = zygote.scratch_folder()
    os.chdir(folder)
    stream = connection.makefile("rwb")

    def ask(name: str) -> int:
        stream.write(plain.dumps(("stream", name)))
        stream.flush()
        kind, value = pickle.load(stream)
        if kind == "refused":
            raise PermissionError(value)
        return value

    rng.CHANNEL = ask
    state: dict[str, Any] = {}
    try:
        data, device = pickle.load(stream)  # the attack's pickle, whole, whatever its unpickling does
        there, why = usable(device)
        set_attack_device(there)
        stream.write(plain.dumps(("device", there, why, [])))
        stream.flush()
        try:
            attack = pickle.loads(data)
        except Exception as error:  # its module does not import here: each call answers why
            attack = Unloaded(f"{type(error).__name__}: {error}")
        while True:
            message = pickle.load(stream)
            _answer(stream, attack, state, message[1], message[2])
    except (EOFError, OSError):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def usable(device: str) -> tuple[str, str]:
    """The run's device where this process can compute on it, else the CPU and why not."""
    if torch.device(device).type != "cuda":
        return "cpu", ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.zeros(1, device=device)
            return device, ""
        except Exception as error:
            said = "; ".join(str(w.message) for w in caught)
            return "cpu", f"{type(error).__name__}: {error}" + (f" ({said})" if said else "")


if __name__ == "__main__":  # the zygote's command (decpriv/seal/zygote.py)
    import decpriv.attacks.base  # noqa: F401  (what every attack, context and view unpickles)
    import decpriv.report.findings  # noqa: F401

    gc.freeze()  # the imports' objects are kept out of every collection (and out of the forks' copies)
    gc.enable()
    zygote.serve(int(sys.argv[1]), sys.argv[2], session)
