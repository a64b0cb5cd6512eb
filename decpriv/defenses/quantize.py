"""Quantisation of PDMM's Delta z to a grid of cell width Delta (Yu 2023, Sec. 6.3).

Every sent Delta z is rounded to the nearest multiple of Delta and the receiver accumulates the rounded
values, so the error enters z (as the thesis models it: uniform additive noise of width Delta) instead
of being averaged away. Simulated rather than taken from the thesis's closed form.
"""

from typing import Any

import torch

from decpriv.defenses.base import Defense
from decpriv.errors import bad


class Quantize(Defense):
    name = "quantize"

    def __init__(self, cell: float = 0.01):
        if cell <= 0:
            raise bad("defense.cell", cell, "the cell width must be positive", "use e.g. defense.cell=0.01")
        self.cell = cell

    def messages(self, values: torch.Tensor, round_: int, generator: torch.Generator) -> torch.Tensor:
        return self.cell * torch.round(values / self.cell)

    def summary(self) -> dict[str, Any]:
        return {"quantize_cell": self.cell}
