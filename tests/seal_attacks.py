"""Attacks written to peek at the truth, for tests/test_seal.py: each way in (issue 35) returns what it
found, a fingerprint of the honest nodes' private data (or the seed of a data stream), or nan.

Not a test module: the sealed attack process imports it to unpickle the attack.
"""

import contextlib
import gc
import glob
import math
import os
import pickle
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

from decpriv.adversary.behaviour import Behaviour
from decpriv.attacks.base import Attack
from decpriv.attacks.p2p.mia import MembershipInference
from decpriv.random.streams import Seeds
from decpriv.report.findings import Findings

SPY: dict[str, float] = {}  # what the behaviour found during the run, read by run() in the same process
TRUTH_TYPES = {"Truth", "Setup", "LocalData", "Simulation", "Dataset"}


def fingerprint(local) -> float:
    """The private data's fingerprint: the sum of every node's samples (honest ones included)."""
    return float(local.x.double().sum())


def held_data(obj) -> float:
    """The fingerprint of the private data an object of the pipeline holds, else nan."""
    kind = type(obj).__name__
    if kind == "LocalData":
        return fingerprint(obj)
    if kind in ("Truth", "Setup", "Simulation"):
        return fingerprint(obj.local)
    return math.nan


def first_found(objects) -> float:
    for obj in objects:
        with_data = held_data(obj) if type(obj).__name__ in TRUTH_TYPES else math.nan
        if not math.isnan(with_data):
            return with_data
    return math.nan


def by_frames() -> float:
    """Walk the callers' frames (the caller of attack.run held the Truth as a local)."""
    frame, seen = sys._getframe(1), []
    while frame is not None:
        seen.extend(frame.f_locals.values())
        frame = frame.f_back
    return first_found(seen)


def by_gc() -> float:
    return first_found(gc.get_objects())


def by_module_globals() -> float:
    """A helper outside decpriv/attacks: every module's globals, one level into objects."""
    seen = []
    for module in list(sys.modules.values()):
        for value in list(vars(module).values()) if hasattr(module, "__dict__") else ():
            seen.append(value)
            seen.extend(getattr(value, "__dict__", {}).values())
    return first_found(seen)


def by_seeds(seeds) -> float:
    """The root seed or a data stream's seed, which replay the split and the partition."""
    for attempt in (
        lambda: seeds.root,
        lambda: Seeds.seed(seeds, "partition"),
        lambda: seeds.seed("partition"),
        lambda: seeds._source("partition"),
        lambda: seeds._source.__closure__[1].cell_contents.root,
    ):
        try:
            return float(attempt())
        except Exception:
            continue
    return math.nan


def by_files() -> float:
    """The run folder's .hydra/config.yaml (it rebuilds the data), the config on the command line or in the
    environment, Hydra's own record of the run."""
    for pattern in (".hydra/config.yaml", "*/.hydra/config.yaml", "runs/*/*/.hydra/config.yaml"):
        for path in glob.glob(pattern):
            return float(Path(path).read_text().count("seed"))
    if any("seed=" in a for a in sys.argv) or any("seed=" in v for v in os.environ.values()):
        return 1.0
    try:
        from hydra.core.hydra_config import HydraConfig

        return float(len(HydraConfig.get().runtime.output_dir))
    except Exception:
        return math.nan


class Spy(Behaviour):
    """An active behaviour that reads the protocol's frame for ``sim`` (and sends honestly)."""

    def forge(self, round_, senders, observed, own):
        frame = sys._getframe(1)
        while frame is not None and "sim" not in frame.f_locals:
            frame = frame.f_back
        SPY["sim"] = fingerprint(frame.f_locals["sim"].local) if frame is not None else math.nan
        return None


class Peek(Attack):
    """Every way in at once; ``evaluate`` puts the truth's own fingerprint beside what each found."""

    name = "peek"
    active = True  # its behaviour runs inside the protocol's round
    oracle = True  # a truthy class attribute: grants nothing

    def __init__(self, oracle: bool = False):
        vars(self)["oracle"] = True  # and an instance one, whatever the config says
        self.stash = math.nan

    def prepare(self, context):
        """Runs beside the truth in the precheck: smuggle what it finds through the plan, the instance,
        the class and a module global."""
        found = max(by_gc(), by_frames(), key=lambda v: not math.isnan(v))
        self.stash = found
        type(self).smuggled = found
        SPY["prepare"] = found
        context.choices["smuggled"] = found  # the context itself (a mutable dict in it)
        return {"smuggled": found}

    def behaviour(self, context, plan):
        SPY["context"] = context.choices.get("smuggled", math.nan)
        return Spy()

    def run(self, view):
        smuggled = [view.plan["smuggled"], self.stash, getattr(type(self), "smuggled", math.nan)]
        smuggled.append(SPY.get("prepare", math.nan))
        oracle = view.oracle
        rows = {
            "rebuild from seeds": by_seeds(view.seeds),
            "helper outside attacks/": by_module_globals(),
            "caller's frame": by_frames(),
            "garbage collector": by_gc(),
            "truthy attribute": fingerprint(oracle.local) if oracle is not None else math.nan,
            "run folder / config": by_files(),
            "sim via protocol frame": SPY.get("sim", math.nan),
            "smuggled from precheck": next((v for v in smuggled if not math.isnan(v)), math.nan),
            "stored in the context": SPY.get("context", math.nan),
            "own stream": float(view.seeds.seed("attack.peek")),
        }
        return pd.DataFrame({"way": list(rows), "found": list(rows.values())})

    def evaluate(self, findings, truth, view):
        table = findings.assign(truth=fingerprint(truth.local))
        return Findings(tables={"peek": table}, summary={"peek_declared": view.oracle_declared})


# --- issue 39: ways that cross back from the sealed process, reach the operating system, or outlive it


def steal(marker: str) -> str:
    """Runs wherever it is unpickled or constructed: writes there the fingerprint of the private data it
    finds (in the pipeline's process, the Truth's), so a test can tell whether it ever ran there."""
    found = max(by_gc(), by_frames(), key=lambda v: not math.isnan(v))
    if not math.isnan(found):
        Path(marker).write_text(repr(found))
    return marker


def patch_scorer(marker: str) -> None:
    """The membership scorer, replaced where this runs: every view would then read AUC 0.99."""
    import decpriv.attacks.p2p.mia as mia

    mia.view_summary = lambda scored, view, prefix: {f"{prefix}_{view}_auc": 0.99}
    steal(marker)


class Payload:
    """An object whose unpickling calls ``steal`` in the process that unpickles it."""

    def __init__(self, marker: str, call=steal):
        self.marker, self.call = marker, call

    def __reduce__(self):
        return (self.call, (self.marker,))


class HostileWarning(UserWarning):
    """A warning category whose constructor steals (it is built where the warning is raised again)."""

    def __init__(self, marker: str):
        super().__init__(steal(marker))


class HostileError(Exception):
    """An error whose unpickling steals."""

    def __reduce__(self):
        return (steal, self.args)


class Liar(torch.Tensor):
    """A tensor that answers every torch function with True (``torch.equal(mine, truth)`` included)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True


def send_raw(message) -> None:
    """Bypass the sealed process's own encoding: write ``message`` pickled, as is, on the answer stream."""
    frame = sys._getframe(1)
    while "reply" not in frame.f_locals:
        frame = frame.f_back
    frame.f_locals["reply"].write(pickle.dumps(message))
    frame.f_locals["reply"].flush()


def read_memory(pid: int, address: int, size: int) -> str:
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(address)
            return mem.read(size).hex()
    except OSError:
        return ""


def fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return targets


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def leave_daemon(heartbeat: str, summary: str) -> None:
    """A detached grandchild (its own session) that beats for 4 s and rewrites summary.csv after 1 s."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            begin = time.time()
            while time.time() - begin < 4:
                with contextlib.suppress(OSError):
                    Path(heartbeat).write_text(str(time.time()))
                if time.time() - begin > 1:
                    with contextlib.suppress(OSError):
                        Path(summary).write_text("status,test_accuracy\ncompleted,1.0\n")
                time.sleep(0.05)
        os._exit(0)


class Hostile(Attack):
    """One way out of the seal, chosen by ``way``; ``evaluate`` reports what reached the pipeline."""

    name = "hostile"
    needs_adversary = False

    def __init__(
        self,
        way: str = "",
        marker: str = "",
        pipeline: int = 0,
        address: int = 0,
        size: int = 0,
        project: str = "",
        heartbeat: str = "",
        summary: str = "",
    ):
        self.way, self.marker, self.pipeline, self.address, self.size = way, marker, pipeline, address, size
        self.project, self.heartbeat, self.summary = project, heartbeat, summary

    def run(self, view):
        if self.way == "raw result":
            send_raw(("done", Payload(self.marker), []))
        if self.way == "result":
            return Payload(self.marker)
        if self.way == "warning":
            warnings.warn(self.marker, HostileWarning, stacklevel=1)
        if self.way == "error":
            raise HostileError(self.marker)
        if self.way == "tensor subclass":
            return torch.zeros(3).as_subclass(Liar)
        if self.way == "daemon":
            leave_daemon(self.heartbeat, self.summary)
        if self.way == "collector":
            found = f"{gc.isenabled()} {gc.get_freeze_count()}"
            return pd.DataFrame({"way": [self.way], "found": [found]})
        return self.look() if self.way == "look" else pd.DataFrame({"way": [self.way], "found": [""]})

    def look(self) -> pd.DataFrame:
        """What the operating system shows of the pipeline, its run folder and the data cache."""
        me = os.getpid()
        with contextlib.suppress(OSError):  # code planted for the pipeline's next import
            Path(self.project, "planted.py").write_text("import os\n")
        rows = {
            "cmdline": read_text(f"/proc/{self.pipeline}/cmdline"),
            "fds": "\n".join(fd_targets(self.pipeline)),
            "memory": read_memory(self.pipeline, self.address, self.size),
            "processes": str(sum(1 for p in glob.glob("/proc/[0-9]*") if int(p[6:]) != me)),
            "run files": "\n".join(glob.glob(f"{self.project}/**/run.json", recursive=True)),
            "cache": "\n".join(glob.glob(os.path.expanduser("~/.cache/decpriv/*"))),
        }
        return pd.DataFrame({"way": list(rows), "found": list(rows.values())})

    def evaluate(self, findings, truth, view):
        summary = {"findings_type": type(findings).__name__}
        if isinstance(findings, torch.Tensor):
            summary["equal_to_truth"] = bool(torch.equal(findings, torch.ones(3)))
        tables = {"hostile": findings} if isinstance(findings, pd.DataFrame) else {}
        return Findings(tables=tables, summary=summary)


class HostileForger(Hostile):
    """An active attack whose forgery, sent raw, unpickles into ``steal``."""

    active = True

    def behaviour(self, context, plan):
        return RawForgery(self.marker)


class RawForgery(Behaviour):
    def __init__(self, marker: str):
        self.marker = marker

    def forge(self, round_, senders, observed, own):
        send_raw(("done", Payload(self.marker), []))
        return None


class HostileMembership(MembershipInference):
    """decpriv's own membership attack, its findings wrapped so that their unpickling patches the scorer."""

    def __init__(self, marker: str = "", **options):
        super().__init__(**options)
        self.marker = marker

    def run(self, view):
        super().run(view)
        send_raw(("done", Payload(self.marker, patch_scorer), []))


class Lurker(Hostile):
    """Code the pipeline might run beside the data before the attack phase: a property it reads for its
    refusals, and the pickling of the attack for its sealed process."""

    @property
    def active(self):
        steal(self.marker)
        return False

    def __getstate__(self):
        return {**vars(self), "stash": by_gc()}

    def run(self, view):
        return pd.DataFrame({"way": ["pickling"], "found": [str(getattr(self, "stash", math.nan))]})
