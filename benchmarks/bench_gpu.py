"""Where the GPU pays, each measured beside all the CPU cores of the same machine, in the same process.

- D-SGD with the small CNN on a 1024-node torus (the digits, one or two images a node), 20 rounds;
- ResNet-20 on 16 nodes, 20 rounds;
- the DP-SGD audit preset (its trials run in the attack's process, on its device: CUDA where that process
  got the GPU), and its trials a second alone (:mod:`benchmarks.bench_audit_trials`) with 10^7 trials' time;
- gradient inversion with 16, 64 and 256 restarts stacked in one problem (the CNN, one digit), on the GPU
  kernel by kernel (eager) and replayed as a CUDA graph.
Whole-run rows give the simulate phase from run.json (``wall_seconds.simulate``) and the whole run.
Without a GPU it says so in one line (``make bench`` runs it everywhere).
"""

import json
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import bench_audit_trials as audit_trials

RUNS = {
    "dsgd_cnn_torus1024": ("data=digits", "topology=torus", "topology.n=1024", "model=cnn", "~attack"),
    "resnet20_16": ("data=digits", "model=resnet20", "~attack"),
    "dpsgd_audit": ("experiment=dpsgd_digits_audit",),
}
RESTARTS = (16, 64, 256)


def whole_run(overrides: tuple[str, ...], device: str, root: Path) -> tuple[float, float]:
    """(simulate seconds, whole run seconds) of one run."""
    from decpriv import api

    folder = root / f"{len(list(root.iterdir()))}_{device}"
    begin = time.perf_counter()
    api.run([*overrides, "protocol.rounds=20", f"device={device}", "plots=false"], folder)
    wall = time.perf_counter() - begin
    return json.loads((folder / "run.json").read_text())["wall_seconds"].get("simulate", float("nan")), wall


def inversion_rate(device: str, restarts: int, graphs: bool = True, iterations: int = 30) -> float:
    """Optimiser iterations per second (every restart takes one step per iteration); on the GPU with the
    objective replayed as a CUDA graph (``graphs``) or launched kernel by kernel."""
    from torch.func import grad

    from decpriv.attacks.inversion import InversionConfig, invert
    from decpriv.data.datasets import digits
    from decpriv.models.architectures import cnn
    from decpriv.random.streams import Seeds

    data, model = digits(Seeds(0)), cnn((1, 8, 8), 10).on(device)
    theta = model.init(1, 0)[0].to(device)
    x, y = data.x_train[:1].to(device), data.y_train[:1].to(device)
    target = grad(model.loss)(theta, x, y)
    config = InversionConfig(
        cost="sim", optimiser="adam", iterations=iterations, lr=0.1, restarts=restarts, graphs=graphs
    )
    invert(model, theta, target, (1, 8, 8), 10, 1, y, (0.0, 1.0), config)  # warm-up: first trace
    begin = time.perf_counter()
    invert(model, theta, target, (1, 8, 8), 10, 1, y, (0.0, 1.0), config)
    if device == "cuda":
        torch.cuda.synchronize()
    return iterations / (time.perf_counter() - begin)


def main() -> None:
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU is visible; skipped (make gpu-check on a machine with one)")
        return
    print(f"on {torch.cuda.get_device_name(0)} and {torch.get_num_threads()} CPU threads")
    print(f"{'what':22} {'cpu':>12} {'cuda':>12} {'speed-up':>9}")
    root = Path(tempfile.mkdtemp(prefix="decpriv-bench-gpu-"))
    for name, overrides in RUNS.items():
        (cpu_sim, cpu_wall), (gpu_sim, gpu_wall) = (whole_run(overrides, d, root) for d in ("cpu", "cuda"))
        print(f"{name + ' simulate':22} {cpu_sim:11.2f}s {gpu_sim:11.2f}s {cpu_sim / gpu_sim:8.1f}x")
        print(
            f"{name + ' whole':22} {cpu_wall:11.2f}s {gpu_wall:11.2f}s {cpu_wall / gpu_wall:8.1f}x",
            flush=True,
        )
    audit_trials.main()  # the audit's trials a second, all CPU cores against CUDA
    for restarts in RESTARTS:
        cpu = inversion_rate("cpu", restarts)
        for graphs in (False, True):
            gpu = inversion_rate("cuda", restarts, graphs)
            label = f"inversion x{restarts} {'graph' if graphs else 'eager'}"
            print(f"{label:22} {cpu:9.1f}it/s {gpu:9.1f}it/s {gpu / cpu:8.1f}x", flush=True)


if __name__ == "__main__":
    main()
