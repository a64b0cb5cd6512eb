"""Quantisation of PDMM's Delta z to a grid of cell width Delta (Yu 2023, Sec. 6.3).

Every sent Delta z is rounded to the nearest multiple of Delta and the receiver accumulates the rounded
values, so the error enters z (as the thesis models it: uniform additive noise of width Delta) instead
of being averaged away. Simulated rather than taken from the thesis's closed form.
"""

from typing import Annotated, Any

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Defense


@checked("defense")
class Quantize(Defense):
    name = "quantize"

    def __init__(self, cell: Annotated[float, Range(gt=0, what="the cell width", eg=0.01)] = 0.01):
        self.cell = cell

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        return self.cell * torch.round(values / self.cell)

    def summary(self) -> dict[str, Any]:
        return {"quantize_cell": self.cell}
