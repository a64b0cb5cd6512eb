"""Scoring reconstructed batches against the victims' true data (ground truth: for ``evaluate`` only)."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from decpriv.attacks.inversion.matching import match
from decpriv.attacks.targets import fixed_targets
from decpriv.metrics import images
from decpriv.metrics.images import PSNR_CAP, RECOVERY_MARGIN_DB, psnr_text
from decpriv.report.headline import Headline
from decpriv.report.plots import image_grid
from decpriv.seal.truth import Truth

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True, eq=False)
class Scored:
    table: pd.DataFrame
    # one row per true example: victim, example, labels, defined, l2_error; images add mse, psnr, ssim,
    # the mean image's psnr and ssim, and whether the example counts as recovered
    true: list[torch.Tensor]  # per victim, the true batch
    reconstructed: list[torch.Tensor]  # per victim, the reconstructions matched to it, clamped to the box for
    # the pictures (scored unclipped)


@dataclass(frozen=True, eq=False)
class Batches:
    """Each victim's reconstructed batch, its labels and the attack's objective, in one order."""

    victims: np.ndarray
    xs: list[torch.Tensor]
    ys: list[torch.Tensor]
    objectives: list[float]


def fixed_victims(attack: str, found: Batches, expected: np.ndarray, whose: str, truth: Truth) -> Batches:
    """``found`` on the victims the threat model fixes (``expected``, rebuilt outside the attack): a victim
    outside, or named twice, is refused (``fixed_targets``); one omitted gets a batch of NaN, which
    ``score_batches`` scores as the guess that needs no attack (the mean held-out example) and flags
    undefined, with no label (-1) and no objective (NaN)."""
    order = torch.arange(len(found.xs), dtype=torch.float64)[:, None]
    named = pd.DataFrame({"victim": np.asarray(found.victims, dtype=np.int64)})
    table, slot = fixed_targets(attack, named, order, pd.DataFrame({"victim": expected}), whose)
    batches = Batches(table.victim.to_numpy(), [], [], [])
    for v, k in zip(batches.victims.tolist(), slot[:, 0].tolist(), strict=True):
        if np.isnan(k):
            n = int(truth.local.mask[v].sum())
            batches.xs.append(torch.full((n, *truth.local.x.shape[2:]), float("nan")))
            batches.ys.append(torch.full((n,), -1, dtype=torch.long))
            batches.objectives.append(float("nan"))
        else:
            batches.xs.append(found.xs[int(k)])
            batches.ys.append(found.ys[int(k)])
            batches.objectives.append(found.objectives[int(k)])
    return batches


def score_batches(
    victims: np.ndarray,
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    objectives: list[float],
    truth: Truth,
    data_range: tuple[float, float],
    image: bool,
) -> Scored:
    """Match each victim's reconstructions to its true samples optimally, then score every pair.

    A reconstruction holding NaN or inf (a closed form divided by zero, or a fake) is a failure of the
    attack: it is scored as the guess that needs no attack, the mean held-out example of the public data
    set, and flagged ``defined=False``; image data also get MSE, PSNR and SSIM, and the PSNR/SSIM of that
    guess for every input.
    """
    rows, true_rows, rec_rows = [], [], []
    prior = truth.dataset.x_test.mean(0, keepdim=True)
    for v, xr, yr, objective in zip(victims, xs, ys, objectives, strict=True):
        keep = truth.local.mask[v].bool()
        x, y = truth.local.x[v][keep].to(xr.dtype), truth.local.y[v][keep]
        finite = torch.isfinite(xr).flatten(1).all(1)
        guess = prior.to(xr.dtype).to(xr.device).expand_as(xr)
        xr = torch.where(finite.reshape(-1, *[1] * (xr.dim() - 1)), xr, guess).cpu()
        perm = match(xr, x)
        xr, yr, finite = xr[perm], yr[perm].cpu(), finite[perm]
        scores = {"l2_error": (xr - x).flatten(1).norm(dim=1)}
        if image:
            scores |= {
                "mse": images.mse(xr, x),
                "psnr": images.psnr(xr, x, data_range).clamp(max=PSNR_CAP),  # the same cap everywhere
                "ssim": images.ssim(xr, x, data_range),
            }
            guess = prior.to(x.dtype).expand_as(x)
            scores |= {
                "mean_image_psnr": images.psnr(guess, x, data_range),
                "mean_image_ssim": images.ssim(guess, x, data_range),
            }
            scores["recovered"] = images.recovered(scores["psnr"], scores["mean_image_psnr"])
        for i in range(len(x)):
            rows.append(
                {
                    "victim": int(v),
                    "example": i,
                    "true_label": int(y[i]),
                    "label": int(yr[i]),
                    "label_correct": bool(yr[i] == y[i]),
                    "defined": bool(finite[i]),
                    **{key: val[i].item() for key, val in scores.items()},
                    "objective": objective,
                }
            )
        true_rows.append(x)
        rec_rows.append(xr.clamp(*data_range))
    table = pd.DataFrame(rows)
    # what a reader looks for first (``decpriv show`` prints the leading columns): who, and whether
    lead = [c for c in ("victim", "example", "recovered", "psnr", "mean_image_psnr") if c in table]
    return Scored(table[lead + [c for c in table if c not in lead]], true_rows, rec_rows)


def image_summary(table: pd.DataFrame, prefix: str = "attack_") -> tuple[dict[str, float], str]:
    """What the scored image rows (one per true image: ``victim``, ``psnr``, ``ssim``,
    ``mean_image_psnr``, ``recovered``) say, and the verdict's words for it.

    The count of recovered images leads (PSNR at least ``RECOVERY_MARGIN_DB`` above the mean image's):
    a mean over victims hides a split (one exact recovery capped at ``PSNR_CAP`` and one failure average
    to a number neither of them is), so the median stands beside the mean."""
    k, m, undefined = int(table["recovered"].sum()), len(table), int((~table["defined"]).sum())
    per_victim = table.groupby("victim")["recovered"].all()
    summary = {
        f"{prefix}recovered_fraction": k / m if m else float("nan"),
        f"{prefix}recovered": k,
        f"{prefix}images": m,
        f"{prefix}victims_recovered": int(per_victim.sum()),
        f"{prefix}victims": len(per_victim),
        f"{prefix}psnr_median": float(table["psnr"].median()),
        f"{prefix}psnr": float(table["psnr"].mean()),
        f"{prefix}ssim_median": float(table["ssim"].median()),
        f"{prefix}ssim": float(table["ssim"].mean()),
        f"{prefix}mean_image_psnr": float(table["mean_image_psnr"].mean()),
    }
    words = (
        f"{k} of {m} image(s) recovered (PSNR at least {RECOVERY_MARGIN_DB:g} dB above the mean image's; "
        f"every image of {summary[prefix + 'victims_recovered']} of {summary[prefix + 'victims']} victim(s)): "
        f"PSNR median {summary[prefix + 'psnr_median']:.1f} dB, mean {summary[prefix + 'psnr']:.1f} dB "
        f"(each capped at {PSNR_CAP:.0f}), SSIM median {summary[prefix + 'ssim_median']:.2f} (the mean "
        f"image, no attack: {summary[prefix + 'mean_image_psnr']:.1f} dB){undefined_words(undefined)}"
    )
    return summary, words


def undefined_words(undefined: int) -> str:
    """The verdict's words for reconstructions that held NaN or inf (scored as the mean example)."""
    if not undefined:
        return ""
    return (
        f"; {undefined} reconstruction(s) held NaN or inf: each scored as the mean example (no attack), a "
        "failure of the attack"
    )


RECOVERY_HEADLINE = (
    Headline("attack_recovered_fraction", 0.0, "higher", "none recovered by the mean image (no attack)"),
    Headline("attack_psnr_median", "attack_mean_image_psnr", "higher", "the mean image's PSNR (no attack)"),
    Headline("attack_psnr", "attack_mean_image_psnr", "higher", "the mean image's PSNR (no attack)"),
)
"""The headline of an image-inversion attack: the recovered fraction first, then the median and mean PSNR."""


def reconstruction_grid(scored: Scored, data_range: tuple[float, float], label: str, title: str) -> "Figure":
    """True images above their matched reconstructions, each captioned with its PSNR."""
    low, high = data_range
    unit = [((torch.cat(b) - low) / (high - low)).numpy() for b in (scored.true, scored.reconstructed)]
    return image_grid(
        [("true", unit[0]), (label, unit[1])],
        captions=[psnr_text(r.psnr) for r in scored.table.itertuples()],
        title=title,
    )
