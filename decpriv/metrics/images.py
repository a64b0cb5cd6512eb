"""Reconstruction quality, scored on de-normalised inputs with an explicit data range.

MSE, PSNR (10 log10(range^2 / MSE)) and SSIM (Wang et al. 2004) per image, batched over the images in
plain torch (the same numbers as torchmetrics, without its slow import; docs/speed.md); relative L2
error ||x_hat - x|| / ||x|| for feature vectors. Reconstructions are scored as the attack returned them,
not clipped to the data range: clipping only ever moves a pixel closer to the truth, so it would flatter a
reconstruction against the no-attack baseline (the mean image, inside the range already); Yu 2023 E2's
honest decentralized run at n_i = 2 had one image pass the 3 dB margin only when clipped (14.19 dB clipped,
11.85 dB unclipped, against 10.79 dB). Pictures show them clipped, as a viewer would. Identical images give
MSE 0, PSNR +inf and SSIM 1.
"""

import torch

SSIM_SIGMA = 1.5  # Wang et al. 2004, Sec. III-C: 11 x 11 circular-symmetric Gaussian window, sigma 1.5
SSIM_K1, SSIM_K2 = 0.01, 0.03  # ibid., Eq. (7) and (9) constants


def _pair(recovered: torch.Tensor, true: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return recovered.detach().double(), true.detach().double().to(recovered.device)


def mse(recovered: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """(k,) mean squared error per image."""
    r, t = _pair(recovered, true)
    return ((r - t) ** 2).flatten(1).mean(1)


PSNR_CAP = 100.0  # dB: an exact recovery has infinite PSNR; tables, means and captions stop here
RECOVERY_MARGIN_DB = 3.0
# an image counts as recovered when its PSNR beats the no-attack guess (the mean image) by this margin:
# 3 dB is half the mean squared error of that guess, a gap no reconstruction drifting near the mean
# image reaches, while a recognisable digit clears it by far (recovered ones sit at 20-100 dB, failures
# at or below the baseline's 11 dB)


def psnr_text(value: float) -> str:
    """A PSNR for a caption, capped as the tables cap it: ``31.2 dB``, ``≥100 dB``."""
    return f"≥{PSNR_CAP:.0f} dB" if value >= PSNR_CAP else f"{value:.1f} dB"


def psnr(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) PSNR in dB per image; +inf for a perfect reconstruction."""
    low, high = data_range
    return 10 * torch.log10((high - low) ** 2 / mse(recovered, true))


def recovered(psnr_db: torch.Tensor, baseline_db: torch.Tensor) -> torch.Tensor:
    """(k,) whether each image's PSNR beats its no-attack baseline's by ``RECOVERY_MARGIN_DB``."""
    return psnr_db >= baseline_db + RECOVERY_MARGIN_DB


def _window_matrix(size: int, pad: int, gauss: torch.Tensor) -> torch.Tensor:
    """(size, size) matrix B with B @ x = the reflection-padded x filtered by the 1-D window ``gauss``:
    the Gaussian window is separable, so the 2-D filter of an (H, W) image is B_H X B_W^T (two small
    matmuls instead of an 11 x 11 convolution, whose float64 path unfolds every window; docs/speed.md)."""
    out = torch.arange(size, device=gauss.device)[:, None]
    source = (out + torch.arange(-pad, pad + 1, device=gauss.device)).abs()  # reflect at 0 ...
    source = torch.where(source > size - 1, 2 * (size - 1) - source, source)  # ... and at size - 1
    matrix = torch.zeros(size, size, dtype=gauss.dtype, device=gauss.device)
    return matrix.index_put_((out.expand_as(source), source), gauss.expand_as(source), accumulate=True)


def ssim(recovered: torch.Tensor, true: torch.Tensor, data_range: tuple[float, float]) -> torch.Tensor:
    """(k,) SSIM per image (k, C, H, W): Wang et al. 2004, Eq. (13), local statistics under an 11 x 11
    Gaussian window (sigma 1.5) over the reflection-padded image, averaged over pixels and channels. The
    window shrinks only for images under 6 pixels a side, which cannot be padded by 5."""
    r, t = _pair(recovered, true)
    low, high = data_range
    c1, c2 = (SSIM_K1 * (high - low)) ** 2, (SSIM_K2 * (high - low)) ** 2
    pad = min(5, min(t.shape[-2:]) - 1)
    offsets = torch.arange(-pad, pad + 1, dtype=t.dtype, device=t.device)
    gauss = torch.exp(-((offsets / SSIM_SIGMA) ** 2) / 2)
    gauss = gauss / gauss.sum()
    rows, cols = _window_matrix(t.shape[-2], pad, gauss), _window_matrix(t.shape[-1], pad, gauss)
    mu_r, mu_t, rr, tt, rt = rows @ torch.stack([r, t, r * r, t * t, r * t]) @ cols.T
    var_r = (rr - mu_r**2).clamp(min=0)
    var_t = (tt - mu_t**2).clamp(min=0)
    cov = rt - mu_r * mu_t
    index = ((2 * mu_r * mu_t + c1) * (2 * cov + c2)) / ((mu_r**2 + mu_t**2 + c1) * (var_r + var_t + c2))
    return index.flatten(1).mean(1)


def relative_l2(recovered: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """(k,) ||x_hat - x||_2 / ||x||_2 per row, for feature vectors."""
    r, t = recovered.detach().double().flatten(1), true.detach().double().flatten(1).to(recovered.device)
    return (r - t).norm(dim=1) / t.norm(dim=1)
