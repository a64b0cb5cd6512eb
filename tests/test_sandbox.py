"""The attack's sandbox, least privilege (issue 45): the sealed process cannot undo its confinement, reach
the user's terminal, network, sweep or later runs, and its resources are bounded; the device nodes it is
given work. Each payload (tests/sandbox_attacks.py) is shown to work where nothing confines it (the
control), then shown blocked in the sealed process.
"""

import contextlib
import json
import os
import pickle
import pty
import resource
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import sandbox_attacks
from conftest import DECPRIV, run_cli

from decpriv import api
from decpriv.data.datasets import cache_folder
from decpriv.errors import ConfigError
from decpriv.seal import sandbox, zygote
from decpriv.seal.process import Sealed

TESTS = Path(__file__).parent
sealed = pytest.mark.skipif(zygote.seal_kind() != "bubblewrap", reason="no bubblewrap here: the process seal")


@pytest.fixture
def escape_conf(tmp_path, monkeypatch):
    """``attack=escape`` as a user adds it: ./conf/attack/escape.yaml."""
    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "escape.yaml").write_text(
        "# escape: ways out of the sandbox (tests/sandbox_attacks.py)\n"
        "_target_: sandbox_attacks.Escape\nways: []\nwhen: run\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def overrides(*ways: str) -> list[str]:
    listed = ",".join(f"'{way}'" for way in ways)
    return ["attack=escape", "protocol.rounds=2", f"attack.ways=[{listed}]"]


def escape(folder: Path, *ways: str, more: tuple[str, ...] = ()) -> dict[str, str]:
    """What each way achieved in the sealed process of a run into ``folder``."""
    api.run([*overrides(*ways), *more], out_dir=folder)
    table = pd.read_csv(folder / "escape.csv", keep_default_na=False)
    return dict(zip(table.way, table.outcome, strict=True))


def status(folder: Path) -> str:
    return json.loads((folder / "run.json").read_text())["status"]


def in_namespaces(code: str) -> str | None:
    """What ``code`` prints run in its own user (as its root), mount and PID namespaces, the old seal's
    confinement; None where those cannot be made."""
    if shutil.which("unshare") is None:
        return None
    command = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    done = subprocess.run(
        [*command, sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


@sealed
def test_it_holds_no_privilege_and_cannot_undo_its_confinement(escape_conf):
    """No capability, no_new_privs, a seccomp filter; unmount and remount refused; nothing written; only
    its own processes. Control: in a user namespace of its own (the old seal) the same unmount works."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here to show the control in")
    assert in_namespaces("import sandbox_attacks as s; print(s.unmount('/proc'))") == "ok"
    planted = [escape_conf / "planted.py", Path(cache_folder("")) / "declarations.pickle.planted"]
    found = escape(
        escape_conf / "run",
        "privileges",
        "unmount:/proc",
        "unmount:/",
        "unmount:/tmp",
        "remount:/",
        "processes",
        "identity",
        "computes",
        *(f"plant:{path}" for path in planted),
    )
    fields = dict(pair.split("=") for pair in found["privileges"].split())
    assert {fields[c] for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"
    for way in ("unmount:/proc", "unmount:/", "unmount:/tmp", "remount:/"):
        assert found[way].startswith("refused") and "EPERM" in found[way], way
    count, *first = found["processes"].split(" ", 1)
    assert int(count) <= 4 and "bwrap" in first[0]  # its sandbox's init, the zygote, a warden, itself
    assert found[f"plant:{planted[1]}"].startswith("refused")  # the root is read-only over there
    for path in planted:  # a write into its private /tmp stays there
        assert not path.exists(), path
    # no password database over there, yet a user name and a compile cache in its own /tmp
    assert found["identity"] == "ok attack /tmp/torchinductor"
    assert status(escape_conf / "run") == "completed"
    meta = json.loads((escape_conf / "run" / "run.json").read_text())
    assert meta["seal"] == "bubblewrap" and meta["attack_device"] == "cpu"
    assert found["computes"] == "ok cpu"  # what the attack is told is where it computes: the record's


@sealed
def test_a_sweep_reaches_neither_the_users_terminal_nor_its_sweep_folder(escape_conf):
    """A sweep run in a pty, the user's terminal: in every job, TIOCSTI through every descriptor pushes
    nothing into the terminal's input, and the sweep folder (multirun.yaml, the ledger) is not there.
    Controls: the same payload in a process of that terminal does inject (the line is echoed); the
    sweep folder is there for this process."""
    pid, master = pty.fork()
    if pid == 0:
        sandbox_attacks.inject()
        os._exit(0)
    injects = sandbox_attacks.INJECTED.strip() in read_all(master, pid)
    sweep = escape_conf / "sweep"
    ways = overrides("inject", f"list:{sweep}")
    command = [str(DECPRIV), "run", "-m", *ways, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    pid, master = pty.fork()
    if pid == 0:
        os.execve(command[0], command, {**os.environ, "PYTHONPATH": str(TESTS)})
    shown = read_all(master, pid)
    assert "multirun.yaml" in sandbox_attacks.listing(str(sweep)), shown[-2000:]
    assert sandbox_attacks.INJECTED.strip() not in shown
    for job in ("0", "1"):
        outcome = dict(pd.read_csv(sweep / job / "escape.csv").values)
        assert outcome[f"list:{sweep}"] == "missing"
        assert "ok" not in outcome["inject"].split() and "/dev/tty ENXIO" in outcome["inject"]
    if not injects:
        pytest.skip("this kernel refuses TIOCSTI to this user: the terminal half had nothing to block")


def read_all(master: int, pid: int) -> str:
    """Everything the terminal showed until its process ended."""
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.waitpid(pid, 0)
    os.close(master)
    return shown.decode(errors="replace")


@sealed
def test_no_connection_leaves_the_sandbox(escape_conf):
    """A listener of the user's on the loopback gets nothing; control: from this process it does."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    heard: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                link, _ = listener.accept()
            except OSError:
                return
            with link:
                heard.append(link.recv(64))

    threading.Thread(target=serve, daemon=True).start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    assert sandbox_attacks.connect(address) == "ok"
    found = escape(escape_conf / "run", f"connect:{address}")
    listener.close()
    assert found[f"connect:{address}"].startswith("refused")
    assert heard == [b"private data\n"]  # the control's line only


@sealed
def test_signals_to_its_group_end_the_run_failed_in_one_sentence(escape_conf):
    """SIGKILL to every process it may signal and to its group reaches none of the pipeline's: the run
    fails, saying so, its folder failed (never running); the next run starts a new sandbox."""
    with pytest.raises(
        RuntimeError, match=r"^attack=escape: the sealed attack process ended during attack\.run"
    ):
        escape(escape_conf / "run", "signals")
    assert status(escape_conf / "run") == "failed"
    count, *first = escape(escape_conf / "again", "processes")["processes"].split(" ", 1)
    assert int(count) <= 4 and "bwrap" in first[0]  # a new sandbox: its init, the zygote, a warden, itself


@sealed
def test_processes_and_memory_are_bounded(escape_conf):
    """A fork bomb starts nothing, a 3 GiB allocation under sandbox.memory_gib=2 is refused; raising
    sandbox.processes lets processes start. Control: here both succeed."""
    assert sandbox_attacks.fork_bomb(2) == "2 started"
    assert sandbox_attacks.memory_hog(3).startswith("ok")  # reserved, never touched
    found = escape(escape_conf / "run", "fork:64", "memory:3", more=("sandbox.memory_gib=2",))
    assert found["fork:64"] == "0 started" and found["memory:3"].startswith("refused")
    allowed = escape(escape_conf / "more", "fork:8", more=("sandbox.processes=2",))
    assert allowed["fork:8"] == "8 started"


@sealed
def test_cpu_time_and_memory_are_bounded_and_said(escape_conf):
    """A limit met ends the run failed, naming the key to raise; run.json still says what sealed it."""
    with pytest.raises(RuntimeError, match=r"it used its CPU time \(sandbox\.cpu_seconds=1\); raise"):
        escape(escape_conf / "run", "spin", more=("sandbox.cpu_seconds=1",))
    meta = json.loads((escape_conf / "run" / "run.json").read_text())
    assert meta["status"] == "failed" and meta["seal"] == "bubblewrap" and meta["attack_device"] == "cpu"
    with pytest.raises(
        RuntimeError, match=r"can't allocate memory.*\(the attack process's memory limit, sandbox"
    ):
        escape(escape_conf / "again", "allocate:3", more=("sandbox.memory_gib=2",))


@sealed
def test_what_the_attack_prints_is_relayed_marked_and_inert(escape_conf, capsys):
    """Each line marked as the attack's, its escape sequences shown not obeyed, the last line kept."""
    escape(escape_conf / "run", "print")
    deadline = time.time() + 5
    out, err = capsys.readouterr()
    while "no newline" not in err and time.time() < deadline:  # the relay runs beside the pipeline
        time.sleep(0.05)
        more = capsys.readouterr()
        out, err = out + more.out, err + more.err
    assert "attack| attack says \\x1b[31mred\\x1b]0;TITLE\\x07\n" in out and "\x1b" not in out
    assert "attack| no newline\n" in err


@sealed
@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_bound_device_node_opens_read_write_and_maps(tmp_path, monkeypatch):
    """The GPU's way in, on the CPU: a character device (here /dev/zero's numbers) bound as a GPU node
    opens read-write and maps in the sealed process; without the GPU's binds it is not there."""
    node = tmp_path / "nvidia-test0"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    monkeypatch.setattr(sandbox, "GPU_NODES", (str(node),))
    attack = pickle.dumps(sandbox_attacks.Escape([f"device:{node}"], when="prepare"))

    def outcome(device: str) -> str:
        with pytest.warns(UserWarning) if device == "cuda" else contextlib.nullcontext():  # no CUDA: said
            session = Sealed(attack, "escape", "sandbox_attacks", lambda name: 0, device=device)
        with session:
            return session.prepare(None).outcome.iloc[0]

    try:
        assert outcome("cuda") == "ok mapped"
        assert outcome("cpu") == "missing"
    finally:
        zygote.warm()  # back to the zygote without device nodes for the next test


def test_limits_are_refused_in_one_sentence():
    cfg, _ = api.compose_config(["sandbox.memory_gib=0"])
    with pytest.raises(ConfigError, match=r"^sandbox\.memory_gib=0: all memory the attack process touches"):
        from decpriv.config.validation import validate

        validate(cfg)
    with pytest.raises(ConfigError, match=r"sandbox\.cpu=1: the sandbox has no such limit; known keys"):
        sandbox.check({"cpu": 1})
    done = run_cli("run", "sandbox.mem=1")
    assert done.returncode == 2 and "(sandbox has the keys memory_gib, cpu_seconds," in done.stderr
    listed = run_cli("list", "sandbox").stdout
    assert "sandbox.memory_gib: 8.0  (float > 0: all memory the attack process touches, shared" in listed
    for key in ("threads: 1024", "output_kib: 4096", "answer_mib: 8192", "wall_seconds: 0.0", "processes: 0"):
        assert f"sandbox.{key}  (" in listed, key


def test_a_run_folder_holding_what_the_sandbox_reads_is_refused(tmp_path, monkeypatch):
    """Of a folder on the import path only its module files are bound, one by one: a run folder beside
    them is not bound (fine), one that holds them, or lies inside what is bound whole (decpriv), is
    refused in one sentence, from the command line before any folder exists."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "mine.py").write_text("")
    (tmp_path / "data").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    bound = sandbox.read_only_paths()
    assert str(tmp_path / "plugins" / "mine.py") in bound
    assert not {str(tmp_path / "plugins"), str(tmp_path / "data")} & set(bound)
    sandbox.refuse_visible((str(tmp_path / "plugins" / "run"),))  # beside the module: not bound
    with pytest.raises(ConfigError, match=f"^{tmp_path}/plugins and {tmp_path}/plugins/mine.py, which"):
        sandbox.refuse_visible((str(tmp_path / "plugins"),))
    decpriv_folder = str(Path(sandbox.__file__).resolve().parents[1])
    with pytest.raises(ConfigError, match=f"^{decpriv_folder}/run and {decpriv_folder}, which"):
        sandbox.refuse_visible((f"{decpriv_folder}/run",))
    if zygote.seal_kind() == "bubblewrap":  # from the command line: before any folder exists
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "plugins"))
        done = run_cli("run", "hydra.run.dir=plugins", cwd=tmp_path)
        assert done.returncode == 2 and "lie one inside the other" in done.stderr, done.stderr
        assert not (tmp_path / "plugins" / ".hydra").exists()


def test_the_process_seal_says_what_it_does_not_protect(escape_conf, monkeypatch):
    """Where bubblewrap cannot run: one line at the run's start, and run.json records the seal."""
    monkeypatch.setattr(zygote, "_kind", ["process"])
    try:
        with pytest.warns(UserWarning, match="process seal .* reach the network and this terminal"):
            found = escape(escape_conf / "run", "fork:2", "privileges")
        assert json.loads((escape_conf / "run" / "run.json").read_text())["seal"] == "process"
        from decpriv.report import headline
        from decpriv.report.document import run_document

        assert headline.PROCESS_SEAL_NOTE in run_document(escape_conf / "run").facts  # report and show say it
        assert found["fork:2"] == "0 started" or (not sandbox.filters() and os.geteuid() == 0)
        assert "Seccomp=2" in found["privileges"] or not sandbox.filters()
    finally:
        monkeypatch.undo()
        zygote.warm()  # back to this machine's seal for the next test


def test_a_process_allowance_counts_from_the_tasks_already_there(monkeypatch):
    """RLIMIT_NPROC counts every task (thread) of the user: sandbox.processes=2 with sandbox.threads=16 is
    the count now plus 18 (for a user that is not root; root is not bound by it, its warden counts), and
    without libseccomp no new one at all."""
    assert sandbox.users_tasks() >= threading.active_count()  # this process's threads, at least
    set_to = {}
    monkeypatch.setattr(sandbox.resource, "setrlimit", lambda kind, value: set_to.__setitem__(kind, value))
    monkeypatch.setattr(sandbox, "users_tasks", lambda: 7)
    sandbox.Limits(processes=2, threads=16).apply()
    assert set_to[sandbox.resource.RLIMIT_NPROC] == (25, 25)
    monkeypatch.setattr(sandbox, "filters", lambda: False)
    sandbox.no_new_processes()
    assert set_to[sandbox.resource.RLIMIT_NPROC] == (7, 7)


@sealed
def test_shared_memory_counts_against_the_memory_limit(escape_conf):
    """2 GiB of MAP_SHARED anonymous memory (not counted by RLIMIT_DATA) under sandbox.memory_gib=1.5:
    the run fails in one sentence naming the key; memfd files (no count reaches them) cannot be made.
    Control: here the same payloads hold their 2 GiB."""
    assert sandbox_attacks.shared_memory(2).startswith("ok")
    assert sandbox_attacks.memfd_memory(2).startswith("ok")
    sandbox_attacks.release()
    found = escape(escape_conf / "memfd", "memfd:2", "socket:UNIX")
    assert found == {"memfd:2": "refused EPERM", "socket:UNIX": "ok"}
    way = "shared:2"
    with pytest.raises(
        RuntimeError,
        match=r"GiB \(shared memory and its scratch included\), past sandbox\.memory_gib=1\.5; raise",
    ):
        escape(escape_conf / "run", way, more=("sandbox.memory_gib=1.5",))
    assert status(escape_conf / "run") == "failed"


@sealed
def test_threads_are_bounded(escape_conf):
    """200 threads under sandbox.threads=64: the run fails naming the key. Control: here all 200 start;
    under the default limit, in the sandbox too."""
    assert sandbox_attacks.many_threads(200) == "200 started"
    assert escape(escape_conf / "ok", "threads:200")["threads:200"] == "200 started"
    with pytest.raises(
        RuntimeError, match=r"it ran \d+ threads, past sandbox\.threads=64; raise sandbox\.threads"
    ):
        escape(escape_conf / "run", "threads:200", more=("sandbox.threads=64",))


@sealed
def test_sockets_other_than_local_ones_and_the_hosts_cgroups_are_out_of_reach(escape_conf):
    """AF_INET, AF_NETLINK, AF_PACKET and AF_VSOCK sockets refused, AF_UNIX allowed; /sys/fs/cgroup (other
    users' groups) not there. Control: here the same sockets open and the tree lists."""
    families = ("INET", "NETLINK", "UNIX")
    assert {f: sandbox_attacks.open_socket(f) for f in families} == dict.fromkeys(families, "ok")
    assert sandbox_attacks.listing("/sys/fs/cgroup") not in ("missing", "empty")
    found = escape(
        escape_conf / "run", *(f"socket:{f}" for f in (*families, "PACKET", "VSOCK")), "list:/sys/fs/cgroup"
    )
    refused = "refused EAFNOSUPPORT"
    assert found == {
        "socket:INET": refused, "socket:NETLINK": refused, "socket:UNIX": "ok", "socket:PACKET": refused,
        "socket:VSOCK": refused, "list:/sys/fs/cgroup": "missing",
    }  # fmt: skip


@sealed
def test_output_past_its_limit_is_dropped_and_said(escape_conf, capfd):
    """1 MiB of newlines (9 MiB once each line is marked) under sandbox.output_kib=64: at most 64 KiB
    relayed, then one line saying how much was dropped. Control: here the payload prints its 1 MiB."""
    sandbox_attacks.flood(1)
    assert capfd.readouterr().out == "\n" * 2**20
    escape(escape_conf / "run", "flood:1", more=("sandbox.output_kib=64",))
    out = capfd.readouterr().out
    marked = [line for line in out.splitlines(keepends=True) if line.startswith("attack| ")]
    notes = [line for line in marked if "bytes of output dropped" in line]
    assert len(notes) == 1 and notes[0].endswith(", past sandbox.output_kib=64]\n")
    assert sum(len(line) for line in marked if line not in notes) <= 64 * 1024
    dropped = int(notes[0].split("[")[1].split()[0])
    assert dropped + sum(len(line) for line in marked if line not in notes) == 9 * 2**20


@sealed
def test_an_attack_that_sleeps_ends_at_the_wall_clock_limit(escape_conf):
    """A 30 s sleep under sandbox.wall_seconds=2 fails the run in one sentence within seconds. Control:
    here the sleep returns."""
    assert sandbox_attacks.sleep_long(0.5) == "woke"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"past sandbox\.wall_seconds=2 \(in attack\.run\); raise"):
        escape(escape_conf / "run", "sleep:30", more=("sandbox.wall_seconds=2",))
    assert time.monotonic() - started < 25 and status(escape_conf / "run") == "failed"


@sealed
def test_an_answer_past_its_limit_is_refused_as_it_streams(escape_conf):
    """A 3 MiB answer under sandbox.answer_mib=1 fails the run naming the key; under 4 it comes back."""
    assert (
        len(escape(escape_conf / "ok", "answer:3", more=("sandbox.answer_mib=4",))["answer:3"]) == 3 * 2**20
    )
    with pytest.raises(RuntimeError, match=r"its answer to attack\.run passed sandbox\.answer_mib=1 \("):
        escape(escape_conf / "run", "answer:3", more=("sandbox.answer_mib=1",))


def test_a_process_allowance_past_the_machines_is_refused_in_one_sentence():
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no process limit on this machine")
    with pytest.raises(ConfigError, match=rf"^sandbox\.processes={hard}: .*more than this machine lets"):
        sandbox.check({"processes": hard})


def test_scratch_folders_a_killed_run_left_are_removed_at_the_next_start(tmp_path, monkeypatch):
    """A session's folder under the process seal is named after its process: one whose process is gone
    is removed when the next zygote starts, one whose process lives stays."""
    monkeypatch.setattr(zygote.tempfile, "gettempdir", lambda: str(tmp_path))
    proc = subprocess.Popen(["true"])
    proc.wait()  # a PID that was, and is no more
    left = tmp_path / f"decpriv-attack-{proc.pid}-abc"
    alive = tmp_path / f"decpriv-attack-{os.getpid()}-def"
    for folder in (left, alive):
        folder.mkdir()
        (folder / "file").write_text("x")
    zygote.remove_stale_scratch()
    assert not left.exists() and alive.exists()


@sealed
def test_an_attack_that_kills_its_warden_dies_with_it(escape_conf, tmp_path):
    """The warden (which ends the session's tree) is of the same user: killing it, the attack dies too
    and the run fails. Control: a process whose parent it kills outlives it here."""
    marker = tmp_path / "outlived"
    parent = os.fork()
    if parent == 0:  # the control: a parent, and a child that kills it
        if os.fork() == 0:
            with contextlib.suppress(BaseException):
                sandbox_attacks.orphan(str(marker))
            os._exit(0)
        time.sleep(30)
        os._exit(0)
    os.waitpid(parent, 0)
    deadline = time.time() + 10
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert marker.read_text() == "outlived"
    with pytest.raises(
        RuntimeError, match=r"^attack=escape: the sealed attack process ended during attack\.run"
    ):
        escape(escape_conf / "run", "orphan:/tmp/outlived")
    assert status(escape_conf / "run") == "failed"
