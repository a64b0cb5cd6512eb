"""Does the DP-SGD audit catch a sigma reported 25% too high? ``experiment=dpsgd_digits_audit`` trains and
audits at ``defense.sigma=0.75`` (what a defense claiming sigma 1 would really release) and its lower bound
is held against what the accountant reports at sigma 1 (the preset's claim, 4.91): above it, caught.

    python -m benchmarks.audit_underreport --device cuda --trials 10000000 --chunk 500000
    python -m benchmarks.audit_underreport --project runs/A 10000000

The first runs the preset (decpriv's Python API, the sealed attack included), times it, and prints the bound,
the claim, and how many trials the CPU's cores draw in the same time (the same streams). The second reads a
run's audit.csv and projects its bound onto more trials: the error rates the run measured, counted at its
own thresholds over the larger number (Clopper-Pearson at the run's alpha), an estimate, not a measurement;
conservative, as a larger audit also chooses deeper thresholds (:func:`choose_thresholds`).
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from decpriv.attacks.audit.bounds import dp_lower, rates_upper

REPORTED_SIGMA, RELEASED_SIGMA = 1.0, 0.75
NAMES = ("false_positives", "negatives", "false_negatives", "positives")


def claimed_epsilon(run: Path) -> float:
    """The (epsilon, delta) the accountant reports for ``run``'s node had its sigma been REPORTED_SIGMA."""
    from decpriv.privacy.library import pld_epsilon

    node = pd.read_csv(run / "privacy.csv").sort_values("sampling_rate").iloc[-1]  # the audited node
    delta = float(pd.read_csv(run / "audit.csv").delta.iloc[0])
    return pld_epsilon(node.sampler, float(node.sampling_rate), REPORTED_SIGMA, int(node.steps), delta)


def projected_epsilon(table: pd.DataFrame, trials: int) -> float:
    """The largest (epsilon, delta) lower bound of audit.csv's rows had each counted ``trials`` trials at
    the error rates it measured (its thresholds, its alpha per limit)."""
    scale = trials / table.trials.to_numpy(dtype=float)
    counts = [table[f"dp_{name}"].to_numpy(dtype=float) * scale for name in NAMES]
    fpr, fnr = rates_upper(*counts, float(table.alpha_per_limit.iloc[0]))
    return float(np.max(dp_lower(fpr, fnr, float(table.delta.iloc[0]))))


def run_audit(device: str, trials: int, chunk: int) -> tuple[Path, float]:
    """The preset at the released sigma through decpriv's Python API (the sealed attack included), into a
    new runs/<date>/<time>; its folder and seconds."""
    from decpriv import api

    overrides = ["experiment=dpsgd_digits_audit", f"device={device}", f"defense.sigma={RELEASED_SIGMA}"]
    begin = time.perf_counter()
    result = api.run([*overrides, f"attack.trials={trials}", f"attack.chunk={chunk}", "plots=false"])
    return result.path, time.perf_counter() - begin


def cpu_trials_in(seconds: float) -> float:
    """Trials all this machine's cores draw in ``seconds`` (benchmarks.bench_audit_trials' rate)."""
    import torch

    from benchmarks.bench_audit_trials import CPU_CHUNK, CPU_TRIALS, trials_per_second

    torch.set_num_threads(os.cpu_count() or 1)
    return trials_per_second("cpu", CPU_TRIALS, CPU_CHUNK)[0] * seconds


def report(run: Path, more: int) -> None:
    table = pd.read_csv(run / "audit.csv")
    bound, claim = float(table.epsilon_dp_lower.max()), claimed_epsilon(run)
    verdict = "caught" if bound > claim else "not caught"
    print(
        f"{int(table.trials.iloc[0])} trials: lower bound {bound:.3f}, claim at sigma {REPORTED_SIGMA}: {claim:.3f}"
    )
    print(f"sigma reported 25% too high: {verdict}")
    print(f"projected onto {more} trials (estimate, its thresholds): {projected_epsilon(table, more):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--trials", type=int, default=10**7)
    parser.add_argument("--chunk", type=int, default=500000)
    parser.add_argument("--project", nargs=2, metavar=("RUN", "TRIALS"))
    args = parser.parse_args()
    if args.project:
        report(Path(args.project[0]), int(args.project[1]))
        return
    folder, seconds = run_audit(args.device, args.trials, args.chunk)
    print(f"{folder}: {args.trials} trials on {args.device}, the whole run {seconds:.0f} s")
    report(folder, 10 * args.trials)
    print(f"the CPU's {os.cpu_count()} cores draw {cpu_trials_in(seconds):.3g} trials in the same time")


if __name__ == "__main__":
    main()
