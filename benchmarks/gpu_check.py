"""The prepared GPU check (``make gpu-check``): each command below runs on the CPU and on CUDA, and the two
run folders' tables are held to the command's criterion; one row is printed as each command finishes, then
the table and a verdict per command (docs/simulation.md, "Same numbers on any device").

Criteria, one per command:

- **float64, rtol 1e-9**: CUDA's kernels split sums and matrix products otherwise than the CPU's and its
  exp/log round their last bit otherwise; every table moves by far less. Earned on the CPU by running the
  command with every sum and contraction reversed (benchmarks/reversed_order.py; tests/test_same_tables.py).
- **float32, rtol 1e-3 + atol 1e-4**: the same reordering at float32's 7 digits, grown over the rounds; an
  AUC moves by one rank flip, 1/(members x non-members), where two float32 scores cross.
- **seed spread**: an optimisation that amplifies its last bit by nature (a gradient inversion from a random
  start, an active attack that steers training): the device's largest difference in each column must stay
  below a stated fraction of the largest difference that another seed makes in that column, measured in the
  same check (seeds 1 and 2, on the CPU), never a loosened rtol.

- **a named column's own**: values that are rounding noise by construction (a converged solver's residual,
  an exact recovery's error) are held to staying below an absolute floor on both devices.

A row's measure is the largest relative difference (against a floor of atol/rtol) for a tolerance, the
largest ratio of the device's difference to the seed spread for the spread. The device's own columns
(``device``, ``device_name``, ``attack_device``, seconds) and the verdict sentence are not compared; the
attack's device, where run.json records it, is shown (cpu side / other side).

    make gpu-check                                     # on a machine with a GPU
    python3 -m benchmarks.gpu_check --dry              # each command, its criterion and estimated time
    python3 -m benchmarks.gpu_check dlg echo           # some commands only
    python3 -m benchmarks.gpu_check --against reversed # the whole check on the CPU, against reversed sums
"""

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Criterion:
    kind: str  # "exact" | "rtol" | "seed_spread"
    rtol: float = 0.0
    atol: float = 0.0
    fraction: float = 0.0
    why: str = ""

    def text(self) -> str:
        if self.kind == "rtol":
            return f"rtol {self.rtol:g} + atol {self.atol:g}"
        if self.kind == "seed_spread":
            return f"< {self.fraction:g} x seed spread"
        return "exact"


FLOAT64 = Criterion("rtol", 1e-9, 1e-12, why="float64: kernels sum in another order (last bit)")
FLOAT32 = Criterion("rtol", 1e-3, 1e-4, why="float32: kernels sum in another order at 7 digits")
CHAOTIC = Criterion(
    "seed_spread", fraction=0.1, why="the optimisation amplifies its last bit; judged against another seed"
)
# a local solver's optimality residual where it stopped (below protocol.tol, 1e-8): the rounding noise of
# a converged gradient, which any reordered sum changes in its leading digit (0.60e-9 against 0.86e-9 with
# the CPU's sums reversed); held to being as far below the tolerance on both devices
SOLVER_RESIDUAL = Criterion(
    "rtol", 0.0, 1e-8, why="a converged solver's residual is rounding noise below tol"
)
# iDLG recovers the digit exactly: its gradient-matching objective (5e-14 .. 8e-14 over seeds 0-2), relative
# L2 error (1.6e-7 .. 3.8e-7) and squared error (2e-15) are the rounding noise of an exact recovery, which
# the seed spread cannot judge (it is noise too); held to staying that small on both devices (PSNR is
# capped at 100 dB)
RECOVERY_OBJECTIVE = Criterion("rtol", 0.0, 1e-10, why="an exact recovery's objective is rounding noise")
RECOVERY_ERROR = Criterion("rtol", 0.0, 1e-5, why="an exact recovery's error is rounding noise")
RECOVERY_MSE = Criterion("rtol", 0.0, 1e-12, why="an exact recovery's squared error is rounding noise")
EXACT_RECOVERY = tuple(
    (f"{table}.{prefix}{column}", criterion)
    for column, criterion in (
        ("objective", RECOVERY_OBJECTIVE),
        ("l2_error", RECOVERY_ERROR),
        ("mse", RECOVERY_MSE),
    )
    for table, prefix in (("attack", ""), ("summary", "attack_"))
)
SPREAD_SEEDS = (1, 2)  # the seeds that measure a chaotic command's seed-to-seed spread (seed 0 is the run)


@dataclass(frozen=True)
class Command:
    overrides: tuple[str, ...]
    criterion: Criterion
    estimate_s: float  # one run, one thread of the development machine, start-up excluded (docs/speed.md)
    shortened: str = ""  # what the check cuts from the command's size, so that it fits its five minutes
    columns: tuple[tuple[str, Criterion], ...] = ()  # ("table.column", its own criterion), where it differs

    @property
    def runs(self) -> int:
        """Runs it takes: the CPU, the device, and the spread's seeds for a chaotic command."""
        return 2 + (len(SPREAD_SEEDS) if self.criterion.kind == "seed_spread" else 0)


F64 = "protocol.dtype=float64"
# every protocol, every attack family, an audit, each accountant
COMMANDS: dict[str, Command] = {
    "default": Command((), FLOAT32, 3.5),
    "dsgd_f64": Command((F64,), FLOAT64, 3.5),
    "gossip": Command(("protocol=gossip", F64, "~attack"), FLOAT64, 0.4),
    "knowledge_matrix": Command(("attack=knowledge_matrix",), FLOAT64, 0.9),
    "fedavg": Command(("protocol=fedavg", F64, "~attack"), FLOAT64, 3.0),
    "dlg": Command(("attack=dlg", "attack.iterations=40"), CHAOTIC, 3.4, "attack.iterations 40"),
    "idlg": Command(
        ("attack=idlg", "attack.iterations=40"), CHAOTIC, 3.4, "attack.iterations 40", EXACT_RECOVERY
    ),
    "inverting_gradients": Command(
        ("attack=inverting_gradients", "attack.iterations=40"), CHAOTIC, 4.0, "attack.iterations 40"
    ),
    "pdmm_diffgrad": Command(
        ("protocol=pdmm", "attack=diffgrad", "protocol.rounds=12"), FLOAT64, 1.0, "protocol.rounds 12"
    ),
    "admm_leak": Command(
        ("protocol=admm", "attack=pdmm_leak", "protocol.rounds=12"), FLOAT64, 1.3, "protocol.rounds 12"
    ),
    "pdmm_centralized": Command(
        ("protocol=pdmm_centralized", "topology=star", "~attack", "protocol.rounds=5"),
        FLOAT64,
        0.7,
        "protocol.rounds 5",
        columns=(("history.local_residual", SOLVER_RESIDUAL),),
    ),
    "echo": Command(("attack=echo", F64), CHAOTIC, 4.0),
    "state_override": Command(("attack=state_override", F64), FLOAT64, 1.6),
    "discovery": Command(("attack=neighbour_discovery", F64), FLOAT64, 2.1),
    "gradient_recovery": Command(
        ("attack=gradient_recovery", F64, "attack.iterations=40"), FLOAT64, 3.4, "attack.iterations 40"
    ),
    "secure_aggregation": Command(("defense=secure_aggregation", F64, "~attack"), FLOAT64, 3.5),
    "decor_secldp": Command(("defense=decor", "accountant=secldp", F64, "~attack"), FLOAT64, 6.4),
    "muffliato_network_dp": Command(("experiment=muffliato_sgd", F64), FLOAT64, 8.8),
    "random_walk": Command(("experiment=random_walk_privacy",), FLOAT32, 1.1),
    "dpsgd_rdp": Command(("experiment=dpsgd_digits", F64, "protocol.rounds=20"), FLOAT64, 0.6, "rounds 20"),
    "dpsgd_audit": Command(
        ("experiment=dpsgd_digits_audit", F64, "attack.trials=40000", "attack.fit_trials=10000"),
        FLOAT64,
        15.0,
        "attack.trials 40000, fit_trials 10000 (of 200000 and 50000)",
    ),
    "cnn": Command(("model=cnn", "protocol.rounds=10", "~attack"), FLOAT32, 5.0, "protocol.rounds 10"),
}


def own_columns(column: str) -> bool:
    """Columns not compared: those that name the machine or time it, which differ between any two
    devices, and the verdict sentence, which restates compared numbers in words."""
    return column in ("device", "device_name", "attack_device", "verdict") or "seconds" in column


def row_by_row(a: str, b: str) -> list:
    """Every table two run folders share, compared row by row in order (``diff_paths`` pairs rows by their
    keys instead): another seed may attack another victim, and its row is still the same metric."""
    from decpriv.report.diff import compare_tables
    from decpriv.report.run_folder import read_table

    found = []
    for path in sorted(Path(a).glob("*.csv")):
        other = Path(b) / path.name
        if other.is_file():
            found.append(compare_tables(path.stem, read_table(path), read_table(other), [], 0.0, 0.0))
    return found


# --- the comparator ------------------------------------------------------------------------------------


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def changed_columns(diffs):
    """From ``diff_paths(..., rtol=0)``: (``table.column``, a, b) for every compared column with a changed
    cell (a and b float arrays, nan where a cell is not a number), and what differs otherwise (rows or
    columns only one side has)."""
    found, structural = [], []
    for table in diffs:
        if not table.changed.empty:  # empty and without columns where only one side has the table
            for column, rows in table.changed.groupby("column", sort=False):
                if not own_columns(column):
                    a, b = rows["a"].map(_number).to_numpy(float), rows["b"].map(_number).to_numpy(float)
                    found.append((f"{table.name}.{column}", a, b))
        if len(table.added) + len(table.removed):
            structural.append(f"{table.name}: rows added/removed")
        structural += [
            f"{table.name}.{c}: one side only" for c in table.added_columns + table.removed_columns
        ]
    return found, structural


def largest_gaps(diffs) -> dict[str, float]:
    """The largest absolute difference per ``table.column`` (inf where a cell is not a number or is
    infinite on one side only)."""
    gaps = {}
    for column, a, b in changed_columns(diffs)[0]:
        gap = np.where(a == b, 0.0, np.abs(a - b))
        gaps[column] = float(np.nan_to_num(gap, nan=math.inf).max())
    return gaps


def _column_verdict(criterion: Criterion, a, b, spread: float | None) -> tuple[bool, float]:
    """(within the criterion, its measure): the relative difference (against a floor of atol/rtol, where a
    relative difference means nothing) or the fraction of the seed spread."""
    gap = np.nan_to_num(np.where(a == b, 0.0, np.abs(a - b)), nan=math.inf)
    if criterion.kind == "seed_spread":
        ratio = gap.max() / spread if spread else math.inf
        return ratio <= criterion.fraction, float(ratio)
    scale = np.maximum(np.abs(a), np.abs(b))
    floor = criterion.atol / criterion.rtol if criterion.rtol else 1e-300
    relative = float((gap / np.maximum(scale, floor)).max())
    within = criterion.kind == "rtol" and bool((gap <= criterion.atol + criterion.rtol * scale).all())
    return within, relative


def judge(criterion: Criterion, device_diffs, seed_diffs=(), columns: dict | None = None) -> dict:
    """The verdict on one command: ``device_diffs`` the CPU against the device, ``seed_diffs`` (a list of
    such lists) seed 0 against each spread seed, all from ``diff_paths(a, b, rtol=0, atol=0)``;
    ``columns`` the criteria of named columns (``table.column``) that differ from the command's.

    Returns ``passed``, ``measure`` (over the columns held to the command's criterion: the largest relative
    difference, or the largest ratio of the device's difference to the seed spread) and ``differing``
    (what fails, with its measure)."""
    columns = columns or {}
    spread: dict[str, float] = {}
    for diffs in seed_diffs:
        for column, gap in largest_gaps(diffs).items():
            spread[column] = max(spread.get(column, 0.0), gap)
    found, failing = changed_columns(device_diffs)
    measure = 0.0
    for column, a, b in found:
        held = columns.get(column, criterion)
        within, value = _column_verdict(held, a, b, spread.get(column))
        measure = max(measure, value) if held is criterion else measure
        if not within:
            failing.append(f"{column} ({value:.2g})")
    return {"passed": not failing, "measure": measure, "differing": ", ".join(failing[:4])}


# --- running -------------------------------------------------------------------------------------------


def run_side(name: str, side: str, seed: int, folder: str) -> dict:
    """One run of ``name`` on ``side`` (``cpu``, ``cuda``, ``cpu@N``: the CPU at N threads, or
    ``reversed``: the CPU inside :class:`~benchmarks.reversed_order.ReversedOrder`) with ``seed``, into
    ``folder``; its folder, seconds and the device its attack computed on (run.json's ``attack_device``
    where recorded)."""
    from contextlib import nullcontext

    from benchmarks.reversed_order import ReversedOrder
    from decpriv import api

    folder = Path(folder)
    device = "cuda" if side == "cuda" else "cpu"
    begin = time.perf_counter()
    with ReversedOrder() if side == "reversed" else nullcontext():
        api.run([*COMMANDS[name].overrides, f"device={device}", f"seed={seed}", "plots=false"], folder)
    meta = json.loads((folder / "run.json").read_text())
    seconds = round(time.perf_counter() - begin, 2)
    return {"folder": str(folder), "seconds": seconds, "attack_device": meta.get("attack_device")}


def verdict(name: str, runs: dict[tuple[int, int], dict]) -> dict:
    """The row of one command whose runs (keyed by side 0 or 1, and seed) have all finished."""
    from decpriv.report.diff import diff_paths

    command = COMMANDS[name]
    base, other = runs[(0, 0)], runs[(1, 0)]
    device_diffs = diff_paths(base["folder"], other["folder"], 0.0, 0.0)
    seeds = SPREAD_SEEDS if command.runs > 2 else ()
    seed_diffs = [row_by_row(base["folder"], runs[(0, s)]["folder"]) for s in seeds]
    found = judge(command.criterion, device_diffs, seed_diffs, dict(command.columns))
    return {
        "command": name,
        "criterion": command.criterion.text(),
        "seconds": (base["seconds"], other["seconds"]),
        "attack_device": "/".join(str(r.get("attack_device") or "-") for r in (base, other)),
        "folders": (base["folder"], other["folder"]),
        **found,
    }


def _start_worker(threads: int, root: str) -> None:
    """Each worker's share of the cores, set before torch starts its pools (the sealed attack process
    reads the same variables); its progress lines and warnings go to a log in ``root``, not between the
    rows."""
    log = open(Path(root) / f"worker-{os.getpid()}.log", "w")  # noqa: SIM115 (the worker's lifetime)
    os.dup2(log.fileno(), 2)
    sys.stderr = log
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = str(threads)
    import torch

    torch.set_num_threads(threads)


def tasks_of(names: list[str]) -> list[tuple[str, int, int]]:
    """Every run the check makes as (command, side 0 or 1, seed), the longest first (so the last to start
    are short)."""
    found = []
    for name in names:
        seeds = SPREAD_SEEDS if COMMANDS[name].runs > 2 else ()
        found += [(name, 0, 0), (name, 1, 0), *((name, 0, s) for s in seeds)]
    return sorted(found, key=lambda task: -COMMANDS[task[0]].estimate_s)


def _folder(root: str, name: str, sides: tuple[str, str], index: int, seed: int) -> str:
    return str(Path(root) / name / f"{index}_{sides[index]}_seed{seed}")


def compare(name: str, root: str, sides: tuple[str, str] = ("cpu", "cuda")) -> dict:
    """One command's row, its runs one after the other in this process (tests/test_gpu.py)."""
    runs = {
        (i, s): run_side(name, sides[i], s, _folder(root, name, sides, i, s)) for _, i, s in tasks_of([name])
    }
    return verdict(name, runs)


def run_check(names: list[str], sides: tuple[str, str], workers: int, threads: int, root: str):
    """Yield each command's row as soon as its runs are done."""
    pending = {name: COMMANDS[name].runs for name in names}
    runs: dict[str, dict] = {name: {} for name in names}
    context = get_context("spawn")
    counts = {side: int(side.split("@")[1]) if "@" in side else threads for side in sides}
    pools = {
        count: ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(count, root)
        )
        for count in set(counts.values())
    }  # a pool per thread count: a worker's sealed attack process keeps the count it started with
    with ExitStack() as stack:
        for pool in pools.values():
            stack.enter_context(pool)
        futures = {
            pools[counts[sides[i]]].submit(run_side, n, sides[i], s, _folder(root, n, sides, i, s)): (n, i, s)
            for n, i, s in tasks_of(names)
        }
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                name, index, seed = futures.pop(future)
                if name not in pending:
                    continue  # the command failed already
                try:
                    runs[name][(index, seed)] = future.result()
                except Exception as error:  # one command's failure is a row of the table, not the end
                    del pending[name]
                    yield {
                        "command": name,
                        "passed": False,
                        "differing": f"{sides[index]}: {type(error).__name__}: {error}",
                    }
                    continue
                pending[name] -= 1
                if not pending[name]:
                    del pending[name]
                    yield verdict(name, runs[name])


def format_row(row: dict) -> str:
    command = COMMANDS.get(row["command"])
    criterion = row.get("criterion") or (command.criterion.text() if command else "?")
    times = " ".join(f"{t:7.1f}" for t in row.get("seconds", (math.nan, math.nan)))
    verdict_text = "pass" if row.get("passed") else f"FAIL: {row.get('differing', '')}"
    return (
        f"{row['command']:21} {criterion:26} {times} {row.get('attack_device', '-'):>11} "
        f"{row.get('measure', math.nan):9.2e}  {verdict_text} ({criterion})"[:220]
    )


def header(sides: tuple[str, str]) -> str:
    times = " ".join(f"{side + ' s':>7}" for side in sides)
    return f"{'command':21} {'criterion':26} {times} {'attack dev':>11} {'measure':>9}  verdict"


def dry(names: list[str], workers: int, threads: int) -> None:
    """Each command with its criterion, why, what was shortened and its estimated time."""
    print(f"{'command':21} {'criterion':26} {'runs':>4} {'est s':>6}  why; shortened")
    total = 0.0
    for name in names:
        c = COMMANDS[name]
        total += c.runs * c.estimate_s
        shortened = f"; shortened: {c.shortened}" if c.shortened else ""
        print(
            f"{name:21} {c.criterion.text():26} {c.runs:4} {c.runs * c.estimate_s:6.1f}  {c.criterion.why}{shortened}"
        )
    print(
        f"estimated: {total:.0f} s of one core's runs (the device's runs counted as CPU runs), "
        f"{workers} workers x {threads} threads: about {total / workers + STARTUP_S:.0f} s"
    )


STARTUP_S = 20.0  # one worker's imports and its sealed-attack zygote


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks.gpu_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("names", nargs="*", help=f"commands (default all): {', '.join(COMMANDS)}")
    parser.add_argument("--dry", action="store_true", help="list the commands, criteria and estimates only")
    parser.add_argument("--against", default="cuda", help="cuda, reversed or cpu@N: compared to the cpu")
    parser.add_argument("--workers", type=int, default=8, help="commands at once (threads: cores / workers)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in COMMANDS]
    if unknown:
        parser.error(f"unknown command {unknown[0]!r}: choose among {', '.join(COMMANDS)}")
    if not re.fullmatch(r"cuda|reversed|cpu@[1-9][0-9]*", args.against):
        parser.error(f"--against {args.against}: give cuda, reversed or cpu@N (N threads)")
    names, sides = args.names or list(COMMANDS), ("cpu", args.against)
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    if args.dry:
        dry(names, args.workers, threads)
        return 0
    import torch

    if args.against == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible; run it on a machine with one (or --against reversed)")
        return 2
    where = {"cuda": "cuda", "reversed": "the CPU, sums reversed"}.get(args.against, args.against)
    where = torch.cuda.get_device_name(0) if where == "cuda" else where
    print(
        f"gpu-check: cpu against {where}, torch {torch.__version__}, {args.workers} workers x {threads} threads"
    )
    print(header(sides), flush=True)
    begin, rows, root = time.perf_counter(), [], tempfile.mkdtemp(prefix="decpriv-gpu-check-")
    for row in run_check(names, sides, args.workers, threads, root):
        rows.append(row)
        print(format_row(row), flush=True)
    print(f"\n{len(rows)} commands in {time.perf_counter() - begin:.0f} s (run folders and logs: {root})")
    print(header(sides))
    for row in sorted(rows, key=lambda r: list(COMMANDS).index(r["command"])):
        print(format_row(row))
    failed = [r["command"] for r in rows if not r.get("passed")]
    print(
        f"verdict: {'every command passes its criterion' if not failed else 'FAILED: ' + ', '.join(failed)}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
