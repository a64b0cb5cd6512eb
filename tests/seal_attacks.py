"""Attacks written to peek at the truth, for tests/test_seal.py: each way in (issue 35) returns what it
found, a fingerprint of the honest nodes' private data (or the seed of a data stream), or nan.

Not a test module: the sealed attack process imports it to unpickle the attack.
"""

import gc
import glob
import math
import os
import sys
from pathlib import Path

import pandas as pd

from decpriv.adversary.behaviour import Behaviour
from decpriv.attacks.base import Attack
from decpriv.report.findings import Findings
from decpriv.rng import Seeds

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
        return {"smuggled": found}

    def behaviour(self, context, plan):
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
            "own stream": float(view.seeds.seed("attack.peek")),
        }
        return pd.DataFrame({"way": list(rows), "found": list(rows.values())})

    def evaluate(self, findings, truth, view):
        table = findings.assign(truth=fingerprint(truth.local))
        return Findings(tables={"peek": table}, summary={"peek_declared": view.oracle_declared})
