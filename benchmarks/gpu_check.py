"""The prepared GPU check (``make gpu-check``): each command below runs on the CPU and on CUDA, and the two
run folders' tables are compared as ``decpriv diff`` compares them; then the GPU benchmarks. One table.

Tolerances (docs/simulation.md, "Same numbers on any device"): float64 runs agree to rtol 1e-9; float32 runs
to rtol 1e-3 + atol 1e-4, the spread of float32 sums taken in another order (the CPU's and the GPU's
kernels split a reduction differently). The device's own columns and wall times are not compared.

    make gpu-check                     # on a machine with a GPU: python3 -m benchmarks.gpu_check
    python3 -m benchmarks.gpu_check dsgd_f64 pdmm_diffgrad   # some commands only
"""

import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

F64 = "protocol.dtype=float64"
# name -> (overrides, precision): every protocol, every attack family, an audit, each accountant
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "default": ((), "float32"),
    "dsgd_f64": ((F64,), "float64"),
    "gossip": (("protocol=gossip", F64, "~attack"), "float64"),
    "knowledge_matrix": (("attack=knowledge_matrix",), "float64"),
    "fedavg": (("protocol=fedavg", F64, "~attack"), "float64"),
    "dlg": (("attack=dlg", "attack.iterations=40"), "float64"),
    "idlg": (("attack=idlg", "attack.iterations=40"), "float64"),
    "inverting_gradients": (("attack=inverting_gradients", "attack.iterations=40"), "float64"),
    "pdmm_diffgrad": (("protocol=pdmm", "attack=diffgrad", "protocol.rounds=12"), "float64"),
    "admm_leak": (("protocol=admm", "attack=pdmm_leak", "protocol.rounds=12"), "float64"),
    "pdmm_centralized": (
        ("protocol=pdmm_centralized", "topology=star", "~attack", "protocol.rounds=5"),
        "float64",
    ),
    "echo": (("attack=echo", F64), "float64"),
    "state_override": (("attack=state_override", F64), "float64"),
    "discovery": (("attack=neighbour_discovery", F64), "float64"),
    "gradient_recovery": (("attack=gradient_recovery", F64, "attack.iterations=40"), "float64"),
    "secure_aggregation": (("defense=secure_aggregation", F64, "~attack"), "float64"),
    "decor_secldp": (("defense=decor", "accountant=secldp", F64, "~attack"), "float64"),
    "muffliato_network_dp": (("experiment=muffliato_sgd", F64), "float64"),
    "random_walk": (("experiment=random_walk_privacy",), "float64"),
    "dpsgd_rdp": (("experiment=dpsgd_digits", F64, "protocol.rounds=20"), "float64"),
    "dpsgd_audit": (("experiment=dpsgd_digits_audit", F64), "float64"),
    "cnn": (("model=cnn", "protocol.rounds=10", "~attack"), "float32"),
}
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (1e-3, 1e-4)}


def own_columns(column: str) -> bool:
    """Columns that name the machine or time it, which differ between any two devices."""
    return column in ("device", "device_name") or "seconds" in column


def compare(name: str, root: str, devices: tuple[str, str] = ("cpu", "cuda")) -> dict:
    """Run ``name`` on the CPU then on CUDA (``devices``) into ``root``; the largest relative difference of
    their tables."""
    from decpriv import api
    from decpriv.report.diff import diff_paths

    overrides, precision = COMMANDS[name]
    rtol, atol = TOLERANCE[precision]
    row: dict = {"command": name, "precision": precision}
    folders = [Path(root) / name / f"{i}_{device}" for i, device in enumerate(devices)]
    for device, folder in zip(devices, folders, strict=True):
        begin = time.perf_counter()
        api.run([*overrides, f"device={device}", "plots=false"], folder)
        row[f"{device}_s"] = round(time.perf_counter() - begin, 2)
    worst, differing = 0.0, []
    for table in diff_paths(*folders, rtol, atol):
        if not table.changed.empty:  # empty and without columns where only one side has the table
            changed = table.changed[~table.changed["column"].map(own_columns)]
            rel = changed["rel_diff"].astype(float)
            worst = max([worst, *rel[rel.notna()].tolist()])
            differing += [f"{table.name}.{c}" for c in changed["column"].unique()]
        differing += [f"{table.name}: rows added/removed"] if len(table.added) + len(table.removed) else []
        differing += [f"{table.name}.{c}: only one side" for c in table.added_columns + table.removed_columns]
    row.update(equal=not differing, max_rel_diff=worst, differing=", ".join(differing[:4]))
    return row


def run_commands(names: list[str], workers: int = 4) -> list[dict]:
    root = tempfile.mkdtemp(prefix="decpriv-gpu-check-")
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {name: pool.submit(compare, name, root) for name in names}
        rows = []
        for name, future in futures.items():
            try:
                rows.append(future.result())
            except Exception as error:  # one command's failure is a row of the table, not the end
                rows.append(
                    {"command": name, "equal": False, "differing": f"{type(error).__name__}: {error}"}
                )
    return rows


def print_rows(rows: list[dict]) -> None:
    print(f"{'command':22} {'prec':7} {'cpu s':>7} {'cuda s':>7} {'max rel diff':>12}  verdict")
    for r in rows:
        rel = r.get("max_rel_diff", math.nan)
        verdict = "equal" if r.get("equal") else f"DIFFERS: {r.get('differing', '')}"[:90]
        print(
            f"{r['command']:22} {r.get('precision', '?'):7} {r.get('cpu_s', math.nan):7.1f} "
            f"{r.get('cuda_s', math.nan):7.1f} {rel:12.2e}  {verdict}",
            flush=True,
        )


def main(selected: list[str]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible; run it on a machine with one (CI stays on the CPU)")
        return 2
    print(f"gpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    begin = time.perf_counter()
    rows = run_commands(selected or list(COMMANDS))
    print_rows(rows)
    print(f"({len(rows)} commands in {time.perf_counter() - begin:.0f} s)", flush=True)
    if not selected:
        from benchmarks import bench_gpu

        bench_gpu.main()
    return 0 if all(r.get("equal") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
