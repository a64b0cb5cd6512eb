"""A single-node Slurm on this machine for tests: munge, slurmctld and slurmd on localhost, configured in a
temporary folder (``SLURM_CONF``), no accounting (as on a small cluster without slurmdbd). Installed from
Debian's packages (slurm-wlm, munge) when missing and the tests run as root; otherwise the tests that need
it are skipped with the reason."""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CONF = """ClusterName=decpriv
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={port}
SlurmdPort={port_d}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName={host} CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _installed() -> bool:
    return all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch"))


def unavailable() -> str | None:
    """Why no Slurm can be started here (None: it can), installing it first where that is allowed."""
    if _installed():
        return (
            None if os.geteuid() == 0 else "slurmctld and slurmd are started as root; run the tests as root"
        )
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "Slurm is not installed (apt-get install slurm-wlm munge, as root)"
    quiet = {"DEBIAN_FRONTEND": "noninteractive", **os.environ}
    got = subprocess.run(
        ["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"], env=quiet, capture_output=True
    )
    return None if got.returncode == 0 and _installed() else "apt-get install slurm-wlm munge failed"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(root: Path) -> dict[str, str]:
    """Start munge (unless running), slurmctld and slurmd; returns the environment that reaches them."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (root / sub).mkdir(exist_ok=True)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    port = _free_port()
    conf = CONF.format(
        host=socket.gethostname(),
        port=port,
        port_d=_free_port(),
        root=root,
        cpus=os.cpu_count(),
        memory=memory,
    )
    (root / "slurm.conf").write_text(conf)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "munged"], check=True)
    subprocess.run(["slurmctld", "-i"], env=env, check=True)
    subprocess.run(["slurmd"], env=env, check=True)
    deadline = time.monotonic() + 60
    while (
        "idle"
        not in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Slurm did not come up: {(root / 'slurmctld.log').read_text()[-2000:]}")
        time.sleep(0.5)
    return env


def stop(env: dict[str, str]) -> None:
    """Cancel what is left in the queue, then shut slurmctld and slurmd down and wait for them (by the pid
    files this cluster wrote); a daemon still there after 20 s is killed. Munge stays: other users of this
    machine may rely on it. A shutdown with jobs running would leave their slurmstepd behind."""
    subprocess.run(["scancel", "--partition", "debug"], env=env, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True)
        if queue.returncode != 0 or not queue.stdout.strip():
            break
        time.sleep(0.5)
    root = Path(env["SLURM_CONF"]).parent
    pids = [int(f.read_text()) for f in (root / "slurmctld.pid", root / "slurmd.pid") if f.is_file()]
    subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True)
    deadline = time.monotonic() + 20
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
