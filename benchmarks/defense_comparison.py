"""The "Privacy in DML" slides' comparison table, measured: reads a sweep of ``experiment=dml_slides_defenses``
and prints the markdown table of docs/secure_aggregation.md ("Comparison").

    decpriv run -m experiment=dml_slides_defenses
    python -m benchmarks.defense_comparison runs/multirun/<date>/<time>

Seconds a round: one server round of each defense timed alone, the same measurement for all, the defenses
alternating round by round (the jobs' simulate wall times are not compared: on a shared machine their
difference changes sign with the job order); bytes a round: what the defense's summary counts crossing the network
(the undefended float32 uploads for DP); accuracy against the undefended job; the server's membership
inference on each update (``fl_update``) and the users' on the aggregate (``fl_global``), AUC beside the
97.5% point of the shuffled-membership null.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

# the slides' comparison table ("Privacy in DML", "Comparison"): security level, computational overhead,
# accuracy impact, as they state them
SLIDES = {
    "dpsgd": ("medium", "low", "medium"),
    "secret_sharing": ("high", "high", "low"),
    "homomorphic": ("high", "very high", "low"),
    "secure_aggregation": ("medium", "medium", "low"),
    "ledger": ("high", "high", "low"),
}
HIDES = {
    "none": "nothing",
    "dpsgd": "one sample's influence, up to epsilon, from everyone",
    "secret_sharing": "each update from any k - 1 of the k aggregators",
    "secure_aggregation": "each update from the server",
    "homomorphic": "each update from the server (not from a key-holding client)",
    "ledger": "nothing: every update is opened to every node; detects a tampering aggregator",
}


def bytes_per_round(row: pd.Series, plain: float) -> float:
    for key in ("sa_bytes_per_round", "ss_bytes_per_round", "he_bytes_per_round"):
        if key in row and pd.notna(row[key]):
            return float(row[key])
    if pd.notna(row.get("ledger_opening_bytes_per_round")):
        return float(row.ledger_opening_bytes_per_round + row.ledger_chain_bytes_per_round)
    return plain


def auc(row: pd.Series, view: str) -> str:
    if pd.notna(row.get(f"mia_{view}_ciphertexts_only")):
        return "ciphertexts only"
    value, null = row.get(f"mia_{view}_auc"), row.get(f"mia_{view}_auc_null_hi")
    return "" if pd.isna(value) else f"{value:.3f} ({null:.3f})"


def jobs(sweep: Path) -> pd.DataFrame:
    """One row a job: its own summary.csv (full precision; the sweep's rounds small errors to 0), checked
    against its run's mark."""
    from decpriv.report.run_folder import read_summary

    rows = []
    for folder in sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        rows.append(read_summary(folder))
    summary = pd.DataFrame(rows).reset_index(drop=True)
    # defense=none is the base class, which a summary names by its class
    summary["defense"] = summary.defense.replace({"Defense": "none"}).fillna("none")
    return summary


def timed(row: pd.Series) -> str:
    """The seconds a round the defense's own timer measured in the run (HE, ledger), blank where none."""
    if pd.notna(row.get("he_encrypt_seconds_per_round")):
        steps = ("encrypt", "aggregate", "decrypt")
        parts = [row[f"he_{step}_seconds_per_round"] for step in steps]
        return f"{sum(parts):.3f} ({' + '.join(f'{x:.3f}' for x in parts)})"
    if pd.notna(row.get("ledger_commit_seconds_per_round")):
        return f"{row.ledger_commit_seconds_per_round + row.ledger_verify_seconds_per_round:.3f}"
    return ""


def aggregation_seconds(defenses: list[str], repeats: int = 7) -> dict[str, float]:
    """Median seconds of one server round of each defense (``Defense.federate``) alone, on the preset's 36
    clients' random updates of its model's size, after one warm-up round each, on one thread: every
    defense timed the same way, apart from training (DP's cost is in its per-example gradients, not
    here). The rounds alternate between the defenses (ABC ABC ...), so a change in the shared machine's
    load falls on all of them alike instead of on whichever was timed last."""
    import time

    import torch

    from decpriv.adversary.recorder import Recorder
    from decpriv.api import compose_config
    from decpriv.experiment import build

    torch.set_num_threads(1)  # 2 shared cores: threads only contend with the other users' work
    setups = {
        d: build(compose_config(["experiment=dml_slides_defenses", f"defense={d}"])[0]) for d in defenses
    }
    first = next(iter(setups.values()))
    n, p = first.network.n, first.model.p
    generator = torch.Generator().manual_seed(0)
    weights, chosen, held = torch.full((n,), 16.0), torch.arange(n), torch.zeros(p)
    recorder = Recorder.broadcast(torch.arange(n).numpy(), enabled=False)
    times: dict[str, list[float]] = {d: [] for d in defenses}
    for round_ in range(repeats + 1):  # round 0: the warm-up, not counted
        for defense, setup in setups.items():
            updates = 0.1 * torch.randn(n, p, generator=generator)
            clock = time.perf_counter()
            setup.defense.federate(updates, weights, chosen, held, recorder, round_)
            if round_:
                times[defense].append(time.perf_counter() - clock)
    return {d: float(np.median(t)) for d, t in times.items()}


def epsilons(row: pd.Series) -> str:
    """Each epsilon the run's accountant computed, named by the method that gave it, the tightest (the
    run's ``epsilon``) first: ``106 by PLD (dp-accounting), 130.1 by RDP (decpriv)``."""
    from decpriv.report.guarantee import ALSO

    found = [f"{row.epsilon:.0f} by {row.epsilon_method}"]
    for key, method in ALSO.items():
        if method != row.epsilon_method and pd.notna(row.get(key)):
            found.append(f"{row[key]:.1f} by {method}")
    return ", ".join(found)


def hides(row: pd.Series) -> str:
    if row.defense == "dpsgd":
        return f"one sample's influence, epsilon at delta {row.delta:g} = {epsilons(row)}, from everyone"
    return HIDES[row.defense]


def table(sweep: Path) -> str:
    summary = jobs(sweep)
    base = summary[summary.defense == "none"].iloc[0]
    rounds = int(base["protocol.rounds"])
    he = summary[summary.defense == "homomorphic"].iloc[0]
    parameters = he.he_bytes_per_update / he.he_expansion_over_float32 / 4  # p, as the HE job packed it
    plain = 4 * parameters * base.nodes  # every client's float32 update
    lines = [
        "| defense | hides | slides: security / compute / accuracy | aggregation s / round, timed alone | "
        "s / round, the run's own timer | MB / round | test accuracy (vs none) "
        "| server MIA on each update | users' MIA on the aggregate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seconds = aggregation_seconds(list(summary.defense))
    for _, row in summary.iterrows():
        levels = " / ".join(SLIDES[row.defense]) if row.defense in SLIDES else "-"
        lines.append(
            f"| `{row.defense}` | {hides(row)} | {levels} | {seconds[row.defense]:.3f} | "
            f"{timed(row)} | "
            f"{bytes_per_round(row, plain) / 1e6:.2f} | {row.test_accuracy:.3f} "
            f"({row.test_accuracy - base.test_accuracy:+.3f}) | {auc(row, 'fl_update')} | "
            f"{auc(row, 'fl_global')} |"
        )
    he_error = f"CKKS error: {he.he_max_abs_error:.2g} at most per coordinate of an aggregate"
    return (
        "\n".join(lines)
        + f"\n\n{he_error}; {rounds} rounds, {int(base.nodes)} clients, p = {parameters:.0f}."
    )


if __name__ == "__main__":
    print(table(Path(sys.argv[1])))
