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

The device's own columns (``device``, ``device_name``, ``attack_device``, seconds) are not compared; the
attack's device, where run.json records it, is shown.

    make gpu-check                                     # on a machine with a GPU
    python3 -m benchmarks.gpu_check --dry              # each command, its criterion and estimated time
    python3 -m benchmarks.gpu_check dlg echo           # some commands only
    python3 -m benchmarks.gpu_check --against reversed # the whole check on the CPU, against reversed sums
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path


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
EXACT = Criterion("exact", why="integer tables")
SPREAD_SEEDS = (1, 2)  # the seeds that measure a chaotic command's seed-to-seed spread (seed 0 is the run)


@dataclass(frozen=True)
class Command:
    overrides: tuple[str, ...]
    criterion: Criterion
    estimate_s: float  # one run, one thread of the development machine, start-up excluded (docs/speed.md)
    shortened: str = ""  # what the check cuts from the command's size, so that it fits its five minutes

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
    "idlg": Command(("attack=idlg", "attack.iterations=40"), CHAOTIC, 3.4, "attack.iterations 40"),
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
    "dpsgd_audit": Command(("experiment=dpsgd_digits_audit", F64), FLOAT64, 60.0),
    "cnn": Command(("model=cnn", "protocol.rounds=10", "~attack"), FLOAT32, 5.0, "protocol.rounds 10"),
}
SIDES = ("cpu", "cuda", "reversed")  # reversed: the CPU with every sum reversed (benchmarks/reversed_order)


def own_columns(column: str) -> bool:
    """Columns that name the machine or time it, which differ between any two devices."""
    return column in ("device", "device_name", "attack_device") or "seconds" in column


# --- the comparator ------------------------------------------------------------------------------------


def cell_changes(diffs) -> tuple[dict[str, float], list[str]]:
    """From ``diff_paths(..., rtol=0)``: the largest absolute difference per ``table.column`` among the
    numbers, and what differs otherwise (text, rows or columns only one side has)."""
    largest: dict[str, float] = {}
    other: list[str] = []
    for table in diffs:
        if not table.changed.empty:  # empty and without columns where only one side has the table
            for column, rows in table.changed.groupby("column", sort=False):
                if own_columns(column):
                    continue
                a = rows["a"].map(_number)
                b = rows["b"].map(_number)
                if a.isna().any() or b.isna().any():
                    other.append(f"{table.name}.{column} (not a number)")
                    continue
                # inf on one side only: a difference no tolerance covers
                gap = (a - b).abs().where(a != b, 0.0).fillna(math.inf)
                largest[f"{table.name}.{column}"] = float(gap.max())
        if len(table.added) + len(table.removed):
            other.append(f"{table.name}: rows added/removed")
        other += [f"{table.name}.{c}: one side only" for c in table.added_columns + table.removed_columns]
    return largest, other


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _within_rtol(diffs, criterion: Criterion) -> tuple[float, list[str]]:
    worst, failing = 0.0, []
    for table in diffs:
        for _, row in table.changed.iterrows():
            if own_columns(row["column"]):
                continue
            a, b = _number(row["a"]), _number(row["b"])
            scale = max(abs(a), abs(b))
            rel = abs(a - b) / max(scale, 1e-300)
            worst = max(worst, rel) if not math.isnan(rel) else math.inf
            if not abs(a - b) <= criterion.atol + criterion.rtol * scale:
                failing.append(f"{table.name}.{row['column']}")
    return worst, list(dict.fromkeys(failing))


def judge(criterion: Criterion, device_diffs, seed_diffs=()) -> dict:
    """The verdict on one command: ``device_diffs`` the CPU against the device, ``seed_diffs`` (a list of
    such lists) seed 0 against each spread seed, all from ``diff_paths(a, b, rtol=0, atol=0)``.

    Returns ``passed``, ``measure`` (the largest relative difference, or for the seed spread the largest
    ratio device difference / seed spread over the columns) and ``differing`` (what fails)."""
    largest, structural = cell_changes(device_diffs)
    if criterion.kind == "exact":
        measure = max(_within_rtol(device_diffs, criterion)[0], 0.0)
        failing = structural + list(largest)
    elif criterion.kind == "rtol":
        measure, failing = _within_rtol(device_diffs, criterion)
        failing = structural + failing
    else:
        spread: dict[str, float] = {}
        for diffs in seed_diffs:
            for column, gap in cell_changes(diffs)[0].items():
                spread[column] = max(spread.get(column, 0.0), gap)
        ratios = {c: gap / spread[c] if spread.get(c) else math.inf for c, gap in largest.items()}
        measure = max(ratios.values(), default=0.0)
        failing = structural + [
            f"{c} ({r:.2g} of the spread)" for c, r in ratios.items() if r > criterion.fraction
        ]
    return {"passed": not failing, "measure": measure, "differing": ", ".join(failing[:4])}


# --- running -------------------------------------------------------------------------------------------


def run_side(name: str, side: str, seed: int, root: str) -> dict:
    """One run of ``name`` on ``side`` (``cpu``, ``cuda``, or ``reversed``: the CPU inside
    :class:`~benchmarks.reversed_order.ReversedOrder`) with ``seed``, into ``root``; its folder, seconds
    and the device its attack computed on (run.json's ``attack_device`` where recorded)."""
    from contextlib import nullcontext

    from benchmarks.reversed_order import ReversedOrder
    from decpriv import api

    folder = Path(root) / name / f"{side}_seed{seed}"
    device = "cpu" if side == "reversed" else side
    begin = time.perf_counter()
    with ReversedOrder() if side == "reversed" else nullcontext():
        api.run([*COMMANDS[name].overrides, f"device={device}", f"seed={seed}", "plots=false"], folder)
    meta = json.loads((folder / "run.json").read_text())
    seconds = round(time.perf_counter() - begin, 2)
    return {"folder": str(folder), "seconds": seconds, "attack_device": meta.get("attack_device")}


def verdict(name: str, runs: dict[tuple[str, int], dict], sides: tuple[str, str]) -> dict:
    """The row of one command whose runs have all finished."""
    from decpriv.report.diff import diff_paths

    command = COMMANDS[name]
    base, other = runs[(sides[0], 0)], runs[(sides[1], 0)]
    device_diffs = diff_paths(base["folder"], other["folder"], 0.0, 0.0)
    seed_diffs = [diff_paths(base["folder"], runs[(sides[0], s)]["folder"], 0.0, 0.0) for s in SPREAD_SEEDS]
    found = judge(command.criterion, device_diffs, seed_diffs if command.runs > 2 else [])
    return {
        "command": name,
        "criterion": command.criterion.text(),
        f"{sides[0]}_s": base["seconds"],
        f"{sides[1]}_s": other["seconds"],
        "attack_device": "/".join(str(r.get("attack_device") or "-") for r in (base, other)),
        **found,
    }


def _start_worker(threads: int) -> None:
    """Each worker's share of the cores, set before torch starts its pools (the sealed attack process
    reads the same variables)."""
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = str(threads)
    import torch

    torch.set_num_threads(threads)


def tasks_of(names: list[str], sides: tuple[str, str]) -> list[tuple[str, str, int]]:
    """Every run the check makes, the longest first (so the last to start are short)."""
    found = []
    for name in names:
        seeds = SPREAD_SEEDS if COMMANDS[name].runs > 2 else ()
        found += [(name, sides[0], 0), (name, sides[1], 0), *((name, sides[0], s) for s in seeds)]
    return sorted(found, key=lambda task: -COMMANDS[task[0]].estimate_s)


def run_check(names: list[str], sides: tuple[str, str], workers: int, threads: int, root: str):
    """Yield each command's row as soon as its runs are done."""
    pending = {name: COMMANDS[name].runs for name in names}
    runs: dict[str, dict] = {name: {} for name in names}
    context = get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(threads,)
    ) as pool:
        futures = {
            pool.submit(run_side, n, side, seed, root): (n, side, seed)
            for n, side, seed in tasks_of(names, sides)
        }
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                name, side, seed = futures.pop(future)
                if name not in pending:
                    continue  # the command failed already
                try:
                    runs[name][(side, seed)] = future.result()
                except Exception as error:  # one command's failure is a row of the table, not the end
                    del pending[name]
                    yield {
                        "command": name,
                        "passed": False,
                        "differing": f"{side}: {type(error).__name__}: {error}",
                    }
                    continue
                pending[name] -= 1
                if not pending[name]:
                    del pending[name]
                    yield verdict(name, runs[name], sides)


def format_row(row: dict, sides: tuple[str, str]) -> str:
    command = COMMANDS.get(row["command"])
    criterion = row.get("criterion") or (command.criterion.text() if command else "?")
    times = " ".join(f"{row.get(f'{side}_s', math.nan):7.1f}" for side in sides)
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
    parser.add_argument("--against", choices=SIDES[1:], default="cuda", help="the side compared to the cpu")
    parser.add_argument("--workers", type=int, default=8, help="commands at once (threads: cores / workers)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in COMMANDS]
    if unknown:
        parser.error(f"unknown command {unknown[0]!r}: choose among {', '.join(COMMANDS)}")
    names, sides = args.names or list(COMMANDS), ("cpu", args.against)
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    if args.dry:
        dry(names, args.workers, threads)
        return 0
    import torch

    if args.against == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible; run it on a machine with one (or --against reversed)")
        return 2
    where = torch.cuda.get_device_name(0) if args.against == "cuda" else "the CPU, sums reversed"
    print(
        f"gpu-check: cpu against {where}, torch {torch.__version__}, {args.workers} workers x {threads} threads"
    )
    print(header(sides), flush=True)
    begin, rows = time.perf_counter(), []
    for row in run_check(names, sides, args.workers, threads, tempfile.mkdtemp(prefix="decpriv-gpu-check-")):
        rows.append(row)
        print(format_row(row, sides), flush=True)
    print(
        f"\n{len(rows)} commands in {time.perf_counter() - begin:.0f} s; the table in the order of COMMANDS:"
    )
    print(header(sides))
    for row in sorted(rows, key=lambda r: list(COMMANDS).index(r["command"])):
        print(format_row(row, sides))
    failed = [r["command"] for r in rows if not r.get("passed")]
    print(
        f"verdict: {'every command passes its criterion' if not failed else 'FAILED: ' + ', '.join(failed)}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
