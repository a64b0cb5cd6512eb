"""The zygote of the sealed attack processes (decpriv/seal/process.py): a clean Python process that only forks.

Started once per decpriv process (by ``decpriv run`` first thing, or at the first sealed attack), from
this process but with no arguments of ours, an empty working directory and an environment reduced to
:data:`KEPT_ENV`, inside the sandbox of :mod:`decpriv.seal.sandbox` (bubblewrap); it imports torch and the
attack interface, then, for each message of its control socket, imports the attack's module it names
when it is decpriv's own (a plugin's module imports in the session's child alone: its code never runs
in the zygote, which forks every later session) and, when a session socket came with it, forks a warden
that gives the session its own namespaces and scratch (:func:`decpriv.seal.sandbox.private_scratch`) and
forks the session's child. It never receives anything but module names, the session's limits and
sockets, and no folder on its import path is writable (Python's safe-path mode, ``-P``; no user site,
``-s``; under bubblewrap nothing at all is writable to it), so each child starts from an interpreter that
has seen nothing of any run or earlier session, in milliseconds. Its standard output and error are pipes this process
relays (the sandbox has no terminal). Standard library only, but for the sandbox's filter.
"""

import atexit
import ctypes
import fcntl
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, NoReturn

from decpriv.seal import sandbox

# what the process keeps of the environment: the search path of programs, the locale, the thread counts
# and the accelerator's selection (a config override or the run folder never travel in these)
KEPT_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)


def child_environment(seal: str) -> dict[str, str]:
    """The kept variables, and the parent's import path made absolute (its working directory where the
    path names it, as ``""`` or ``.``), so the attack's module imports as it does in the pipeline: a
    plugin beside ./conf under ``PYTHONPATH=.`` included. Scratch files go to the sandbox's own /tmp."""
    env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
    path = [str(Path(p or os.getcwd()).resolve()) for p in sys.path]
    # only what exists: a path hook's marker (an editable install's) resolves to a folder no one made,
    # which an attack could make in its scratch
    env["PYTHONPATH"] = os.pathsep.join(p for p in dict.fromkeys(path) if os.path.exists(p))
    env["PYTHONUNBUFFERED"] = "1"  # the attack's prints reach the relay as they are made
    if seal == "bubblewrap":  # its home is its private /tmp (matplotlib's and fontconfig's caches)
        env["TMPDIR"] = env["HOME"] = "/tmp"
        # no /etc/passwd over there: getpass asks these first (torch before 2.12 names its compile cache
        # after the user and fails without one, so every L-BFGS attack did on a GPU machine's torch 2.11)
        env["USER"] = env["LOGNAME"] = "attack"
        env["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/torchinductor"
    elif "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


# decpriv/seal/process.py run as __main__, with automatic collections paused through its imports (torch's
# half a million objects, walked again and again: 0.75 s of CPU, docs/speed.md); it resumes them, with
# what the imports made frozen out of every later collection, before it serves
ZYGOTE_MAIN = (
    "import gc, runpy; gc.disable(); "
    "runpy.run_module('decpriv.seal.process', run_name='__main__', alter_sys=True)"
)


class Zygote:
    """A clean process that only forks (:func:`serve`), in the sandbox ``seal`` names: ``bubblewrap``
    (:mod:`decpriv.seal.sandbox`; with ``gpu`` the NVIDIA device nodes bound in; each session mounts its own
    /tmp and /dev/shm) or ``process`` (where bubblewrap cannot run: this process made non-dumpable,
    the child's rlimits and filter alone)."""

    def __init__(self, gpu: bool = False):
        self.gpu = gpu
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.seal = seal_kind()
        remove_stale_scratch()
        # the command imports torch and the attack interface (decpriv/seal/process.py), then serves
        python = [sys.executable, "-P", "-s", "-c", ZYGOTE_MAIN]
        command = [*python, str(theirs.fileno()), self.seal]
        fds = [theirs.fileno()]
        if self.seal == "bubblewrap":
            filter_fd = sandbox.seccomp_file()
            fds.append(filter_fd)
            command = [*sandbox.command(sandbox.bwrap(), gpu, filter_fd), *command]
        else:
            _prctl(PR_SET_DUMPABLE, 0)  # no process of this user reads our memory, fds or environment
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env=child_environment(self.seal),
            pass_fds=fds,
        )
        theirs.close()
        for fd in fds[1:]:  # the filter, read by bwrap
            os.close(fd)
        self.output = Output()
        relay(self._process.stdout, "stdout", self.output)
        relay(self._process.stderr, "stderr", self.output)

    def fits(self, gpu: bool) -> bool:
        return self._process.poll() is None and (gpu, seal_kind()) == (self.gpu, self.seal)

    def preload(self, module: str) -> None:
        """Import the attack's module over there now (the first session then forks at once)."""
        self._control.send(json.dumps({"module": module}).encode())

    def session(self, module: str, limits: sandbox.Limits) -> tuple[socket.socket, socket.socket]:
        """A session's socket, and its lifeline: closing the lifeline's sending side ends the session's
        whole process tree; the lifeline then answers, after a line saying how the child ended where it
        ended by itself (:func:`warden`)."""
        ours, theirs = socket.socketpair()
        life, their_life = socket.socketpair()
        message = json.dumps({"module": module, "limits": vars(limits)}).encode()
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


class Output:
    """What the relay may still write for the current run (``sandbox.output_kib``, counted as written:
    marker and escapes included, so printing cannot amplify past it) and what it dropped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.left, self.dropped, self.limit_kib, self.quiet_since = 0, 0, 0, time.monotonic()
        self.pipes: list[int] = []  # the relays' read ends: what is still in them is not yet counted
        self.busy = 0  # relays between reading a chunk and counting it

    def start(self, limit_kib: int) -> None:
        with self.lock:
            self.left, self.dropped, self.limit_kib = limit_kib * 1024, 0, limit_kib

    def take(self, text: str) -> str:
        """The part of ``text`` within what is left, whole lines only; the rest counted as dropped."""
        with self.lock:
            self.quiet_since = time.monotonic()
            size = len(text.encode())
            if size <= self.left:
                self.left -= size
                return text
            kept = text.encode()[: self.left].rpartition(b"\n")[0]
            kept = kept + b"\n" if kept else b""
            self.left = 0
            self.dropped += size - len(kept)
            return kept.decode(errors="replace")

    def drained(self) -> bool:
        """Every byte the session wrote has been read and counted: the pipes hold none, no relay holds a
        chunk, and the relays have been quiet a moment (a byte in flight between the two)."""
        pending = 0
        for fd in self.pipes:
            with suppress(OSError):
                pending += int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4), sys.byteorder)
        return not pending and not self.busy and time.monotonic() - self.quiet_since >= 0.1

    def note(self, wait: float = 30.0) -> str | None:
        """Once the session's output is drained (its tree has ended; up to ``wait`` s on a starved CPU):
        the line saying what was dropped, counted exactly."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not self.drained():
            time.sleep(0.02)
        with self.lock:
            dropped, self.dropped = self.dropped, 0
        if not dropped:
            return None
        return f"attack| [{dropped} bytes of output dropped, past sandbox.output_kib={self.limit_kib}]\n"


def relay(pipe: IO[bytes], name: str, output: Output) -> None:
    """Copy what the sandbox writes to ``pipe`` to this process's stream ``name``, line by line, each
    marked as the attack's and its control characters shown, not obeyed (no escape sequence of the
    attack's reaches the user's terminal), within what ``output`` leaves."""

    def read() -> bytes:
        chunk = os.read(pipe.fileno(), 65536)
        with output.lock:  # held from the read until counted: note() waits for it
            output.busy += 1
        return chunk

    def write(chunk: bytes) -> None:
        lines = chunk.decode(errors="replace").removesuffix("\n").split("\n")
        kept = output.take("".join(f"attack| {shown(line)}\n" for line in lines))
        if kept:
            stream = getattr(sys, name)
            stream.write(kept)
            stream.flush()

    def copy() -> None:
        with suppress(OSError, ValueError):  # a chunk at a time: a last line without newline shows too
            for chunk in iter(read, b""):
                try:
                    write(chunk)
                finally:
                    with output.lock:
                        output.busy -= 1

    output.pipes.append(pipe.fileno())

    threading.Thread(target=copy, name=f"decpriv-attack-{name}", daemon=True).start()


def shown(text: str) -> str:
    """``text`` with every control character but the tab written as its escape (``\\x1b``)."""
    return "".join(c if c == "\t" or (c.isprintable() and c != "\x7f") else repr(c)[1:-1] for c in text)


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


def seal_kind() -> str:
    """``bubblewrap`` where its sandbox starts here (checked once: bwrap, libseccomp, user namespaces),
    else ``process``; ``DECPRIV_SEAL=process`` asks for the weaker one."""
    if _kind:
        return _kind[0]
    binary = sandbox.bwrap()
    if os.environ.get("DECPRIV_SEAL") == "process":
        why = "DECPRIV_SEAL=process asks for it"
    elif binary is None:
        why = "no bubblewrap here"
    elif not sandbox.filters():
        why = "no libseccomp here"
    else:
        why = _probe(binary)
    _kind.append("process" if why else "bubblewrap")
    _why[:] = [why or ""]
    return _kind[0]


def _probe(binary: str) -> str | None:
    """None where the sandbox starts (``true`` in it), else why not, in bubblewrap's words."""
    fd = sandbox.seccomp_file()
    try:
        probe = [*sandbox.command(binary, False, fd), "true"]
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False, pass_fds=[fd])
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap cannot start here: {error}"
    finally:
        os.close(fd)
    said = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
    return (
        None if done.returncode == 0 else f"bubblewrap cannot start here: {said[0] if said else 'it failed'}"
    )


_kind: list[str] = []
_why: list[str] = []


def why_process() -> str:
    """Why the process seal runs (for its warning)."""
    return _why[0] if _why else "asked for"


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


_zygote: list[Zygote] = []  # this process's zygote, started at the first sealed attack (or warm())


def warm(module: str | None = None, gpu: bool = False) -> Zygote:
    """This process's zygote, started now if none runs with the device nodes (``gpu``) asked for (one
    without them is ended), importing the attack's ``module`` where it is decpriv's own (its imports
    overlap the caller's work)."""
    if not _zygote or not _zygote[0].fits(gpu):
        if not _zygote:
            atexit.register(lambda: _zygote[0].close())
        else:
            _zygote[0].close()
        _zygote[:] = [Zygote(gpu)]
    if module is not None:
        _zygote[0].preload(module)
    return _zygote[0]


def serve(control_fd: int, seal: str, session: Callable[[socket.socket, sandbox.Limits], None]) -> NoReturn:
    """The zygote: for each message on the control socket, import the attack's module it names (once:
    the children forked after it start with it imported), then, when a session's sockets came with it,
    fork a warden for it (:func:`warden`); until the pipeline closes the control socket. It is not
    dumpable: a session's child, the same user in the same sandbox, cannot read or write its memory
    through /proc (it forks every later session)."""
    _prctl(PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # wardens are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run and its child; the zygote follows
    control = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, 2)
        if not message:  # the pipeline's process is gone
            os._exit(0)
        asked = json.loads(message)
        if ours(asked["module"]):
            with suppress(Exception):  # a module that fails to import fails in the child, named there
                importlib.import_module(asked["module"])
        if len(fds) != 2:
            continue
        if os.fork() == 0:
            control.close()
            warden(fds[0], fds[1], sandbox.Limits(**asked["limits"]), seal, session)
        for fd in fds:
            os.close(fd)


def ours(module: str) -> bool:
    """Whether ``module`` is decpriv's own (a built-in attack), which the zygote may import: decpriv is a
    regular package, so its submodules resolve in its own read-only folder alone."""
    return isinstance(module, str) and module.startswith("decpriv.")


SCRATCH_PREFIX = "decpriv-attack-"


def scratch_folder() -> str:
    """A session's working folder under the process seal, named after its process (under bubblewrap it
    lies in the session's own /tmp, gone with it)."""
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")


def remove_stale_scratch() -> None:
    """Remove the working folders that sessions killed before their end left in this machine's temporary
    folder (their process is gone)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = folder.name.removeprefix(SCRATCH_PREFIX).split("-")[0]
        with suppress(OSError):
            if pid.isdigit() and folder.stat().st_uid == os.getuid() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def warden(
    session_fd: int, lifeline_fd: int, limits: sandbox.Limits, seal: str, session: Callable
) -> NoReturn:
    """One session's keeper, a subreaper: it forks the sealed child (which takes its ``limits`` first, and
    under the process seal the sandbox's system-call filter),
    then waits for the pipeline to close the lifeline (the attack phase ended, or the pipeline died) or
    for the child to end, in which case it says how on the lifeline (``signal 24``, ``exit 0``); then it ends every process of the child's tree and answers ``\\0``."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if seal == "bubblewrap":
        sandbox.private_scratch(limits.scratch_mib)
    warden_pid = os.getpid()
    child = os.fork()
    if child == 0:
        # an attack that kills its warden (same user) dies with it: no orphan outlives the session
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != warden_pid:
            os._exit(1)
        os.close(lifeline_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:  # (its prints are flushed before its end below: os._exit skips that)
            if seal == "bubblewrap":  # the warden keeps its own, to count what the child holds
                sandbox.drop_capabilities()
            if sandbox.filters():  # under bubblewrap, over the zygote's: no mount, no namespace
                sandbox.system_calls().load()
            limits.apply()
            session(socket.socket(fileno=session_fd), limits)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with suppress(Exception):
                    stream.flush()
            os._exit(0)
    os.close(session_fd)
    lifeline = socket.socket(fileno=lifeline_fd)
    ended = os.pidfd_open(child)
    with suppress(OSError):
        said = watch(child, ended, lifeline, limits, seal == "bubblewrap")
        if said:
            lifeline.send(said.encode() + b"\n")
        lifeline.recv(1)
    with suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
    _end_tree()
    with suppress(OSError):
        lifeline.send(b"\0")
    os._exit(0)


WATCH = 0.02  # seconds between two counts of the child's memory and threads


def watch(child: int, ended: int, lifeline: socket.socket, limits: sandbox.Limits, scratch: bool) -> str:
    """Until the pipeline closes the lifeline (``""``) or the child ends (how: ``exit 0``), count what the
    child holds that no rlimit bounds (shared memory, memfd files, System V segments, its scratch; its
    threads where it runs as root), and end it past its limits (``memory BYTES``, ``threads N``)."""
    memory = limits.memory_gib * sandbox.GIB
    while True:
        ready = select.select([lifeline, ended], [], [], WATCH)[0]
        if ended in ready:
            return _how(os.waitpid(child, 0)[1])
        if ready:
            return ""
        held, threads = sandbox.usage(child, scratch)
        if held > memory or threads > limits.threads:
            with suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return f"memory {held}" if held > memory else f"threads {threads}"


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def ending(said: bytes, limits: sandbox.Limits) -> str:
    """How a sealed child ended, in words, from what its warden said (``signal 24``) and its limits."""
    line = said.split(b"\n", 1)[0].decode(errors="replace")
    kind, _, number = line.partition(" ")
    if kind == "signal" and number.isdigit():
        sig = signal.Signals(int(number)) if int(number) in signal.valid_signals() else None
        if sig == signal.SIGXCPU:
            return (
                f"it used its CPU time (sandbox.cpu_seconds={limits.cpu_seconds}); raise sandbox.cpu_seconds"
            )
        if sig == signal.SIGXFSZ:
            return f"it wrote a file past sandbox.file_mib={limits.file_mib}; raise sandbox.file_mib"
        return f"it was ended by {sig.name if sig else 'signal ' + number}"
    if kind == "memory" and number.isdigit():
        return (
            f"it touched {int(number) / sandbox.GIB:.2f} GiB (shared memory and its scratch included), past "
            f"sandbox.memory_gib={limits.memory_gib:g}; raise sandbox.memory_gib"
        )
    if kind == "threads" and number.isdigit():
        return f"it ran {number} threads, past sandbox.threads={limits.threads}; raise sandbox.threads"
    if kind == "exit":
        return f"it exited with status {number}"
    return "its sandbox was ended (a signal to its process group or a crash of the zygote)"


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
