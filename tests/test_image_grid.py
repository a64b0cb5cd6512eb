"""Reconstruction pictures stay readable: at most 16 columns and 64 images, true directly above recovered."""

import numpy as np

from decpriv.report.plots import MAX_COLUMNS, MAX_IMAGES, image_grid


def test_long_rows_wrap_into_bands_of_16_and_stop_at_64():
    rng = np.random.default_rng(0)
    true, recovered = rng.random((100, 1, 8, 8)), rng.random((100, 1, 8, 8))
    figure = image_grid([("true", true), ("recovered", recovered)], [f"{i}" for i in range(100)], "t")
    bands = MAX_IMAGES // MAX_COLUMNS
    assert len(figure.axes) == 2 * bands
    assert [ax.get_ylabel() for ax in figure.axes] == ["true", "recovered"] * bands
    assert figure._suptitle.get_text() == "t (first 64 of 100)"
    first, second = figure.axes[0].images[0].get_array(), figure.axes[1].images[0].get_array()
    assert first.shape[1] == MAX_COLUMNS * (8 + 2) - 2  # 16 tiles of 8 pixels, 2-pixel gaps
    assert np.allclose(first[:, :8, 0], true[0, 0]) and np.allclose(second[:, :8, 0], recovered[0, 0])
    captions = [t.get_text() for t in figure.axes[-1].texts]
    assert captions == [str(i) for i in range(48, 64)]


def test_a_short_row_is_one_band():
    images = np.zeros((3, 3, 4, 4))
    figure = image_grid([("true", images), ("recovered", images)], ["a", "b", "c"], "rgb")
    assert len(figure.axes) == 2 and figure.axes[0].images[0].get_array().shape == (4, 3 * 6 - 2, 3)
