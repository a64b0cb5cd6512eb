"""DP-SGD audited through the code that trains (Nasr et al., IEEE S&P 2021, Sec. 4: a canary whose clipped
gradient the adversary chooses; Nasr et al., USENIX Security 2023: white-box, every update seen; Chua et al.,
ICML 2024: the sampler decides the adjacency).

A trial is one copy of the audited node: a local set of its size m whose slot 0 holds the canary. Every step,
the defense's own sampler (:meth:`Sampler.draw`, what D-SGD calls) draws the batch and the defense's own
``gradients`` clips each example, sums, adds its noise and normalises; trials are the rows of one batched
call. Per-example gradients are the worst case for the sampler's adjacency:

- ``poisson`` (add/remove): the canary's gradient is +C when present, 0 when removed; every other example's 0.
- ``fixed`` and the full batch (replace-one): the canary's gradient is +C, or -C once replaced; every other
  example's -C, so a drawn canary moves the sum by 2C.

The observer sees the node's T released updates. Its test is learnt from trials alone (never from sigma or
the rate): the steps are iid given the dataset, so the log-likelihood ratio is a sum over steps of one function of
the update, the log-odds of the dataset given the update, fitted on the fit trials in the three-parameter
family of a shifted mixture's likelihood ratio (:func:`step_log_odds`).
"""

import torch

from decpriv.data.partition import LocalData
from decpriv.defenses.base import Defense
from decpriv.random.philox import PhiloxStream
from decpriv.random.streams import Generator, Seeds, Streams

BLIND_SPOTS = (
    "the other nodes (the node with the largest sampling rate is audited), gossip's mixing (the observer "
    "sees the node's own updates, the strongest view), and gradients computed from real examples (the "
    "canary's is chosen)"
)


class SlotGradients:
    """A model whose per-example gradient is fixed by the example's slot: ``canary`` (D,) in slot 0 of each
    trial, ``other`` elsewhere. The slot index is the example's feature."""

    def __init__(self, canary: torch.Tensor, other: float):
        self.canary, self.other = canary, other

    def example_gradients(self, theta, x: torch.Tensor, y) -> torch.Tensor:
        slot = x[..., 0]
        other = torch.full_like(slot, self.other)
        return torch.where(slot == 0, self.canary[:, None], other)[..., None]


class SampledTrials:
    """``steps`` DP-SGD updates of a node with ``size`` examples and batch size ``batch``, per trial."""

    def __init__(self, defense: Defense, steps: int, size: int, batch: int | None):
        self.defense, self.steps, self.size, self.batch = defense, steps, size, batch
        self.sampler = defense.sampler(batch)

    def gradients(self) -> tuple[float, float, float]:
        """(canary present, canary absent or replaced, every other example) for the sampler's adjacency."""
        clip = self.defense.clip
        return (clip, 0.0, 0.0) if self.sampler.adjacency == "add_remove" else (clip, -clip, -clip)

    def local_sets(self, trials: int, device: torch.device) -> LocalData:
        """``trials`` copies of the node's set, features = slot indices (views: nothing of size trials x m)."""
        m = self.size
        slots = torch.arange(m, dtype=torch.float64, device=device).view(1, m, 1).expand(trials, m, 1)
        return LocalData(
            x=slots,
            y=torch.zeros(1, m, dtype=torch.long, device=device).expand(trials, m),
            mask=torch.ones(1, m, dtype=torch.bool, device=device).expand(trials, m),
            counts=torch.full((trials,), m, device=device),
            indices=(),
        )

    def updates(self, present: torch.Tensor, batches: Generator, noise: Generator) -> torch.Tensor:
        """(steps, D) released updates on ``present``'s device; ``present`` (D,) bool marks the trials under
        the canary's dataset. ``batches`` and ``noise`` are the streams the sampler and the defense draw
        from, as in training: counter-based ones (:meth:`Streams.counter`) draw on the device, each trial
        from its own rows, so a trial's updates do not depend on the chunk it is drawn in."""
        with_canary, without, other = self.gradients()
        device = present.device
        canary = torch.where(present, with_canary, without).to(torch.float64)
        model = SlotGradients(canary, other)
        local = self.local_sets(len(present), device)
        out = torch.empty(self.steps, len(present), dtype=torch.float64, device=device)
        for t in range(self.steps):  # steps are sequential in training too; trials are the batch's rows
            x, y, weight = self.sampler.draw(local, self.batch, batches)
            out[t] = self.defense.gradients(model, None, x, y, weight.to(torch.float64), t, noise)[:, 0]
        return out


def step_log_odds(x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """log(1 - a + a exp(b x + c)), a = sigmoid(params[0]): the log-likelihood ratio of a shifted mixture
    a N(shift) + (1 - a) N(0) against N(0) has this form in any noise scale."""
    a = torch.sigmoid(params[0])
    return torch.logaddexp(torch.log1p(-a), torch.log(a) + params[1] * x + params[2])


def fit_log_odds(x: torch.Tensor, label: torch.Tensor, slope: float) -> tuple[torch.Tensor, float]:
    """(parameters, logistic loss) of :func:`step_log_odds` fitted by L-BFGS from a start of this slope."""
    params = torch.tensor([-2.0, slope, -0.5], dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([params], max_iter=300, line_search_fn="strong_wolfe")

    def loss():
        optimiser.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(step_log_odds(x, params), label)
        value.backward()
        return value

    optimiser.step(loss)
    with torch.no_grad():
        final = torch.nn.functional.binary_cross_entropy_with_logits(step_log_odds(x, params), label)
    return params.detach(), float(final)


def learn_step_test(updates: torch.Tensor, signs: torch.Tensor):
    """The statistic sum_t phi(u_t): phi the log-odds of the dataset given one update, fitted by maximum
    likelihood (logistic loss, L-BFGS) on the fit trials' (steps, F) updates within the family
    :func:`step_log_odds`, whose three parameters (mixing weight, slope, offset) are learnt, not read
    from sigma or the rate. Balanced signs: the log-odds is the log-likelihood ratio. The fit runs on the
    CPU whatever device drew the updates (a few million numbers, once), so both devices fit one test."""
    updates = updates.cpu()
    steps, trials = updates.shape
    centre, scale = float(updates.mean()), float(updates.std())
    x = ((updates - centre) / scale).reshape(-1)
    label = (signs > 0).to(torch.float64).expand(steps, trials).reshape(-1)
    fits = [fit_log_odds(x, label, slope) for slope in (1.0, -1.0)]  # either direction of the shift
    best = min(fits, key=lambda fit: fit[1])[0]

    def statistic(u: torch.Tensor) -> torch.Tensor:
        return step_log_odds((u - centre) / scale, best.to(u.device)).sum(0)[None]

    return statistic


def paired_signs(stream: PhiloxStream, size: int) -> torch.Tensor:
    """(size,) signs: trials 2k and 2k + 1 take opposite datasets, which one decided by a fair bit of row k
    of ``stream`` (numbered from the chunk's first pair). Every chunk of even size is balanced, and a
    trial's sign does not depend on the chunk it is drawn in. The trials stay independent: each one's
    updates come from its own rows of the noise and batch streams."""
    first = torch.where(stream.uniform((size // 2,), "cpu", torch.float64) < 0.5, 1.0, -1.0)
    return torch.stack([first, -first], dim=1).reshape(-1).to(torch.float64)


def canary_draw(trials: SampledTrials, seeds: Streams, device: torch.device | str = "cpu"):
    """``draw(name, size, start)`` of :func:`heldout_counts`: balanced canary presence, the released
    updates drawn on ``device``. Trial ``start + i`` of a part (fit or eval) draws from the rows
    ``start + i`` of counter-based streams named after the part, so its outcome is the same in any chunk
    and on any device (docs/speed.md)."""

    def draw(name: str, size: int, start: int):
        part = name.partition(".")[0]  # "fit" or "eval": one stream for all of a part's chunks
        signs = paired_signs(seeds.counter(f"attack.audit.signs.{part}", start // 2), size)
        streams = Seeds(seeds.seed(f"attack.audit.noise.{part}"))  # the training code's stream names
        batches, noise = streams.counter("batches", start), streams.counter("defense.noise", start)
        return trials.updates((signs > 0).to(device), batches, noise), signs[None]

    return draw
