"""Byzantine-robust aggregation rules, each on a batch of neighbourhoods: ``x`` (n, M, p) holds what n
receivers got (M slots, ``valid`` (n, M) marks the real ones, a receiver with fewer senders is padded), and
each rule returns the (n, p) aggregates at once. On one row with every slot valid they are the rules of
the literature as ByzFL implements them (Allouah et al., ByzFL, 2025; ``tests/test_poisoning_rules.py``
checks each against it):

- coordinate-wise median (Yin et al., ICML 2018, Def. 1): the middle order statistic per coordinate, the
  mean of the two middle ones for an even count;
- coordinate-wise trimmed mean (Yin et al. 2018, Def. 2): drop the ``trim[v]`` largest and smallest values
  of each coordinate, average the rest;
- Krum and Multi-Krum (Blanchard et al., NeurIPS 2017, Sec. 4): score each vector by the sum of squared
  distances to its m - f - 1 nearest others; Krum keeps the best, Multi-Krum averages the m - f best;
- centred clipping (Karimireddy, He, Jaggi, ICML 2021, Eq. 2): v <- v + mean_i CLIP(x_i - v, tau), L times,
  from a centre v (the previous aggregate; in gossip, the node's own model);
- clipped gossip (He, Karimireddy, Jaggi 2022, Eq. 3): x_v + sum_u W_vu CLIP(x_u - x_v, tau_v).
"""

import torch

INF = float("inf")


def _counts(valid: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return valid.sum(1).to(like.dtype)


NETWORK_SLOTS = 32  # up to this many slots, a sorting network beats torch.sort's short segments


def _columns(x: torch.Tensor, valid: torch.Tensor) -> list[torch.Tensor]:
    """The slots' (b, p) columns, the padding +inf (nothing to mask where every slot is real)."""
    return list((x if bool(valid.all()) else torch.where(valid[..., None], x, INF)).unbind(1))


def _exchange(cols: list[torch.Tensor], i: int) -> None:
    cols[i], cols[i + 1] = torch.minimum(cols[i], cols[i + 1]), torch.maximum(cols[i], cols[i + 1])


def _sort_columns(cols: list[torch.Tensor]) -> list[torch.Tensor]:
    """Odd-even transposition: M passes of elementwise min/max over all (b, p) coordinates at once."""
    for step in range(len(cols)):  # passes over the slots, not over nodes
        for i in range(step % 2, len(cols) - 1, 2):
            _exchange(cols, i)
    return cols


def _sorted(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each coordinate's values sorted over the slots, the padding (+inf) last. A few slots (a gossip
    neighbourhood) by a sorting network: 4.5x faster than torch.sort at M = 9 (docs/speed.md)."""
    if x.shape[1] > NETWORK_SLOTS:
        return torch.where(valid[..., None], x, INF).sort(dim=1).values
    return torch.stack(_sort_columns(_columns(x, valid)), 1)


def _full(x: torch.Tensor, valid: torch.Tensor) -> bool:
    """Every slot real and few enough for the sorting network: rank k is column k, nothing to gather."""
    return x.shape[1] <= NETWORK_SLOTS and bool(valid.all())


def median(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median of each neighbourhood (the mean of the middle two for an even count)."""
    slots = x.shape[1]
    if _full(x, valid):
        cols = _sort_columns(_columns(x, valid))
        return (cols[(slots - 1) // 2] + cols[slots // 2]) / 2
    ordered = _sorted(x, valid)
    m = valid.sum(1)
    low = ordered.gather(1, ((m - 1) // 2)[:, None, None].expand(-1, 1, x.shape[2]))
    high = ordered.gather(1, (m // 2)[:, None, None].expand(-1, 1, x.shape[2]))
    return ((low + high) / 2).squeeze(1)


def _ends_apart(x: torch.Tensor, valid: torch.Tensor, top: int, bottom: int) -> list[torch.Tensor]:
    """Each coordinate's values with its ``top`` largest sorted into the last slots and its ``bottom``
    smallest into the first, the rest between in any order (the padding, +inf, among the largest): ``top``
    + ``bottom`` bubble passes of M - 1 elementwise min/max, where a whole sort takes M(M - 1)/2."""
    slots = x.shape[1]
    cols = _columns(x, valid)
    if top + bottom >= slots // 2:
        return _sort_columns(cols)
    for k in range(top):  # the k-th largest up to slot M - 1 - k
        for i in range(slots - 1 - k):
            _exchange(cols, i)
    for k in range(bottom):  # the k-th smallest down to slot k, below the largest already placed
        for i in range(slots - top - 2, k - 1, -1):
            _exchange(cols, i)
    return cols


def trimmed_mean(x: torch.Tensor, valid: torch.Tensor, trim: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise mean of each neighbourhood without its ``trim[v]`` largest and smallest values: the
    kept values are summed as they are (no subtraction of the extremes, which a far-off value would make
    lose the honest ones' digits)."""
    m, slots = valid.sum(1), x.shape[1]
    if slots > NETWORK_SLOTS:
        ordered = _sorted(x, valid)
    else:
        top, bottom = int((slots - m + trim).max()), int(trim.max())
        cols = _ends_apart(x, valid, top, bottom)
        if _full(x, valid) and bool((trim == bottom).all()):  # the kept columns, the same in every row
            total = cols[bottom].clone()
            for col in cols[bottom + 1 : slots - bottom]:
                total += col
            return total / (slots - 2 * bottom)
        ordered = torch.stack(cols, 1)
    rank = torch.arange(slots, device=x.device)[None, :]
    kept = (rank >= trim[:, None]) & (rank < (m - trim)[:, None])
    total = torch.where(kept[..., None], ordered, 0.0).sum(1)
    return total / (m - 2 * trim).to(x.dtype)[:, None]


def squared_distances(x: torch.Tensor) -> torch.Tensor:
    """(b, M, M) squared distances between each neighbourhood's vectors, summed from their differences:
    ||a||^2 + ||b||^2 - 2 a.b (torch.cdist's default above 25 rows) cancels when models nearly agree. One
    pass per slot (the slots of a neighbourhood, not nodes); 4x faster than torch.cdist's own difference
    mode at 9 slots (docs/speed.md, "Poisoning")."""
    slots = x.shape[1]
    d = torch.zeros(x.shape[0], slots, slots, dtype=x.dtype, device=x.device)
    for i in range(slots - 1):
        row = (x[:, i + 1 :] - x[:, i : i + 1]).square_().sum(2)
        d[:, i, i + 1 :], d[:, i + 1 :, i] = row, row
    return d


def krum_scores(x: torch.Tensor, valid: torch.Tensor, f: int) -> torch.Tensor:
    """(b, M) each vector's Krum score: its squared distances to its m - f - 1 nearest others, averaged
    (+inf on the padding)."""
    d = squared_distances(x)
    slots = x.shape[1]
    if bool(valid.all()):  # the same ranks kept in every row: a slice
        return d.sort(dim=2).values[:, :, 1 : slots - f].sum(2) / max(slots - f - 1, 1)
    pair = valid[:, :, None] & valid[:, None, :]
    ordered = torch.where(pair, d, INF).sort(dim=2).values  # the vector itself (0) first
    m = valid.sum(1)
    rank = torch.arange(slots, device=x.device)[None, None, :]
    kept = (rank >= 1) & (rank < (m - f)[:, None, None])
    score = torch.where(kept, ordered, 0.0).sum(2) / (m - f - 1).clamp_min(1).to(x.dtype)[:, None]
    return torch.where(valid, score, INF)


def krum(x: torch.Tensor, valid: torch.Tensor, f: int) -> torch.Tensor:
    """The vector of each neighbourhood with the lowest Krum score."""
    best = krum_scores(x, valid, f).argmin(1)
    return x[torch.arange(len(x), device=x.device), best]


def multi_krum(x: torch.Tensor, valid: torch.Tensor, f: int) -> torch.Tensor:
    """The mean of the m - f vectors of each neighbourhood with the lowest Krum scores."""
    rank = krum_scores(x, valid, f).argsort(1).argsort(1)
    kept = (rank < (valid.sum(1) - f)[:, None]).to(x.dtype)
    return torch.bmm((kept / kept.sum(1, keepdim=True))[:, None, :], x).squeeze(1)


def clip(diff: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """CLIP(z, tau) = min(1, tau / ||z||) z over the last dimension (``tau`` per row, or one radius)."""
    norm = diff.norm(dim=-1, keepdim=True)
    tau = torch.as_tensor(tau, dtype=diff.dtype, device=diff.device)
    if tau.dim():
        tau = tau.reshape(tau.shape + (1,) * (diff.dim() - tau.dim()))
    return diff * (tau / norm.clamp_min(1e-30)).clamp(max=1.0)


def centred_clipping(
    x: torch.Tensor, valid: torch.Tensor, centre: torch.Tensor, tau: float, iterations: int
) -> torch.Tensor:
    """Centred clipping from ``centre`` (n, p): ``iterations`` steps v <- v + mean CLIP(x_i - v, tau), the
    clipped differences summed by one batched product (scale (b, 1, M) @ diff (b, M, p))."""
    v = centre
    m = _counts(valid, x)[:, None]
    for _ in range(iterations):  # L is a handful (the paper uses 1-3), not a loop over nodes
        diff = x - v[:, None, :]
        norm = torch.linalg.vector_norm(diff, dim=2)
        scale = (tau / norm.clamp_min(1e-30)).clamp(max=1.0) * valid
        v = v + torch.bmm(scale[:, None, :].to(x.dtype), diff).squeeze(1) / m
    return v


def clipped_gossip(
    x: torch.Tensor, weight: torch.Tensor, own: torch.Tensor, tau: torch.Tensor | float
) -> torch.Tensor:
    """x_v + sum_u W_vu CLIP(x_u - x_v, tau_v), with ``own`` (n, p) each receiver's own message (the
    padding has weight 0)."""
    pulled = clip(x - own[:, None, :], tau)
    return weight.sum(1, keepdim=True) * own + (weight[..., None] * pulled).sum(1)


def adaptive_radius(x: torch.Tensor, weight: torch.Tensor, own: torch.Tensor, delta: float) -> torch.Tensor:
    """(n,) tau_v^2 = (1 / delta) sum_u W_vu ||x_u - x_v||^2 over the nearest neighbours of v (itself
    first) whose weights add up to at most 1 - delta: He et al. (2022, Thm. 1)'s radius, whose sum runs over the honest neighbours,
    with the nearest ones standing in for them (node v does not know which are honest)."""
    dist = (x - own[:, None, :]).square().sum(2)
    dist = torch.where(weight > 0, dist, INF)
    order = dist.argsort(1)
    w_sorted, d_sorted = weight.gather(1, order), dist.gather(1, order)
    share = weight.sum(1, keepdim=True)
    kept = (torch.cumsum(w_sorted, 1) <= (1 - delta) * share * (1 + 1e-9)) & (w_sorted > 0)
    return (torch.where(kept, w_sorted * d_sorted, 0.0).sum(1) / delta).sqrt()
