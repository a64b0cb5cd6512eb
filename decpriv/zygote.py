"""The zygote of the sealed attack processes (decpriv/seal.py): a clean Python process that only forks.

Started once per decpriv process (by the precheck, once a config with an attack has passed: a refused
command starts nothing), from this process but with no arguments of ours, an empty working directory and
an environment reduced to :data:`KEPT_ENV`; it imports torch and the attack interface, then, for each
message of its control socket, imports the attack's module it names and, when a session socket came with
it, forks a child that serves that session. It never receives anything else, so each child starts from
an interpreter that has seen nothing of any run, in milliseconds. Standard library only.
"""

import atexit
import ctypes
import errno
import importlib
import os
import shutil
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
    """The kept variables, and the parent's import path made absolute (its working directory where the
    path names it, as ``""`` or ``.``), so the attack's module imports as it does in the pipeline: a
    plugin beside ./conf under ``PYTHONPATH=.`` included."""
    env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
    path = [str(Path(p or os.getcwd()).resolve()) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    return env


class Zygote:
    """A clean process that only forks: started once (from this process, with :data:`KEPT_ENV`, an empty
    working directory and no arguments), it imports torch and the attack interface, then serves one
    sealed session per message (:func:`serve`). It never receives anything but module names, the paths
    to hide and the sessions' sockets, so each session starts from an interpreter that has seen nothing of
    any run, in milliseconds. ``seal``: ``namespace`` (its own user, PID and mount namespaces) or
    ``process`` (where those are not available: this process made non-dumpable)."""

    def __init__(self):
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._folder = tempfile.TemporaryDirectory(prefix="decpriv-attack-")
        self.seal = seal_kind()
        # the command imports torch and the attack interface (decpriv/seal.py), then serves
        command = [sys.executable, "-m", "decpriv.seal", str(theirs.fileno()), self.seal]
        if self.seal == "namespace":
            command = [*NAMESPACES, *command]
        else:
            _prctl(PR_SET_DUMPABLE, 0)  # no process of this user reads our memory, fds or environment
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

    def session(self, module: str, hide: tuple[str, ...] = ()) -> tuple[socket.socket, socket.socket]:
        """A session's socket, and its lifeline: closing the lifeline's sending side ends the session's
        whole process tree, and the lifeline answers once it has ended. ``hide``: folders the session
        does not see (namespace seal)."""
        ours, theirs = socket.socketpair()
        life, their_life = socket.socketpair()
        message = "\0".join([module, *hide]).encode()
        socket.send_fds(self._control, [message], [theirs.fileno(), their_life.fileno()])
        theirs.close()
        their_life.close()
        return ours, life

    def close(self) -> None:
        """End the zygote now: it holds nothing to flush, and a command refused early must not wait for
        its imports."""
        self._control.close()
        self._process.kill()
        self._process.wait()
        self._folder.cleanup()


# the zygote in its own user (this user as its root), PID (it is the namespace's init: its end ends every
# process in it) and mount namespaces, with its own /proc: no other process of the machine is visible
NAMESPACES = [
    "unshare",
    "--user",
    "--map-root-user",
    "--pid",
    "--mount",
    "--fork",
    "--mount-proc",
    "--kill-child",
]
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = (
    442,
    -100,
    0x8000,
    1,
)  # one number on every arch


def seal_kind() -> str:
    """``namespace`` where util-linux's unshare can make user, PID and mount namespaces here (checked
    once), else ``process``; ``DECPRIV_SEAL=process`` asks for the weaker one."""
    if _kind:
        return _kind[0]
    works = os.environ.get("DECPRIV_SEAL") != "process" and shutil.which("unshare") is not None
    if works:
        try:
            probe = subprocess.run([*NAMESPACES, "true"], capture_output=True, timeout=10, check=False)
            works = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            works = False
    _kind.append("namespace" if works else "process")
    return _kind[0]


_kind: list[str] = []


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        _libc().prctl(option, value, 0, 0, 0)


def _checked(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


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


def serve(control_fd: int, seal: str, session: Callable[[socket.socket], None]) -> NoReturn:
    """The zygote: for each message on the control socket, import the attack's module it names (once:
    the children forked after it start with it imported), then, when a session's sockets came with it,
    fork a warden for it (:func:`warden`); until the pipeline closes the control socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # wardens are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run and its child; the zygote follows
    control = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, 2)
        if not message:  # the pipeline's process is gone
            os._exit(0)
        module, *hide = message.decode().split("\0")
        with suppress(Exception):  # a module that fails to import fails in the child, named there
            importlib.import_module(module)
        if len(fds) != 2:
            continue
        if os.fork() == 0:
            control.close()
            warden(fds[0], fds[1], hide, seal, session)
        for fd in fds:
            os.close(fd)


def warden(session_fd: int, lifeline_fd: int, hide: list[str], seal: str, session: Callable) -> NoReturn:
    """One session's keeper: it forks the sealed child, waits for the pipeline to close the lifeline (the
    attack phase ended, or the pipeline died), then ends the child's whole process tree and answers.
    Namespace seal: the child is the init of a PID namespace of its own (its end ends every process in
    it), in a mount namespace of its own (:func:`_confine`). Process
    seal: the warden is a subreaper, so a detached grandchild is still its own to end."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if seal == "namespace":
        _checked(_libc().unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare")
    else:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = os.fork()
    if child == 0:
        os.close(lifeline_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            if seal == "namespace":
                _confine(hide)
            session(socket.socket(fileno=session_fd))
        finally:
            os._exit(0)
    os.close(session_fd)
    lifeline = socket.socket(fileno=lifeline_fd)
    with suppress(OSError):
        lifeline.recv(1)
    with suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
    _end_tree()
    with suppress(OSError):
        lifeline.send(b"x")
    os._exit(0)


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _confine(folders: list[str]) -> None:
    """In the session's own mount namespace: a /proc of its PID namespace alone, an empty folder over each
    of ``folders``, every other mount read-only (nothing it writes outlives it or reaches the pipeline:
    no source, no run folder, no cache), and an empty writable /dev/shm of its own as its TMPDIR. /tmp
    stays what it is, read-only: a checkout, a venv or a user's plugin there must still import (a CI clone
    under /tmp could not import decpriv under a fresh /tmp)."""
    libc = _libc()
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _checked(libc.mount(b"proc", b"/proc", b"proc", flags, None), "mount /proc")
    for folder in folders:
        if os.path.isdir(folder):
            _checked(
                libc.mount(b"tmpfs", folder.encode(), b"tmpfs", flags, b"size=4k,mode=0"), f"hide {folder}"
            )
    read_only = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    done = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(read_only), 32)
    if done != 0 and ctypes.get_errno() != errno.ENOSYS:  # a kernel before 5.12 has no mount_setattr
        _checked(done, "make / read-only")
    if os.path.isdir("/dev/shm"):
        _checked(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"), "/dev/shm")
        os.environ["TMPDIR"] = tempfile.tempdir = "/dev/shm"  # every other folder is read-only here


def _end_tree() -> None:
    """Kill every child (a subreaper's children include the orphans of its tree) until none is left."""
    me = f"/proc/self/task/{os.getpid()}/children"
    while True:
        with suppress(OSError):
            for pid in Path(me).read_text().split():
                with suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
