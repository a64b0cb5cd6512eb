"""The sealed attack process: an attack's code runs where the truth does not exist.

For each run the pipeline (:mod:`decpriv.experiment`) has the zygote (:mod:`decpriv.zygote`, a clean
interpreter started once) fork a child, and hands it over a socket, pickled: the attack as it was built
from its config (before any of its methods ran), then the :class:`~decpriv.adversary.view.AttackContext`,
the per-round observations of an active behaviour and the :class:`~decpriv.adversary.view.View`. The
child gets no root seed (its :class:`~decpriv.rng.ScopedSeeds` asks the pipeline for each ``attack.*``
stream), no config, no run folder (its working directory is an empty temporary one), no command line of
ours and an environment reduced to :data:`decpriv.zygote.KEPT_ENV`; the simulation, the data set and
:class:`~decpriv.truth.Truth` live in the pipeline's process only, so no frame walk, garbage-collector
scan or stored attribute of the attack can reach them. A declared oracle (``attack.oracle=true``) is the
one way the truth crosses, put in the View by the pipeline itself.

What it does not close: channels of the operating system open to any process of the same user (another
process's ``/proc`` entries, files on disk) and guessing the root seed (a small integer) to re-simulate the
world. Run untrusted attack code under another user or in a container for those. Linux and macOS only
(fork, file descriptors passed over Unix sockets).
"""

import os
import pickle
import shutil
import socket
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from decpriv import rng, zygote
from decpriv.adversary.behaviour import Behaviour, Forgery

THEIRS = "decpriv.seal: the plan the sealed process's prepare returned"


class SealedBehaviour(Behaviour):
    """The pipeline's stand-in for an active attack's behaviour: each round's observations go to the
    sealed process, which forges; the protocol (and its ``sim``) stays on this side."""

    def __init__(self, sealed: "Sealed"):
        self._sealed = sealed

    def forge(
        self, round_: int, senders: np.ndarray, observed: torch.Tensor, own: torch.Tensor
    ) -> Forgery | None:
        return self._sealed.call("forge", round_, senders, observed.cpu(), own.cpu())


class Sealed:
    """The pipeline's handle on one run's sealed attack process: the :class:`~decpriv.attacks.base.Attack`
    methods that see only the adversary's knowledge (``prepare``, ``kept_links``, ``behaviour``, ``run``),
    each run over there. ``streams`` answers the process's ``attack.*`` stream names."""

    def __init__(self, attack: bytes, module: str, streams: Callable[[str], int]):
        self._streams, self._plan = streams, THEIRS  # no plan until prepare ran over there
        self._socket = zygote.warm(module).session(module)
        self._file = self._socket.makefile("rwb")
        self._send(attack, raw=True)

    def _send(self, message: Any, raw: bool = False) -> None:
        self._file.write(message if raw else pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        self._file.flush()

    def call(self, method: str, *args: Any) -> Any:
        """Run ``method`` over there; serve its stream requests; re-raise its warnings and its error here."""
        self._send(("call", method, args))
        while True:
            try:
                message = pickle.load(self._file)
            except EOFError:
                raise RuntimeError(f"the sealed attack process ended during attack.{method}") from None
            if message[0] == "stream":
                try:
                    self._send(("seed", self._streams(message[1])))
                except PermissionError as error:
                    self._send(("refused", str(error)))
                continue
            for text, category in message[-1]:
                warnings.warn(text, category, stacklevel=3)
            if message[0] == "done":
                return message[1]
            error, trace = message[1], message[2]
            error.add_note(f"in the sealed attack process:\n{trace}")
            raise error

    def prepare(self, context) -> Any:
        self._plan = self.call("prepare", context)
        return self._plan

    def _theirs(self, plan: Any) -> Any:
        """The plan as the process should read it: its own object when it is the one its prepare returned
        (an active attack's plan is its forger, which keeps state over the run), else the pipeline's."""
        return THEIRS if plan is self._plan else plan

    def kept_links(self, context, plan: Any, observed: np.ndarray) -> np.ndarray:
        return self.call("kept_links", context, self._theirs(plan), observed)

    def behaviour(self, context, plan: Any) -> Behaviour | None:
        return SealedBehaviour(self) if self.call("behaviour", context, self._theirs(plan)) else None

    def run(self, view) -> Any:
        return self.call("run", replace(view, plan=self._theirs(view.plan)))

    def close(self) -> None:
        """End the session (the child exits when its socket closes)."""
        with suppress(OSError):
            self._file.close()
        self._socket.close()


def _is_theirs(plan: Any) -> bool:
    return isinstance(plan, str) and plan == THEIRS


def _serve(attack: Any, state: dict[str, Any], method: str, args: tuple) -> Any:
    if method == "run" and _is_theirs(args[0].plan):
        args = (replace(args[0], plan=state["plan"]),)
    elif method in ("kept_links", "behaviour") and _is_theirs(args[1]):
        args = (args[0], state["plan"], *args[2:])
    if method == "prepare":
        state["plan"] = attack.prepare(*args)
        return state["plan"]
    if method == "behaviour":
        state["behaviour"] = attack.behaviour(*args)
        return state["behaviour"] is not None
    if method == "forge":
        return state["behaviour"].forge(*args)
    if method not in ("kept_links", "run"):
        raise ValueError(f"the sealed attack process serves no {method!r}")
    return getattr(attack, method)(*args)


def _portable(error: BaseException) -> BaseException:
    """The error itself when it survives pickling, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _answer(reply, attack: Any, state: dict[str, Any], method: str, args: tuple) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            message = ("done", _serve(attack, state, method, args))
        except Exception as error:
            message = ("error", _portable(error), traceback.format_exc())
    kept = [(str(w.message), w.category) for w in caught]
    try:
        data = pickle.dumps((*message, kept), pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # a result that does not pickle
        failed = RuntimeError(f"attack.{method} returned what cannot leave its process: {error}")
        data = pickle.dumps(("error", failed, "", kept))
    reply.write(data)
    reply.flush()


def session(connection: socket.socket) -> None:
    """One forked child: the attack first, then calls until the pipeline closes the socket. It works in
    its own empty directory."""
    folder = tempfile.mkdtemp(prefix="decpriv-attack-")
    os.chdir(folder)
    stream = connection.makefile("rwb")

    def ask(name: str) -> int:
        stream.write(pickle.dumps(("stream", name)))
        stream.flush()
        kind, value = pickle.load(stream)
        if kind == "refused":
            raise PermissionError(value)
        return value

    rng.CHANNEL = ask
    state: dict[str, Any] = {}
    try:
        attack = pickle.load(stream)
        while True:
            message = pickle.load(stream)
            _answer(stream, attack, state, message[1], message[2])
    except (EOFError, OSError):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # the zygote's command (decpriv/zygote.py)
    import decpriv.attacks.base  # noqa: F401  (what every attack, context and view unpickles)
    import decpriv.report.findings  # noqa: F401

    zygote.serve(int(sys.argv[1]), session)
