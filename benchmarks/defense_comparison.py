"""The "Privacy in DML" slides' comparison table, measured: reads a sweep of ``experiment=dml_slides_defenses``
and prints the markdown table of docs/secure_aggregation.md ("Comparison").

    decpriv run -m experiment=dml_slides_defenses
    python -m benchmarks.defense_comparison runs/multirun/<date>/<time>

Overhead seconds a round: the job's simulate wall time less the undefended job's, over the rounds (the
same machine, one job at a time); bytes a round: what the defense's summary counts crossing the network
(the undefended float32 uploads for DP); accuracy against the undefended job; the server's membership
inference on each update (``fl_update``) and the users' on the aggregate (``fl_global``), AUC beside the
97.5% point of the shuffled-membership null.
"""

import json
import sys
from pathlib import Path

import pandas as pd

# the slides' qualitative levels: security, computational overhead, accuracy impact
SLIDES = {
    "dpsgd": ("medium", "low", "medium"),
    "secret_sharing": ("high", "high", "none"),
    "homomorphic": ("very high", "very high", "none"),
    "secure_aggregation": ("high", "medium", "none"),
    "ledger": ("high (integrity)", "high", "none"),
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


def table(sweep: Path) -> str:
    summary = pd.read_csv(sweep / "summary.csv")
    summary["defense"] = summary.defense.fillna("none")
    seconds = {
        int(job): json.loads((sweep / str(job) / "run.json").read_text())["wall_seconds"]["simulate"]
        for job in summary.job
    }
    summary["simulate"] = summary.job.map(seconds)
    base = summary[summary.defense == "none"].iloc[0]
    rounds = int(base["protocol.rounds"])
    he = summary[summary.defense == "homomorphic"].iloc[0]
    parameters = he.he_bytes_per_update / he.he_expansion_over_float32 / 4  # p, as the HE job packed it
    plain = 4 * parameters * base.nodes  # every client's float32 update
    lines = [
        "| defense | hides | slides: security / compute / accuracy | overhead s / round | MB / round "
        "| test accuracy (vs none) | server MIA on each update | users' MIA on the aggregate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, row in summary.iterrows():
        levels = " / ".join(SLIDES.get(row.defense, ("", "", "")))
        overhead = (row.simulate - base.simulate) / rounds
        lines.append(
            f"| `{row.defense}` | {HIDES[row.defense]} | {levels} | {overhead:+.2f} | "
            f"{bytes_per_round(row, plain) / 1e6:.2f} | {row.test_accuracy:.3f} "
            f"({row.test_accuracy - base.test_accuracy:+.3f}) | {auc(row, 'fl_update')} | "
            f"{auc(row, 'fl_global')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1])))
