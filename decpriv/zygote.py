"""The zygote of the sealed attack processes (decpriv/seal.py): a clean Python process that only forks.

Started once per decpriv process (by the precheck, once a config with an attack has passed: a refused
command starts nothing), from this process but with no arguments of ours, an empty working directory and
an environment reduced to :data:`KEPT_ENV`; it imports torch and the attack interface, then, for each
message of its control socket, imports the attack's module it names and, when a session socket came with
it, forks a child that serves that session. It never receives anything else, so each child starts from
an interpreter that has seen nothing of any run, in milliseconds. Standard library only.
"""

import atexit
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import NoReturn

# what the process keeps of the environment: the search path of programs, the locale, the thread counts
# and the accelerator's selection (a config override or the run folder never travel in these)
KEPT_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)


def child_environment() -> dict[str, str]:
    """The kept variables, and the parent's import path (absolute, without its working directory) so the
    attack's module imports as it did in the pipeline."""
    env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
    cwd = os.getcwd()
    path = [str(Path(p).resolve()) for p in sys.path if p and str(Path(p).resolve()) != cwd]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    return env


class Zygote:
    """A clean process that only forks: started once (from this process, with :data:`KEPT_ENV`, an empty
    working directory and no arguments), it imports torch and the attack interface, then forks one child
    per sealed session and hands it the session's socket. It never receives anything but those sockets,
    so each child starts from an interpreter that has seen nothing of any run, in milliseconds."""

    def __init__(self):
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._folder = tempfile.TemporaryDirectory(prefix="decpriv-attack-")
        # the command imports torch and the attack interface (decpriv/seal.py), then serves
        command = [sys.executable, "-m", "decpriv.seal", str(theirs.fileno())]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            cwd=self._folder.name,
            env=child_environment(),
            pass_fds=[theirs.fileno()],
        )
        theirs.close()

    def alive(self) -> bool:
        return self._process.poll() is None

    def preload(self, module: str) -> None:
        """Import the attack's module over there now (the first session then forks at once)."""
        self._control.send(module.encode())

    def session(self, module: str) -> socket.socket:
        ours, theirs = socket.socketpair()
        socket.send_fds(self._control, [module.encode()], [theirs.fileno()])
        theirs.close()
        return ours

    def close(self) -> None:
        """End the zygote now: it holds nothing to flush, and a command refused early must not wait for
        its imports. Children serving a session are processes of their own and finish it."""
        self._control.close()
        self._process.kill()
        self._process.wait()
        self._folder.cleanup()


_zygote: list[Zygote] = []  # this process's zygote, started at the first sealed attack (or warm())


def warm(module: str | None = None) -> Zygote:
    """This process's zygote, started now if it is not running, importing the attack's ``module`` (its
    imports overlap the caller's work)."""
    if not _zygote or not _zygote[0].alive():
        if not _zygote:
            atexit.register(lambda: _zygote[0].close())
        _zygote[:] = [Zygote()]
    if module is not None:
        _zygote[0].preload(module)
    return _zygote[0]


def serve(control_fd: int, session: Callable[[socket.socket], None]) -> NoReturn:
    """The zygote: for each message on the control socket, import the attack's module it names (once:
    the children forked after it start with it imported), then, when a session socket came with it, fork
    a child that serves it; until the pipeline closes the control socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run and its child; the zygote follows
    control = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 4096, 1)
        if not message:  # the pipeline's process is gone
            os._exit(0)
        with suppress(Exception):  # a module that fails to import fails in the child, named there
            importlib.import_module(message.decode())
        if not fds:
            continue
        if os.fork() == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                session(socket.socket(fileno=fds[0]))
            finally:
                os._exit(0)
        os.close(fds[0])
