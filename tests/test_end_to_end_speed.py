"""Speed paths that must not change results: SSIM through separable window matrices, one build per run,
the parallel sweep's precheck in its workers."""

import torch
import torch.nn.functional as F

from decpriv.metrics import images


def _ssim_by_convolution(recovered: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """Wang et al. 2004, Eq. (13) over the reflection-padded image, written as the 2-D convolution."""
    r, t = recovered.double(), true.double()
    pad = min(5, min(t.shape[-2:]) - 1)
    offsets = torch.arange(-pad, pad + 1, dtype=torch.float64)
    gauss = torch.exp(-((offsets / 1.5) ** 2) / 2)
    gauss = gauss / gauss.sum()
    channels = t.shape[1]
    window = torch.outer(gauss, gauss).expand(channels, 1, 2 * pad + 1, 2 * pad + 1)
    padded = F.pad(torch.cat([r, t, r * r, t * t, r * t]), (pad,) * 4, mode="reflect")
    mu_r, mu_t, rr, tt, rt = F.conv2d(padded, window, groups=channels).split(len(t))
    var_r, var_t, cov = (rr - mu_r**2).clamp(min=0), (tt - mu_t**2).clamp(min=0), rt - mu_r * mu_t
    c1, c2 = 0.01**2, 0.03**2
    index = ((2 * mu_r * mu_t + c1) * (2 * cov + c2)) / ((mu_r**2 + mu_t**2 + c1) * (var_r + var_t + c2))
    return index.flatten(1).mean(1)


def test_ssim_window_matrices_equal_the_reflect_padded_convolution():
    gen = torch.Generator().manual_seed(3)
    for shape in [(7, 1, 8, 8), (2, 3, 4, 5), (3, 2, 16, 11), (1, 1, 2, 3)]:
        x = torch.rand(*shape, generator=gen, dtype=torch.float64)
        y = (x + 0.3 * torch.randn(*shape, generator=gen, dtype=torch.float64)).clamp(0, 1)
        assert torch.allclose(images.ssim(y, x, (0.0, 1.0)), _ssim_by_convolution(y, x), rtol=0, atol=1e-13)
