"""Probe of issue 54 (part A): names mistyped, values out of range, knobs set twice, odd command lines,
as a new user types them. Each case runs ``decpriv`` in a fresh process in its own folder and is
classified: refusal (exit 2, one line), valid (exit 0), traceback, unclear (exit 1, or a refusal of more
than one line), or unexpected (the exit status is not the one the case expects: a silently wrong run
exits 0 where a refusal was due).

Run: ``.venv/bin/python -m benchmarks.probe_names`` (about 5 minutes on 2 cores: two cases at a time).
"""

import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIN = str(Path(sys.executable).with_name("decpriv"))
SMALL = ["protocol.rounds=3", "topology.n=4", "plots=false"]  # first: a case's own value wins
REFUSED = [
    "attack=diffgrd",
    "attack=signflip",
    "defense=krumm",
    "topology=torsu",
    "protocol=fedavgg",
    "model=cnnn",
    "data=mnsit",
    "partition=dirichlett",
    "accountant=rpd",
    "experiment=decor_digit",
    "-m seed=0,1 hydra/launcher=paralel",
    "protocol.lrr=0.1",
    "protocol.lr=-1",
    "protocol.lr=abc",
    "protocol.rounds=0",
    "protocol.rounds=1.5",
    "topology.n=1",
    "topology=torus topology.n=15",
    "seed=abc",
    "device=tpu",
    "defense=decor defense.sigma_cor=1.0",
    "defense=decor defense.sigma_cdp=1 defense.cdp_excess=3",
    "accountant=secldp defense=decor defense.sigma_cdp=1 accountant.cdp_excess=3",
    "defense=ldp defense.epsilon=5 defense.sigma=2",
    "defense=ldp defense.sigma=nan",
    "defense=homomorphic defense.flood_bits=40",
    "defense=homomorphic protocol=dsgd",
    "defense=homomorphic defense.coeff_mod_bit_sizes=[60,40,40,61]",
    "-m seed=0,1,",
    "-m seed=0,0",
    "seed=0,1",
    "~topology",
    "~adversary",
    "topology=null",
    "+foo=1",
    "sandbox.memory_gib=0",
    "sandbox.processes=100000",
    "name=a_b/c",
    "-m attack=mia,diffgrd",
    "defense=[ldp,cdp]",
    "resume=true",
    "plots=maybe",
    "debug=1",
    "defense.sigma=1",
    "protocol.batch_size=0",
    "partition.alpha=0.5",
    "--cfg jobb",
    "defense=decor defense.level=users",
    "-m topology=ring,torsu",
]
VALID = [
    "seed=-1",
    "gossip_matrix=uniform",
    "seed=0,1 -m hydra.sweep.dir=sw",
    "defense=homomorphic defense.poly_modulus_degree=4096 defense.coeff_mod_bit_sizes=[40,19] "
    "defense.scale_bits=20",
    "defense=dpsgd defense.epsilon=1e9",
]


def probe(line: str, expected: int) -> tuple[str, str]:
    words = line.split()
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [BIN, "run", *SMALL, *words], cwd=folder, capture_output=True, text=True, timeout=600
        )
    said = [w for w in done.stderr.splitlines() if w.strip() and not w.startswith(("decpriv:", "INFO"))]
    if "Traceback" in done.stderr:
        return "traceback", line
    if done.returncode != expected:
        return "unexpected", f"{line} (exit {done.returncode}: {said[-1:] or ''})"
    if done.returncode == 2:
        return ("refusal" if len(said) == 1 else "unclear"), f"{line}: {said[-1] if said else ''}"
    return ("valid" if done.returncode == 0 else "unclear"), line


def main() -> None:
    cases = [(line, 2) for line in REFUSED] + [(line, 0) for line in VALID]
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda case: probe(*case), cases))
    counts: dict[str, int] = {}
    for kind, text in found:
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{kind:10s} {text}")
    print(", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())), f"of {len(found)} cases")


if __name__ == "__main__":
    main()
