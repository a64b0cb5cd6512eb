"""One line when a run's model has not converged: its attack numbers then describe a model mid-training."""

import pandas as pd

TAIL = 0.2  # the last fifth of the rounds
STILL_FALLING = 0.05  # a training loss that still falls by 5% of its first value over them has not settled
DRIFT = 0.5  # a consensus distance still growing by half over the last fifth: the models drift apart


def convergence_note(history: pd.DataFrame) -> str | None:
    """``not converged: ...`` when, over the last fifth of the rounds, the nodes' models still drift apart
    (the consensus distance grows by half or more) or the training loss still falls by more than 5% of
    its first value;
    None when neither (or history.csv has too few rounds to say)."""
    if "round" not in history or history["round"].nunique() < 5:
        return None
    by_round = history.groupby("round").mean(numeric_only=True).sort_index()
    notes = []
    if "consensus_distance" in by_round:
        distance = _tail(by_round["consensus_distance"])
        if len(distance) > 1 and distance.iloc[-1] > (1 + DRIFT) * distance.iloc[0] > 0:
            notes.append(
                f"the consensus distance still grew from {distance.iloc[0]:.3g} to {distance.iloc[-1]:.3g}"
                f" over rounds {distance.index[0]}-{distance.index[-1]} (the nodes' models drift apart)"
            )
    if "train_loss" in by_round:
        loss = by_round["train_loss"].dropna()
        tail = _tail(loss)
        drop = (tail.iloc[0] - tail.iloc[-1]) / loss.iloc[0] if len(tail) > 1 and loss.iloc[0] > 0 else 0
        if drop > STILL_FALLING:
            notes.append(
                f"train_loss still fell from {tail.iloc[0]:.3g} to {tail.iloc[-1]:.3g} over rounds "
                f"{tail.index[0]}-{tail.index[-1]} ({drop:.0%} of its first value)"
            )
    if not notes:
        return None
    return "not converged: " + "; ".join(notes) + " (more rounds, or a smaller learning rate)."


def _tail(column: pd.Series) -> pd.Series:
    """The last fifth of a per-round column's recorded values."""
    values = column.dropna()
    return values.iloc[int(len(values) * (1 - TAIL)) :]
