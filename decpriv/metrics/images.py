"""Reconstruction quality, scored on de-normalised inputs with an explicit data range.

MSE, PSNR (10 log10(range^2 / MSE)) and SSIM (Wang et al. 2004) per image, computed by torchmetrics;
relative L2 error ||x_hat - x|| / ||x|| for feature vectors. Reconstructions are clipped to the data
range first, as a viewer would display them. Identical images give MSE 0, PSNR +inf and SSIM 1.
"""

import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure


def _clip(
    recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    low, high = data_range
    return recovered.detach().double().clamp(low, high), true.detach().double().to(recovered.device)


def mse(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) mean squared error per image."""
    r, t = _clip(recovered, true, data_range)
    return ((r - t) ** 2).flatten(1).mean(1)


def psnr(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) PSNR in dB per image; +inf for a perfect reconstruction."""
    r, t = _clip(recovered, true, data_range)
    low, high = data_range
    return peak_signal_noise_ratio(
        r, t, data_range=(low, high), reduction="none", dim=tuple(range(1, r.dim()))
    )


def ssim(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) SSIM per image (k, C, H, W); the Gaussian window shrinks to fit small images (8x8 digits)."""
    r, t = _clip(recovered, true, data_range)
    low, high = data_range
    side = min(t.shape[-2:])
    kernel = min(11, side - 1 if side % 2 == 0 else side)
    return structural_similarity_index_measure(
        r, t, data_range=high - low, kernel_size=kernel, reduction="none"
    )


def relative_l2(recovered: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """(k,) ||x_hat - x||_2 / ||x||_2 per row, for feature vectors."""
    r, t = recovered.detach().double().flatten(1), true.detach().double().flatten(1).to(recovered.device)
    return (r - t).norm(dim=1) / t.norm(dim=1)
