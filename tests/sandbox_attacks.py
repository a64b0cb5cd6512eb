"""An attack that tries to leave its sandbox (issue 45), for tests/test_sandbox.py: each ``way`` is one
payload, written as a determined attack author would, and returns what it achieved as text (``ok ...``
where it worked, ``refused ...`` or ``missing`` where it did not).

Not a test module: the sealed attack process imports it to unpickle the attack. Each payload is also a
plain function, so that a test can show it works where nothing confines it (the control).
"""

import ctypes
import errno
import fcntl
import getpass
import glob
import mmap
import os
import signal
import socket
import sys
import termios
import time
from pathlib import Path

import pandas as pd
import torch

from decpriv.attacks.base import Attack
from decpriv.device import attack_device
from decpriv.report.findings import Findings

MNT_DETACH, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = 2, -100, 0x8000, 1, 442
INJECTED = "echo decpriv-injected\n"  # what TIOCSTI pushes into the user's terminal


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _failed(call: str) -> str:
    number = ctypes.get_errno()
    return f"refused {call}: {errno.errorcode.get(number, number)}"


def unmount(target: str) -> str:
    """Detach the mount at ``target`` (what hid the run folder, the data cache and the host's /proc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return "ok" if libc.umount2(target.encode(), MNT_DETACH) == 0 else _failed("umount2")


def remount_writable(target: str) -> str:
    """Clear the read-only flag of every mount under ``target`` (mount_setattr, recursive)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    done = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, target.encode(), AT_RECURSIVE, ctypes.byref(attr), 32)
    return "ok" if done == 0 else _failed("mount_setattr")


def privileges() -> str:
    """Capability sets, no_new_privs and the seccomp mode, from /proc/self/status."""
    keep = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    lines = Path("/proc/self/status").read_text().splitlines()
    return " ".join(line.replace(":\t", "=") for line in lines if line.startswith(keep))


def processes() -> str:
    """How many processes /proc shows, and the command line of PID 1."""
    pids = glob.glob("/proc/[0-9]*")
    try:
        first = Path("/proc/1/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        first = ""
    return f"{len(pids)} {first.strip()}"


def plant(path: str) -> str:
    """Write a file at ``path`` (a cache entry the next run reads, code beside decpriv's)."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"planted")
        return "ok"
    except OSError as error:
        return f"refused {errno.errorcode.get(error.errno, error.errno)}"


def listing(folder: str) -> str:
    """The names in ``folder`` (a sweep folder: multirun.yaml, ledger.json, the other jobs)."""
    try:
        return " ".join(sorted(os.listdir(folder))) or "empty"
    except OSError:
        return "missing"


def inject() -> str:
    """Push a command into the terminal's input (TIOCSTI) through every descriptor that may be one."""
    done = []
    fds = [0, 1, 2]
    try:
        fds.append(os.open("/dev/tty", os.O_RDWR))
    except OSError as error:
        done.append(f"/dev/tty {errno.errorcode.get(error.errno, error.errno)}")
    for fd in fds:
        try:
            for char in INJECTED:
                fcntl.ioctl(fd, termios.TIOCSTI, char.encode())
            done.append(f"{fd} ok")
        except OSError as error:
            done.append(f"{fd} {errno.errorcode.get(error.errno, error.errno)}")
    return " ".join(done)


def connect(address: str) -> str:
    """Send a line to ``host:port`` (a listener of the user's, on this machine's loopback)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2) as link:
            link.sendall(b"private data\n")
        return "ok"
    except OSError as error:
        return f"refused {type(error).__name__}"


def fork_bomb(count: int = 64) -> str:
    """Start ``count`` processes (each ends at once); how many started."""
    started = 0
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os._exit(0)
        started += 1
        os.waitpid(pid, 0)
    return f"{started} started"


def memory_hog(gib: float) -> str:
    """Allocate ``gib`` GiB."""
    try:
        hog = torch.empty(int(gib * 2**30), dtype=torch.uint8)
        return f"ok {hog.numel()}"
    except (RuntimeError, MemoryError) as error:
        return f"refused {type(error).__name__}"


def shared_memory(gib: float) -> str:
    """Touch ``gib`` GiB of MAP_SHARED anonymous memory (which RLIMIT_DATA does not count), a page at a
    time, holding it."""
    size = int(gib * 2**30)
    area = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
    for at in range(0, size, mmap.PAGESIZE):
        area[at] = 1
    HELD.append(area)
    return f"ok {size}"


def memfd_memory(gib: float) -> str:
    """Write ``gib`` GiB into memfd files of 256 MiB each (never mapped: no resident set shows them)."""
    chunk = b"\1" * 2**24
    for _ in range(int(gib * 4)):
        try:
            fd = os.memfd_create("hog")
        except OSError as error:
            return f"refused {errno.errorcode.get(error.errno, error.errno)}"
        for _ in range(16):
            os.write(fd, chunk)
        HELD.append(fd)
    return f"ok {int(gib * 4)} files"


def many_threads(count: int) -> str:
    """Start ``count`` threads that wait, holding them all; how many started."""
    import threading

    stop = threading.Event()
    started = 0
    try:
        for _ in range(count):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    time.sleep(0.5)  # held: the warden counts them
    stop.set()
    return f"{started} started"


def sleep_long(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def open_socket(family: str) -> str:
    """Open a socket of ``family`` (INET, INET6, NETLINK, PACKET, VSOCK, UNIX)."""
    try:
        socket.socket(
            getattr(socket, f"AF_{family}"), socket.SOCK_DGRAM if family != "VSOCK" else socket.SOCK_STREAM
        ).close()
        return "ok"
    except OSError as error:
        return f"refused {errno.errorcode.get(error.errno, error.errno)}"


def flood(mib: float) -> str:
    """Print ``mib`` MiB of newlines (each relayed line carries the marker)."""
    sys.stdout.write("\n" * int(mib * 2**20))
    sys.stdout.flush()
    return "printed"


HELD: list = []  # what the memory payloads hold (maps, memfd descriptors)


def release() -> None:
    """Let go of what the memory payloads hold (the controls run in the test's own process)."""
    for held in HELD:
        if isinstance(held, int):
            os.close(held)
        else:
            held.close()
    HELD.clear()


def map_device(node: str) -> str:
    """Open a device node read-write and map a page of it (what CUDA does with /dev/nvidia*)."""
    try:
        fd = os.open(node, os.O_RDWR)
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"refused {errno.errorcode.get(error.errno, error.errno)}"
    try:
        page = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        page[:4] = b"ping"
        page.close()
        return "ok mapped"
    except OSError as error:
        return f"refused mmap {errno.errorcode.get(error.errno, error.errno)}"
    finally:
        os.close(fd)


def spin() -> str:
    """Compute until the CPU-time limit ends it."""
    while True:
        sum(range(1000))


def end_the_group() -> str:
    """SIGKILL to every process it may signal, then to its own process group."""
    os.kill(-1, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)
    return "survived"


def orphan(marker: str) -> str:
    """Kill the parent (the session's warden, which ends the attack's tree), outlive it a second, then
    write ``marker`` (the child's own /tmp under bubblewrap: it reads back only while alive)."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(1)
    Path(marker).write_text("outlived")
    return "outlived its parent"


def chatter() -> str:
    """Print as an attack author may: a line with a terminal escape (red, then a window title), and on
    standard error a last line without its newline."""
    print("attack says \x1b[31mred\x1b]0;TITLE\x07")
    sys.stderr.write("no newline")
    return "printed"


def allocate(gib: float) -> str:
    """Allocate ``gib`` GiB with torch's allocator, not catching its error."""
    return f"ok {torch.ones(int(gib * 2**30), dtype=torch.uint8).numel()}"


def identity() -> str:
    """The user name the libraries an attack imports ask for (torch's compile cache is named after it)."""
    return f"ok {getpass.getuser()} {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}"


WAYS = {
    "identity": lambda target: identity(),
    "computes": lambda target: f"ok {attack_device()}",
    "print": lambda target: chatter(),
    "allocate": lambda target: allocate(float(target)),
    "privileges": lambda target: privileges(),
    "unmount": unmount,
    "remount": remount_writable,
    "processes": lambda target: processes(),
    "plant": plant,
    "list": listing,
    "inject": lambda target: inject(),
    "connect": connect,
    "fork": lambda target: fork_bomb(int(target or 64)),
    "memory": lambda target: memory_hog(float(target)),
    "device": map_device,
    "spin": lambda target: spin(),
    "signals": lambda target: end_the_group(),
    "shared": lambda target: shared_memory(float(target)),
    "memfd": lambda target: memfd_memory(float(target)),
    "threads": lambda target: many_threads(int(target)),
    "sleep": lambda target: sleep_long(float(target)),
    "socket": open_socket,
    "flood": lambda target: flood(float(target)),
    "orphan": orphan,
    "answer": lambda target: "x" * int(float(target) * 2**20),
}


class Escape(Attack):
    """Tries ``ways`` (``name:target`` each) in its sealed process: in ``run`` (or in ``prepare`` when
    ``when=prepare``); the table ``escape`` says what each achieved."""

    name = "escape"
    needs_adversary = False

    def __init__(self, ways: tuple[str, ...] | list[str] = (), when: str = "run"):
        self.ways, self.when = list(ways), when

    def attempt(self) -> pd.DataFrame:
        rows = []
        for way in self.ways:
            name, _, target = way.partition(":")
            rows.append((way, WAYS[name](target)))
        return pd.DataFrame(rows, columns=["way", "outcome"])

    def prepare(self, context):
        return self.attempt() if self.when == "prepare" else None

    def run(self, view):
        return self.attempt()

    def evaluate(self, findings, truth, view):
        return Findings(tables={"escape": findings}, summary={"escape_ways": len(findings)})
