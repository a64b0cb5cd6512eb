"""Does CUDA start inside the attack's sandbox? A probe for a GPU machine (`make gpu-sandbox`).

Runs ``torch.zeros(1, device="cuda")`` under the sealed process's bubblewrap command line with the GPU's
binds (decpriv/seal/sandbox.py), then, where that fails, under the same command with one restriction lifted
at a time, so that one run on a GPU names the restriction CUDA needs. Prints a line per variant:
``ok`` or the error. Exit status 0 when the sandbox itself starts CUDA.
"""

import os
import subprocess
import sys

from decpriv.seal import sandbox

PROBE = (
    "import torch, warnings\n"
    "warnings.simplefilter('error')\n"
    "print(torch.zeros(1, device='cuda').device, torch.cuda.get_device_name(0))\n"
)
# each variant: (name, what it replaces in the command line)
VARIANTS = {
    "the sandbox": {},
    "all of /dev": {"--dev": ["--dev-bind", "/dev", "/dev"]},
    "all of /sys": {"extra": ["--ro-bind", "/sys", "/sys"]},
    "the host's PID namespace": {"--unshare-all": ["--unshare-user", "--unshare-net", "--unshare-ipc"]},
    "the host's network": {"--unshare-all": ["--unshare-user", "--unshare-pid", "--unshare-ipc"]},
    "no seccomp filter": {"--seccomp": []},
}


def command(changes: dict, fd: int) -> list[str]:
    """The sandbox's command line with ``changes`` made, running the probe."""
    changes = dict(changes)  # its "extra" is taken at the first remount
    base = sandbox.command(sandbox.bwrap(), True, fd)
    line: list[str] = []
    skip = 0
    for arg in base:
        if skip:
            skip -= 1
            continue
        if arg == "--dev" and "--dev" in changes:
            line += changes["--dev"]
            skip = 1
        elif arg == "--unshare-all" and "--unshare-all" in changes:
            line += changes["--unshare-all"]
        elif arg == "--seccomp" and "--seccomp" in changes:
            skip = 1
        elif arg == "--remount-ro" and "extra" in changes:  # before the first remount only
            line += [*changes.pop("extra"), arg]
        else:
            line.append(arg)
    return [*line, sys.executable, "-c", PROBE]


def main() -> int:
    if sandbox.bwrap() is None or not sandbox.filters():
        print("no bubblewrap or libseccomp here: the attack runs under the process seal")
        return 1
    first = None
    for name, changes in VARIANTS.items():
        fd = sandbox.seccomp_file()
        env = {
            k: os.environ[k] for k in ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH") if k in os.environ
        }
        done = subprocess.run(
            command(changes, fd), capture_output=True, text=True, pass_fds=[fd], env=env, check=False
        )
        os.close(fd)
        said = done.stdout.strip() if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]
        print(f"{name:28s} {'ok' if done.returncode == 0 else 'fails'}: {said}", flush=True)
        first = done.returncode == 0 if first is None else first
        if first:
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
