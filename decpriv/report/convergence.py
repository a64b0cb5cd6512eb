"""One line when a run's model has not converged: its attack numbers then describe a model mid-training."""

import pandas as pd

TAIL = 0.2  # the last fifth of the rounds
STILL_FALLING = 0.10  # a training loss that still falls by 10% over them has not settled
DRIFT = 2.0  # a consensus distance that ends at twice its lowest: the models drift apart


def convergence_note(history: pd.DataFrame) -> str | None:
    """``not converged: ...`` when the nodes' models drift apart (the consensus distance ends at twice its
    lowest after the common start, or higher) or the training loss still falls by more than 10% over the
    last fifth of the rounds; None when neither (or history.csv has too few rounds to say)."""
    if "round" not in history or history["round"].nunique() < 5:
        return None
    by_round = history.groupby("round").mean(numeric_only=True).sort_index()
    notes = []
    if "consensus_distance" in by_round:
        distance = by_round["consensus_distance"].dropna().iloc[1:]  # round 0: the common initial model
        if len(distance) > 1 and distance.iloc[-1] > DRIFT * distance.min() > 0:
            notes.append(
                f"the consensus distance grew from {distance.min():.3g} to {distance.iloc[-1]:.3g}"
                " (the nodes' models drift apart)"
            )
    if "train_loss" in by_round:
        loss = by_round["train_loss"].dropna()
        tail = loss.iloc[int(len(loss) * (1 - TAIL)) :]
        drop = (tail.iloc[0] - tail.iloc[-1]) / tail.iloc[0] if len(tail) > 1 and tail.iloc[0] > 0 else 0
        if drop > STILL_FALLING:
            notes.append(f"train_loss still fell {drop:.0%} over rounds {tail.index[0]}-{tail.index[-1]}")
    if not notes:
        return None
    return "not converged: " + "; ".join(notes) + " (more rounds, or a smaller learning rate)."
