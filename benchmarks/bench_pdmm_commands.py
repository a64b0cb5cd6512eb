"""Whole PDMM commands as a user runs them: wall time and the share spent simulating vs attacking.

- the headline `decpriv run protocol=pdmm attack=diffgrad` (ring 16, softmax, one digit per node);
- `experiment=yu_e2_digits` at n_i = 1 (RGG N = 100, MLP 100, 20 PDMM rounds, diffgrad in closed form, 4 victims);
- `experiment=yu_e3 setting=yu_decentralized` at n_i = 1 (the same, diffgrad by L-BFGS with enumerated labels).

Each runs in a subprocess (start-up included); the phase times come from the run's run.json. The local
solve's convergence (largest residual, mean L-BFGS iterations per round) is printed beside them.
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

DECPRIV = Path(sys.executable).with_name("decpriv")
COMMANDS = {
    "headline": ["protocol=pdmm", "attack=diffgrad"],
    "yu_e2_digits n_i=1": ["experiment=yu_e2_digits"],
    "yu_e3 decentralized n_i=1": ["experiment=yu_e3"],
}


def timed(args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        begin = time.perf_counter()
        subprocess.run(
            [str(DECPRIV), "run", *args, "hydra.run.dir=run"], cwd=tmp, check=True, capture_output=True
        )
        wall = time.perf_counter() - begin
        phases = json.loads((Path(tmp) / "run" / "run.json").read_text())["wall_seconds"]
        row = pd.read_csv(Path(tmp) / "run" / "summary.csv").iloc[0]
    simulate, attack = phases["simulate"], phases.get("attack", 0.0)
    print(
        f"  wall {wall:6.1f} s | simulate {simulate:6.1f} s ({simulate / wall:4.0%}) | attack {attack:6.1f} s "
        f"({attack / wall:4.0%}) | max residual {row['pdmm_max_residual']:.1e} | "
        f"inner iterations/round {row['pdmm_inner_iterations']:.1f} | PSNR {row['attack_psnr']:.1f} dB"
    )


def main() -> None:
    for name, args in COMMANDS.items():
        print(f"{name}: decpriv run {' '.join(args)}")
        timed(args)
