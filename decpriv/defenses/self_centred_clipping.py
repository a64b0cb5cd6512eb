"""Self-centred clipping (He, Karimireddy, Jaggi 2022), the robust aggregation rule Pasquini et al. (2023,
App. A.1) show amplifies local generalisation:
    theta_v^{t+1} = sum_u W_vu (theta_v + CLIP(theta_u - theta_v, tau)),  CLIP(x, tau) = min(1, tau/||x||) x.
One pass over the nonzeros of W (stacked edge tensors, no loop over nodes).
"""

from typing import Annotated

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense


def edges_of(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, cols, weights) of the nonzeros of a dense or sparse W."""
    if W.layout == torch.sparse_csr:
        coo = W.to_sparse_coo().coalesce()
        rows, cols = coo.indices()
        return rows, cols, coo.values()
    rows, cols = W.nonzero(as_tuple=True)
    return rows, cols, W[rows, cols]


@checked("defense")
class SelfCentredClipping(Defense):
    name = "self_centred_clipping"
    own_aggregation = True

    def __init__(self, tau: Annotated[float, Range(gt=0, what="the clipping radius", eg=1.0)] = 1.0):
        self.tau = tau

    def aggregate(self, W: torch.Tensor, messages: torch.Tensor) -> torch.Tensor:
        rows, cols, w = edges_of(W)
        diff = messages[cols] - messages[rows]
        scale = (self.tau / diff.norm(dim=1).clamp_min(1e-30)).clamp(max=1.0)
        pulled = (w * scale)[:, None] * diff
        row_sums = torch.zeros(len(messages), dtype=messages.dtype, device=messages.device).index_add(
            0, rows, w
        )
        return row_sums[:, None] * messages + torch.zeros_like(messages).index_add(0, rows, pulled)

    def summary(self) -> dict[str, float]:
        return {"clipping_tau": self.tau}
