"""Image attacks are read by how many images they recovered, not by a capped mean over victims."""

import numpy as np
import pytest
import torch

from decpriv.attacks.inversion.scoring import image_summary, score_batches
from decpriv.data import datasets
from decpriv.data.partition import LocalData
from decpriv.metrics.images import RECOVERY_MARGIN_DB
from decpriv.random.streams import Seeds
from decpriv.seal.truth import Truth


@pytest.fixture(scope="module")
def digits_truth():
    data = datasets.digits(Seeds(0))
    local = LocalData.stack(data.x_train, data.y_train, [np.array([0]), np.array([1])])
    return Truth(data, local, torch.zeros(2, 1))


def test_one_exact_recovery_and_one_failure_read_as_1_of_2_not_as_their_mean(digits_truth):
    """Victim 0's reconstruction is its digit; victim 1's is the digit's negative (as far from it as the
    box allows): the mean of a capped 100 dB and a failure would sit far above the mean image's PSNR and
    hide that victim 1 kept its data."""
    truth, (low, high) = digits_truth, digits_truth.dataset.data_range
    exact = truth.local.x[0, :1].clone()
    negative = (low + high) - truth.local.x[1, :1]
    scored = score_batches(
        np.array([0, 1]),
        [exact, negative],
        [torch.tensor([0]), torch.tensor([0])],
        [0.0, 1.0],
        truth,
        (low, high),
        image=True,
    )
    table = scored.table
    assert table["recovered"].tolist() == [True, False]
    assert table.loc[0, "psnr"] == 100.0 and table.loc[1, "psnr"] < table.loc[1, "mean_image_psnr"]
    summary, words = image_summary(table)
    assert summary["attack_recovered"] == 1 and summary["attack_images"] == 2
    assert summary["attack_recovered_fraction"] == 0.5 and summary["attack_victims_recovered"] == 1
    # the capped mean beats the baseline by far although half the victims are safe: the count says so
    assert summary["attack_psnr"] > summary["attack_mean_image_psnr"] + 30
    assert summary["attack_psnr_median"] == pytest.approx(table["psnr"].median())
    assert words.startswith("1 of 2 image(s) recovered")


def test_a_reconstruction_just_under_the_margin_is_not_recovered(digits_truth):
    """The margin is a stated number: a guess scoring below the mean image + 3 dB does not count."""
    truth, box = digits_truth, digits_truth.dataset.data_range
    prior = truth.dataset.x_test.mean(0, keepdim=True)
    scored = score_batches(np.array([0]), [prior.clone()], [torch.tensor([0])], [0.0], truth, box, image=True)
    row = scored.table.iloc[0]
    assert row["psnr"] == pytest.approx(row["mean_image_psnr"])
    assert not row["recovered"] and RECOVERY_MARGIN_DB == 3.0
