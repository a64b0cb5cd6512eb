"""The DP-SGD audit's trials per second (``experiment=dpsgd_digits_audit``: 50 steps of the defense's own
Poisson sampler and gradients over a 168-example set, per trial), drawn from Philox counter streams on the
CPU with all its cores and, where there is one, on CUDA in the same process; and what 10^7 trials would
take, the size that catches a sigma under-reported by 25% (docs/speed.md).

``python -m benchmarks audit_trials`` (or ``python -m benchmarks.bench_audit_trials``) measures the CPU
here; ``benchmarks/bench_gpu.py`` prints the same row beside CUDA.
"""

import os
import time

import torch

CPU_TRIALS, CPU_CHUNK = 10000, 10000  # about a minute of the 2-core machine's time
CUDA_TRIALS, CUDA_CHUNK = 400000, 200000
TARGET = 10**7


def preset_trials():
    """The preset's trial runner and the attack's streams, as the audit builds them."""
    from decpriv import experiment
    from decpriv.api import compose_config

    cfg = compose_config(["experiment=dpsgd_digits_audit", "plots=false"])[0]
    setup = experiment.build(cfg)
    return setup.plan.trials, setup.attack_context.seeds


def trials_per_second(device: str, trials: int, chunk: int) -> tuple[float, torch.Tensor]:
    """Evaluation trials a second (after one warm-up chunk), and the first chunk's updates on the CPU."""
    from decpriv.attacks.audit.subsampled import canary_draw

    runner, seeds = preset_trials()
    draw = canary_draw(runner, seeds, device)
    first = draw("eval.0", min(chunk, 2000), 0)[0].cpu()  # warm-up: CUDA's context and kernels
    begin = time.perf_counter()
    for index, start in enumerate(range(0, trials, chunk)):
        updates, _ = draw(f"eval.{index}", min(chunk, trials - start), start)
        float(updates.sum())  # waits for the device
    return trials / (time.perf_counter() - begin), first


def generator_trials_per_second(trials: int) -> float:
    """The same trials drawn from CPU ``torch.Generator`` streams (the audit's draws before Philox)."""
    from decpriv.random.streams import Seeds

    runner, seeds = preset_trials()
    streams = Seeds(seeds.seed("attack.audit.noise.eval"))
    present = torch.arange(trials) % 2 == 0
    begin = time.perf_counter()
    runner.updates(present, streams.torch("batches"), streams.torch("defense.noise"))
    return trials / (time.perf_counter() - begin)


def row(label: str, rate: float) -> str:
    hours = TARGET / rate / 3600
    return f"{label:34} {rate:12.0f} trials/s   10^7 trials: {hours:6.2f} h"


def main() -> None:
    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    cpu, cpu_first = trials_per_second("cpu", CPU_TRIALS, CPU_CHUNK)
    print(f"audit trials, dpsgd_digits_audit (50 steps, m = 168, Poisson), {cores} CPU threads", flush=True)
    print(row(f"cpu ({cores} threads, chunk {CPU_CHUNK})", cpu), flush=True)
    print(row("cpu, torch.Generator streams", generator_trials_per_second(CPU_CHUNK)), flush=True)
    if not torch.cuda.is_available():
        return
    cuda, cuda_first = trials_per_second("cuda", CUDA_TRIALS, CUDA_CHUNK)
    print(row(f"cuda ({torch.cuda.get_device_name(0)}, chunk {CUDA_CHUNK})", cuda), flush=True)
    gap = float((cuda_first - cpu_first).abs().max() / cpu_first.abs().max())
    print(f"cuda / cpu: {cuda / cpu:.1f}x; the first 2000 trials' updates differ by {gap:.1e} (relative)")


if __name__ == "__main__":
    main()
