"""Datasets and partitions: shapes, ranges, disjointness, label skew, vectorised minibatches."""

import numpy as np
import pytest
import torch

from decpriv.data import datasets
from decpriv.data import partition as part
from decpriv.errors import ConfigError
from decpriv.random.streams import Seeds

SEEDS = Seeds(0)


def test_digits_split_and_range():
    ds = datasets.digits(SEEDS)
    assert ds.input_shape == (1, 8, 8) and ds.num_classes == 10 and ds.is_image
    assert len(ds.x_train) + len(ds.x_test) == 1797 and len(ds.x_test) == 449
    assert float(ds.x_train.min()) == 0.0 and float(ds.x_train.max()) == 1.0
    assert ds.data_range == (0.0, 1.0)
    again = datasets.digits(Seeds(0))
    assert torch.equal(ds.y_test, again.y_test)
    assert not torch.equal(ds.y_test, datasets.digits(Seeds(1)).y_test)


def test_breast_cancer_standardised():
    ds = datasets.breast_cancer(SEEDS)
    full = torch.cat([ds.x_train, ds.x_test])
    assert full.shape == (569, 30) and ds.num_classes == 2
    assert torch.allclose(full.mean(0), torch.zeros(30), atol=1e-5)
    assert torch.allclose(full.std(0, unbiased=False), torch.ones(30), atol=1e-4)


def test_gaussian_classes_are_yu_2023_data():
    ds = datasets.gaussian_classes(SEEDS, size=20000)
    x, y = ds.x_train, ds.y_train
    assert torch.allclose(x[y == 0].mean(0), torch.tensor([-1.0, -1.0]), atol=0.03)
    assert torch.allclose(x[y == 1].mean(0), torch.tensor([1.0, 1.0]), atol=0.03)
    assert x[y == 1].std(0).sub(0.5).abs().max() < 0.02


def test_least_squares_blocks_follow_decor():
    n, d = 4, 3
    ds = datasets.least_squares(SEEDS, n=n, dim=d)
    assert ds.task == "regression" and ds.x_train.shape == (n * d, d)
    blocks = ds.x_train.reshape(n, d, d)
    for i in range(n):
        assert torch.allclose(blocks[i], (i + 1) / np.sqrt(n) * torch.eye(d))
    b = datasets.least_squares(Seeds(0), n=400, dim=50, zeta=4.0).y_train.reshape(400, 50).double()
    # b_i ~ N(0, zeta / i^2 I): the rescaled targets i * b_i / sqrt(zeta) are standard normal
    scaled = b * torch.arange(1, 401, dtype=torch.float64)[:, None] / 2.0
    assert abs(float(scaled.std()) - 1.0) < 0.02


def test_libsvm_file_reads_offline(tmp_path):
    lines = [f"{'+1' if i % 3 else '-1'} 1:{i / 10} 3:{1 - i / 10}" for i in range(10)]
    (tmp_path / "a9a").write_text("\n".join(lines) + "\n")
    ds = datasets.libsvm(SEEDS, str(tmp_path), file="a9a", test_file=None, features=4)  # 20% held out
    assert ds.num_classes == 2 and ds.input_shape == (4,)
    assert len(ds.x_train) == 8 and len(ds.x_test) == 2
    assert set(torch.cat([ds.y_train, ds.y_test]).tolist()) == {0, 1}


LABELS = np.repeat(np.arange(10), 60)


def _check_disjoint(parts, total):
    flat = np.concatenate(parts)
    assert len(np.unique(flat)) == len(flat)
    assert flat.min() >= 0 and flat.max() < total


def test_iid_and_one_per_node():
    rng = np.random.default_rng(0)
    parts = part.iid(LABELS, 7, rng)
    _check_disjoint(parts, 600)
    assert sum(map(len, parts)) == 600 and {len(p) for p in parts} == {85, 86}
    parts = part.iid(LABELS, 10, rng, per_node=5)
    assert [len(p) for p in parts] == [5] * 10
    ones = part.one_per_node(LABELS, 600, rng)
    _check_disjoint(ones, 600)
    with pytest.raises(ConfigError, match="partition.per_node=2"):
        part.iid(LABELS, 400, rng, per_node=2)


def _classes_per_node(parts):
    return np.mean([len(np.unique(LABELS[p])) for p in parts])


def test_dirichlet_skew_grows_as_alpha_shrinks():
    skewed = part.dirichlet(LABELS, 20, np.random.default_rng(0), alpha=0.05, per_node=30)
    even = part.dirichlet(LABELS, 20, np.random.default_rng(0), alpha=100.0, per_node=30)
    for parts in (skewed, even):
        _check_disjoint(parts, 600)
        assert [len(p) for p in parts] == [30] * 20
    assert _classes_per_node(skewed) < 4 < 9 < _classes_per_node(even)
    with pytest.raises(ConfigError, match="partition.alpha=0"):
        part.dirichlet(LABELS, 20, np.random.default_rng(0), alpha=0)


def test_shards_give_two_labels_each():
    parts = part.shards(LABELS, 10, np.random.default_rng(0), shards_per_node=2)
    _check_disjoint(parts, 600)
    assert sum(map(len, parts)) == 600
    assert max(len(np.unique(LABELS[p])) for p in parts) <= 2


def test_contiguous_blocks():
    parts = part.contiguous(np.zeros(12), 4, np.random.default_rng(0))
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    uneven = part.contiguous(np.zeros(12), 5, np.random.default_rng(0))  # the first 12 % 5 blocks one longer
    assert [p.tolist() for p in uneven] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9], [10, 11]]


def _local():
    x = torch.arange(10, dtype=torch.float32)[:, None] * 10
    y = torch.arange(10)
    parts = [np.array([0, 1, 2, 3, 4]), np.array([5, 6]), np.array([7, 8, 9])]
    return part.LocalData.stack(x, y, parts)


def test_stack_pads_and_masks():
    local = _local()
    assert local.x.shape == (3, 5, 1) and local.counts.tolist() == [5, 2, 3]
    assert local.mask.tolist() == [[True] * 5, [True, True, False, False, False], [True] * 3 + [False] * 2]
    assert local.y[1, :2].tolist() == [5, 6] and local.y[2, :3].tolist() == [7, 8, 9]
    with pytest.raises(ConfigError, match="no data"):
        part.LocalData.stack(local.x, local.y, [np.array([0]), np.array([], dtype=np.int64)])


def test_minibatches_are_distinct_own_samples_drawn_uniformly():
    local = _local()
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(10)
    draws = 4000
    for _ in range(draws):
        x, y, w = local.batch(2, gen)
        assert (y[:, 0] != y[:, 1]).all()
        assert (y[0] < 5).all() and ((y[1] >= 5) & (y[1] < 7)).all() and (y[2] >= 7).all()
        assert torch.equal(x[..., 0], y.float() * 10) and (w == 1).all()
        counts += torch.bincount(y.reshape(-1), minlength=10)
    # each sample of a node with m samples is in a batch of 2 with probability 2/m
    expected = torch.tensor([2 / 5] * 5 + [1.0] * 2 + [2 / 3] * 3) * draws
    assert ((counts - expected).abs() / expected).max() < 0.06
    x, y, w = local.batch(None, gen)
    assert torch.equal(w.bool(), local.mask)


def test_require_batch():
    local = _local()
    local.require_batch(2)
    local.require_batch(None)
    with pytest.raises(ConfigError, match="protocol.batch_size=3: the smallest local set holds 2"):
        local.require_batch(3)
