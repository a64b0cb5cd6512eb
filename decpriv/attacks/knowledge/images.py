"""Image quality of reconstructions: PSNR and SSIM (Wang et al. 2004), per image."""

import torch

from decpriv.metrics import images


def psnr(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) 10 log10(range^2 / MSE) per image, after clipping the recovery to the data range; +inf for an
    exact recovery (no cap: a capped value would pass for a measurement in averages)."""
    low, high = data_range
    mse = ((recovered.clamp(low, high) - true) ** 2).flatten(1).mean(1)
    return 10 * torch.log10((high - low) ** 2 / mse)


def ssim(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) SSIM per image (k, C, H, W), float64, recovery clipped to the data range."""
    return images.ssim(recovered, true, data_range)
