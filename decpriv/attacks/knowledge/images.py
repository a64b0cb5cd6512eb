"""Image quality of reconstructions: PSNR and SSIM (Wang et al. 2004, via torchmetrics), per image."""

import torch
from torchmetrics.functional.image import structural_similarity_index_measure


def psnr(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) 10 log10(range^2 / MSE) per image, after clipping the recovery to the data range; +inf for an
    exact recovery (no cap: a capped value would pass for a measurement in averages)."""
    low, high = data_range
    mse = ((recovered.clamp(low, high) - true) ** 2).flatten(1).mean(1)
    return 10 * torch.log10((high - low) ** 2 / mse)


def ssim(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) SSIM per image (k, C, H, W); the Gaussian window shrinks to fit small images (8x8 digits)."""
    low, high = data_range
    side = min(true.shape[-2:])
    kernel = min(11, side - 1 if side % 2 == 0 else side)
    return structural_similarity_index_measure(
        recovered.clamp(low, high).double(),
        true.double(),
        data_range=high - low,
        kernel_size=kernel,
        reduction="none",
    )
