"""Wall times of ``decpriv run`` refusing bad CKKS settings from the command line, beside a refusal that has
nothing to do with CKKS (docs/speed.md, "Refusals before torch loads"; the README's refusal times).

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.ckks_refusal_times [repeats]

The cases alternate run by run (ABC ABC ...), so a change in a shared machine's load falls on all alike.
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

CASES = {
    "[21,20] scale_bits=20": [
        "defense=homomorphic",
        "defense.coeff_mod_bit_sizes=[21,20]",
        "defense.scale_bits=20",
    ],
    "[60]": ["defense=homomorphic", "defense.coeff_mod_bit_sizes=[60]"],
    "[]": ["defense=homomorphic", "defense.coeff_mod_bit_sizes=[]"],
    "N=32768 [20,20,20]": [
        "defense=homomorphic",
        "defense.poly_modulus_degree=32768",
        "defense.coeff_mod_bit_sizes=[20,20,20]",
    ],
    "[60,40,40,19]": ["defense=homomorphic", "defense.coeff_mod_bit_sizes=[60,40,40,19]"],
    "protocol.lr=-1 (no CKKS)": ["protocol.lr=-1"],
}


def main(repeats: int = 7) -> None:
    command = shutil.which("decpriv") or os.path.join(os.path.dirname(sys.executable), "decpriv")
    times: dict[str, list[float]] = {case: [] for case in CASES}
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    for _ in range(repeats):
        for case, overrides in CASES.items():
            clock = time.perf_counter()
            done = subprocess.run([command, "run", *overrides], capture_output=True, text=True)
            times[case].append(time.perf_counter() - clock)
            if done.returncode != 2:
                raise SystemExit(f"{case}: exit {done.returncode}, not a refusal: {done.stderr[-300:]}")
    for case, found in times.items():
        print(
            f"{case:28s} median {statistics.median(found):.2f} s  min {min(found):.2f}  max {max(found):.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
