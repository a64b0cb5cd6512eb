"""Start-up: what a command costs beyond its science, side by side in one process (issue 56).

Each round runs, one after another, with one BLAS/OpenMP thread:

1. ``python -c "import torch"``: what every command pays first.
2. The knowledge matrix at n = 1000 (``bench_end_to_end``'s command: gossip over ER(n, 2 ln n / n), 2%
   attackers, T = 20): the whole process against the torch import plus the phases run.json records
   (build, simulate, attack, evaluate, write): the science. Goal: whole <= 1.5x.
3. The default run, ``decpriv run`` (pictures on), and with ``plots=false``: whole against the torch
   import. Goal: <= 2x with pictures.

Rounds interleave the commands, so a load spike on the shared machine hits every row of a round; the
table gives medians over rounds (min-max beside them) and the ratios of the medians. Beside the wall
times, the CPU seconds of each command's own process against the torch import's (the zygote, started
under bubblewrap, is not reaped through it and is not counted): on an overloaded machine, where a
command's two interpreters wait for the cores, the CPU ratio still says how much work the pipeline's
process does beyond the import; "own CPU" is the command's process alone, which reports it at exit
(every command runs the console script's code through ``python -c``, so that a checkout named by
``--before`` runs the same way). ``--before DIR`` runs each decpriv command a second time from another checkout of decpriv (``git archive <commit> | tar -x -C
DIR``) in the same rounds: before and after, side by side. ``python -m benchmarks.bench_startup
[--rounds R] [--before DIR]``; ``make bench`` runs it with 3 rounds.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_end_to_end import knowledge_overrides

THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# the console script's own code, which a user's ``decpriv`` runs, and at exit the CPU seconds of this
# process alone (not the zygote nor any child) into the file named by DECPRIV_BENCH_CPU
ENTRY = (
    "import atexit, os, resource, sys; from pathlib import Path; "
    "atexit.register(lambda: Path(os.environ['DECPRIV_BENCH_CPU']).write_text("
    "str(sum(resource.getrusage(resource.RUSAGE_SELF)[:2])))); "
    "from decpriv.cli import entry; sys.argv[0] = 'decpriv'; entry()"
)
N = 1000


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a command: its process and the children it reaped."""
    begin, cpu = time.perf_counter(), cpu_of_children()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - begin, cpu_of_children() - cpu


def decpriv_run(source: str | None, overrides: list[str], folder: Path) -> tuple[float, float, float, float]:
    """(whole seconds, its CPU seconds, its own process's CPU seconds, run.json's phases in seconds) of
    one ``decpriv run``, from this checkout (None) or from the checkout at ``source``."""
    own = folder.with_name(f"{folder.name}.cpu")
    env = {**os.environ, **THREADS, "DECPRIV_BENCH_CPU": str(own)}
    if source is not None:
        env["PYTHONPATH"] = source
    # -P: the working folder (a checkout's root) is not put before PYTHONPATH, so --before runs its own code
    whole, cpu = timed([sys.executable, "-P", "-c", ENTRY, "run", *overrides, f"hydra.run.dir={folder}"], env)
    phases = json.loads((folder / "run.json").read_text())["wall_seconds"]["total"]
    return whole, cpu, float(own.read_text()), phases


def rows(sources: dict[str, str | None]) -> dict[str, tuple[list[str], str | None]]:
    """The timed rows: (overrides, checkout) by name; one set per checkout."""
    out = {}
    for label, source in sources.items():
        out[f"knowledge n={N}{label}"] = (knowledge_overrides(N), source)
        out[f"default{label}"] = ([], source)
        out[f"default plots=false{label}"] = (["plots=false"], source)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(rounds: int = 3, before: str | None = None) -> None:
    sources = {"": None, **({" (before)": str(Path(before).resolve())} if before else {})}
    timed_rows = rows(sources)
    torch_s: list[float] = []
    torch_cpu: list[float] = []
    whole: dict[str, list[float]] = {name: [] for name in timed_rows}
    cpu: dict[str, list[float]] = {name: [] for name in timed_rows}
    own: dict[str, list[float]] = {name: [] for name in timed_rows}
    phases: dict[str, list[float]] = {name: [] for name in timed_rows}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            bare = timed([sys.executable, "-c", "import torch"], {**os.environ, **THREADS})
            torch_s.append(bare[0])
            torch_cpu.append(bare[1])
            for k, (name, (overrides, source)) in enumerate(timed_rows.items()):
                w, c, o, p = decpriv_run(source, overrides, Path(tmp) / f"{r}-{k}")
                whole[name].append(w)
                cpu[name].append(c)
                own[name].append(o)
                phases[name].append(p)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{rounds} rounds, medians (min-max), seconds; import torch: {spread(torch_s)}, CPU {spread(torch_cpu)}"
    )
    table(statistics.median(torch_s), statistics.median(torch_cpu), whole, phases, cpu, own)


def table(bare: float, bare_cpu: float, *columns: dict[str, list[float]]) -> None:
    """One row per command: whole, phases and CPU seconds (its process and the children it reaped, then
    its process alone), and their ratios to the torch import's."""
    print(
        f"{'command':<34} {'whole':>18} {'phases':>18}  whole / torch  whole / (torch + phases)"
        f" {'CPU':>18}  CPU / torch's {'own CPU':>18}  own / torch's"
    )
    whole, phases, cpu, own = columns
    for name in whole:
        w, p, c, o = (statistics.median(values[name]) for values in columns)
        print(
            f"{name:<34} {spread(whole[name]):>18} {spread(phases[name]):>18}  {w / bare:>12.2f}x"
            f"  {w / (bare + p):>22.2f}x {spread(cpu[name]):>18}  {c / bare_cpu:>12.2f}x"
            f" {spread(own[name]):>18}  {o / bare_cpu:>12.2f}x"
        )
    print("goals: knowledge whole / (torch + phases) <= 1.5x; default (pictures on) whole / torch <= 2x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_startup")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="another checkout of decpriv, run in the same rounds")
    args = parser.parse_args()
    main(args.rounds, args.before)
