"""What a scorer scores is fixed outside the sealed attack process (docs/ARCHITECTURE.md, "What each
scorer scores"): the targets come from the threat model the pipeline holds (the network, the attackers,
the transcript's rounds, the attack's config), never from the finding. A finding that names a target
outside them is refused in one sentence; a target it omits is scored as chance (a model of NaN: every
score a tie); its own labels of a target (the attacker that attacks it) are replaced by the pipeline's.
"""

import numpy as np
import pandas as pd
import torch


class TargetRefused(RuntimeError):
    """A finding names a target outside its threat model's, or one twice: the run fails."""


def fixed_targets(
    attack: str, table: pd.DataFrame, models: torch.Tensor, expected: pd.DataFrame, whose: str
) -> tuple[pd.DataFrame, torch.Tensor]:
    """The finding's ``table`` (one row per tested model ``models[k]``) checked against ``expected`` (one
    row per target, keyed by its columns but ``attacker``, the pipeline's own label, which replaces the
    finding's): a row keyed outside ``expected``, or keyed twice, is refused; a target it omits gets a
    model of NaN (chance), after the finding's rows (a complete finding keeps its order and its numbers).
    ``whose`` says in words what the targets are."""
    keys = [c for c in expected.columns if c != "attacker"]
    missing = [c for c in keys if c not in table.columns]
    if missing or len(table) != len(models):
        raise TargetRefused(
            f"attack={attack}: its finding does not say which target each tested model is for "
            f"({', '.join(keys)}, one row a model); a finding cannot choose what it is scored on"
        )
    named = table[keys].reset_index(drop=True)
    slot = pd.MultiIndex.from_frame(expected[keys]).get_indexer(pd.MultiIndex.from_frame(named))
    outside = np.flatnonzero(slot < 0)
    if outside.size:
        row = named.iloc[int(outside[0])].to_dict()
        raise TargetRefused(
            f"attack={attack}: its finding names {row}, which is not one of its targets ({whose}, fixed "
            f"outside the attack); a finding cannot choose what it is scored on"
        )
    if len(np.unique(slot)) != len(slot):
        twice = named.iloc[int(pd.Series(slot).duplicated().to_numpy().argmax())].to_dict()
        raise TargetRefused(f"attack={attack}: its finding names {twice} twice; each target is scored once")
    table = table.reset_index(drop=True).copy()
    labels = expected.iloc[slot].reset_index(drop=True)
    for column in expected.columns.difference(keys):
        table[column] = labels[column].to_numpy()
    absent = np.setdiff1d(np.arange(len(expected)), slot)
    if absent.size:  # at the end: a complete finding keeps its order, and its numbers
        table = pd.concat([table, expected.iloc[absent]], ignore_index=True)
        chance = torch.full((absent.size, models.shape[-1]), float("nan"), dtype=models.dtype)
        models = torch.cat([models, chance])
    return table, models
