"""Image metrics on synthetic pairs with hand-computed values."""

import math

import pytest
import torch

from decpriv.metrics import images


def test_identical_images_are_perfect():
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(images.mse(x, x), torch.zeros(3, dtype=torch.float64))
    assert torch.isinf(images.psnr(x, x, (0.0, 1.0))).all()
    assert torch.allclose(images.ssim(x, x, (0.0, 1.0)), torch.ones(3, dtype=torch.float64))


def test_constant_offset_psnr_by_hand():
    # MSE = 0.1^2 = 0.01 on range 1 -> 20 dB; on range [0, 2] -> 10 log10(4 / 0.01) = 26.02 dB
    true = torch.full((2, 1, 8, 8), 0.5)
    rec = true + 0.1
    assert torch.allclose(images.mse(rec, true), torch.full((2,), 0.01, dtype=torch.float64))
    assert torch.allclose(images.psnr(rec, true, (0.0, 1.0)), torch.full((2,), 20.0, dtype=torch.float64))
    assert torch.allclose(
        images.psnr(rec, true, (0.0, 2.0)), torch.full((2,), 10 * math.log10(400.0), dtype=torch.float64)
    )


def test_reconstructions_are_scored_unclipped():
    """A pixel outside the range counts its whole error: clipping would score 5.0 against 1.0 as exact."""
    true = torch.ones(1, 1, 8, 8)
    assert images.mse(true + 5.0, true).item() == 25.0
    assert images.psnr(true + 5.0, true, (0.0, 1.0)).item() == pytest.approx(-10 * math.log10(25.0))


def test_ssim_drops_with_noise_and_psnr_orders_with_it():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(4, 1, 8, 8, generator=gen)
    noise = torch.randn(4, 1, 8, 8, generator=gen)
    small, large = x + 0.05 * noise, x + 0.3 * noise
    s_small, s_large = images.ssim(small, x, (0.0, 1.0)), images.ssim(large, x, (0.0, 1.0))
    assert (s_small < 1).all() and (s_large < s_small).all()
    assert (images.psnr(large, x, (0.0, 1.0)) < images.psnr(small, x, (0.0, 1.0))).all()


def test_relative_l2_by_hand():
    true = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    rec = torch.tensor([[3.0, 4.5], [0.0, 0.0]])
    assert torch.allclose(images.relative_l2(rec, true), torch.tensor([0.1, 1.0], dtype=torch.float64))


def test_ssim_and_psnr_agree_with_torchmetrics():
    from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

    gen = torch.Generator().manual_seed(2)
    for shape in [(5, 1, 8, 8), (3, 3, 32, 32), (2, 3, 12, 9)]:
        x = torch.rand(*shape, generator=gen, dtype=torch.float64)
        y = (x + 0.2 * torch.randn(*shape, generator=gen, dtype=torch.float64)).clamp(0, 1)
        ours = images.ssim(y, x, (0.0, 1.0))
        theirs = structural_similarity_index_measure(y, x, data_range=1.0, reduction="none")
        assert torch.allclose(ours, theirs, atol=1e-12)
        theirs = peak_signal_noise_ratio(y, x, data_range=(0.0, 1.0), reduction="none", dim=(1, 2, 3))
        assert torch.allclose(images.psnr(y, x, (0.0, 1.0)), theirs.double(), atol=1e-5)
