"""Sweeps use the machine: a 16-job sweep of the default experiment (``seed=range(16)``), Hydra's sequential
launcher against ``hydra/launcher=parallel`` (joblib, one process per core), run alternately, best of
``REPEATS`` each so a load spike on the shared machine hits one sample, not one side. Goal: the parallel
sweep at least 1.7x faster on 2 cores. Then a 64-job sweep once each: the two sequential times give the
sweep's fixed cost (start-up, imports, the check of every job) and the cost of one job, F + k * job, which
bound the speed-up of k jobs on c cores to (F + k * job) / (F + k * job / c). The parallel sweep checks its jobs in the launcher's workers
(``decpriv.cli.precheck._check_in_workers``), so its parent never imports torch; the sequential one checks them in
the parent, then runs them there. Beside it, the headroom the machine leaves: how much faster two copies of
a pure-Python loop finish side by side than one after the other (2x on two idle cores; the shared
development machine often gives far less, which caps any parallel launcher).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

DECPRIV = [str(Path(sys.executable).with_name("decpriv"))]
JOBS = 16
REPEATS = 2
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def sweep_seconds(folder: Path, parallel: bool, jobs: int = JOBS) -> float:
    command = [*DECPRIV, "run", "-m", f"seed=range({jobs})", f"hydra.sweep.dir={folder}"]
    begin = time.perf_counter()
    subprocess.run(
        [*command, *(["hydra/launcher=parallel"] if parallel else [])],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    return time.perf_counter() - begin


LOOP = [sys.executable, "-c", "sum(i * i for i in range(6_000_000))"]


def headroom() -> float:
    """(one loop after the other) / (two side by side): 2.0 on two idle cores."""
    begin = time.perf_counter()
    subprocess.run(LOOP, check=True)
    subprocess.run(LOOP, check=True)
    serial = time.perf_counter() - begin
    begin = time.perf_counter()
    for process in [subprocess.Popen(LOOP) for _ in range(2)]:
        process.wait()
    return serial / (time.perf_counter() - begin)


def main() -> None:
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"headroom: two CPU-bound processes finish {headroom():.2f}x faster side by side than in turn")
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(REPEATS):
            for parallel in (False, True):
                folder = Path(tmp) / f"{'parallel' if parallel else 'sequential'}{k}"
                times[parallel].append(sweep_seconds(folder, parallel))
        tables = [pd.read_csv(Path(tmp) / f"{side}0" / "summary.csv") for side in ("sequential", "parallel")]
        same = tables[0].drop(columns="job").equals(tables[1].drop(columns="job"))
    sequential, parallel = min(times[False]), min(times[True])
    print(
        f"{JOBS}-job sweep of the default experiment on {os.cpu_count()} cores: sequential {sequential:.1f} s,"
        f" parallel {parallel:.1f} s ({sequential / parallel:.2f}x; summary tables equal: {same})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        big = {
            parallel: sweep_seconds(Path(tmp) / str(parallel), parallel, 4 * JOBS)
            for parallel in (False, True)
        }
    job = (big[False] - sequential) / (3 * JOBS)
    fixed = sequential - JOBS * job
    print(
        f"{4 * JOBS}-job sweep: sequential {big[False]:.1f} s, parallel {big[True]:.1f} s ({big[False] / big[True]:.2f}x);"
        f" fixed cost {fixed:.1f} s, {job:.2f} s a job: on {os.cpu_count()} cores at most"
        f" {(fixed + JOBS * job) / (fixed + JOBS * job / os.cpu_count()):.2f}x for {JOBS} jobs,"
        f" {(fixed + 4 * JOBS * job) / (fixed + 4 * JOBS * job / os.cpu_count()):.2f}x for {4 * JOBS}"
    )
    print(f"headroom after: {headroom():.2f}x")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
