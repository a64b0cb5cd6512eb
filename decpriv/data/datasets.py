"""Datasets. Every loader returns a :class:`Dataset` with a train split (partitioned over nodes) and a
held-out test split (accuracy, membership inference). MNIST, Fashion-MNIST, CIFAR-10/100 and LibSVM's a9a
are downloaded on first use into ``data.root`` (default: the user cache folder, :func:`cache_folder`),
the torchvision sets by torchvision's own download with its checksums; offline, one sentence names the
folder to fill by hand.

Images are kept in [0, 1] with shape (C, H, W) so that reconstructions are scored on the data range.
"""

import os
import pickle
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import torch

from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.random.streams import Seeds


@dataclass(frozen=True, eq=False)
class Dataset:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    task: str = "classification"  # or "regression"
    data_range: tuple[float, float] | None = None  # set for images: the box reconstructions live in

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x_train.dim() == 4


TestFraction = Annotated[float, Range(ge=0, lt=1, what="the held-out share of the samples", eg=0.25)]


def _split(name, x, y, test_fraction: float, rng: np.random.Generator, **kw) -> Dataset:
    order = rng.permutation(len(x))
    n_test = int(round(test_fraction * len(x)))
    test, train = order[:n_test], order[n_test:]
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    return Dataset(name, x[train], y[train], x[test], y[test], **kw)


@checked("data")
def digits(seeds: Seeds, test_fraction: TestFraction = 0.25) -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1797 images, 10 classes), pixels scaled to [0, 1]. Read from
    its packaged file as ``load_digits`` reads it, without importing scikit-learn (a second per process)."""
    from importlib.util import find_spec

    package = Path(find_spec("sklearn").submodule_search_locations[0])
    raw = np.loadtxt(package / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    x = (raw[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[:, None]
    y = raw[:, -1].astype(np.int64)
    return _split(
        "digits", x, y, test_fraction, seeds.numpy("data.split"), num_classes=10, data_range=(0.0, 1.0)
    )


@checked("data")
def breast_cancer(seeds: Seeds, test_fraction: TestFraction = 0.25) -> Dataset:
    """scikit-learn's Wisconsin breast cancer (569 x 30, binary), features standardised."""
    from sklearn.datasets import load_breast_cancer

    raw = load_breast_cancer()
    x = raw.data
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    return _split(
        "breast_cancer",
        x,
        raw.target.astype(np.int64),
        test_fraction,
        seeds.numpy("data.split"),
        num_classes=2,
    )


@checked("data")
def gaussian_classes(
    seeds: Seeds,
    size: Annotated[int, Range(ge=1, what="the number of samples")] = 2000,
    dim: Annotated[int, Range(ge=1, what="the number of features")] = 2,
    num_classes: Annotated[int, Range(ge=2, what="a classifier's number of classes")] = 2,
    separation: float = 1.0,
    std: float = 0.5,
    test_fraction: TestFraction = 0.25,
) -> Dataset:
    """Gaussian classes: class k has mean ``separation * (2k/(K-1) - 1) * 1`` and covariance std^2 I.

    With the defaults this is Yu 2023's logistic-regression data: means (-1,-1) and (1,1), covariance 0.25 I.
    """
    rng = seeds.numpy("data.generate")
    y = rng.integers(num_classes, size=size)
    centres = separation * (2.0 * np.arange(num_classes) / max(num_classes - 1, 1) - 1.0)
    x = centres[y][:, None] + std * rng.standard_normal((size, dim))
    return _split(
        "gaussian_classes",
        x.astype(np.float32),
        y.astype(np.int64),
        test_fraction,
        seeds.numpy("data.split"),
        num_classes=num_classes,
    )


def least_squares(seeds: Seeds, n: int = 16, dim: int = 10, zeta: float = 1.0) -> Dataset:
    """DECOR's synthetic quadratics (Allouah et al. 2024, Sec. 5): node i (1-based) holds
    f_i(x) = 1/2 ||A_i x - b_i||^2 with A_i = (i / sqrt(n)) I_d and b_i ~ N(0, (zeta / i^2) I_d).

    Stored as d rows per node in node order (row k of A_i, target b_ik), to be split with
    ``partition=contiguous`` so node i receives exactly its own rows. The test split repeats the train
    split (the metric is the optimality gap, not generalisation).
    """
    rng = seeds.numpy("data.generate")
    scale = np.arange(1, n + 1) / np.sqrt(n)
    x = (scale[:, None, None] * np.eye(dim)[None]).reshape(n * dim, dim)
    b = (np.sqrt(zeta) / np.arange(1, n + 1))[:, None] * rng.standard_normal((n, dim))
    xt = torch.as_tensor(x, dtype=torch.float32)
    yt = torch.as_tensor(b.reshape(-1), dtype=torch.float32)
    return Dataset("least_squares", xt, yt, xt, yt, num_classes=0, task="regression")


def cache_folder(name: str) -> Path:
    """Where a downloaded data set lives unless ``data.root`` says otherwise:
    ``$XDG_CACHE_HOME/decpriv/<name>`` (``~/.cache/decpriv/<name>`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "decpriv" / name


def data_folder(root: str | None, name: str, key: str = "data.root") -> Path:
    """``data.root`` (created when missing), else the cache folder of ``name``."""
    path = Path(root).expanduser() if root else cache_folder(name)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise bad_value(
            key, str(path), f"cannot be created ({error.strerror})", f"set {key} to a writable folder"
        ) from None
    return path


@contextmanager
def _kept_only_when_read(path: Path) -> Iterator[None]:
    """The folders of ``path`` that do not exist yet are removed again (when empty) if reading the data
    set fails: a refused ``data.root=/nonexistent`` leaves no folder tree behind."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    try:
        yield
    except BaseException:
        if missing:  # the folder was made for this read (with what a failed download left): all of it
            shutil.rmtree(missing[0], ignore_errors=True)
        for folder in missing[1:]:  # then its new parents, deepest first
            with suppress(OSError):
                folder.rmdir()
        raise


def unreadable_error(name: str, path: Path, error: Exception, key: str = "data.root") -> Exception:
    """The one sentence for data set files that are there but are not the data set's."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return bad_value(
        key,
        str(path),
        f"the {name} files there do not read as {name} ({type(error).__name__}: {reason[:120]})",
        "delete them to download them again, or put the right files there",
    )


def offline_error(name: str, path: Path, error: Exception, by_hand: str, key: str = "data.root") -> Exception:
    """The one sentence for a data set that is not there and could not be downloaded."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return bad_value(
        key,
        str(path),
        f"{name} is not there and could not be downloaded ({reason})",
        f"put {by_hand} in {path} by hand, or run once with the internet",
    )


def _torchvision(cls_name: str, root: str | None, seeds: Seeds, name: str, num_classes: int) -> Dataset:
    """A torchvision image set, downloaded on first use by torchvision itself (its mirrors, its md5
    checksums of every file), then read from ``data.root``."""
    from urllib.error import URLError

    import torchvision

    path = Path(root).expanduser() if root else cache_folder(name)
    cls = getattr(torchvision.datasets, cls_name)
    with _kept_only_when_read(path):
        path = data_folder(root, name)
        try:
            train = cls(str(path), train=True, download=True)
            test = cls(str(path), train=False, download=True)
        except (RuntimeError, URLError, OSError) as error:
            files = f"torchvision's {cls_name} files (as torchvision.datasets.{cls_name}(root, download=True) lays them out)"
            raise offline_error(name, path, error, files) from None
        except (AssertionError, ValueError, EOFError, pickle.UnpicklingError) as error:  # files not the set's
            raise unreadable_error(name, path, error) from None

    def tensors(ds):
        x = torch.as_tensor(np.asarray(ds.data), dtype=torch.float32) / 255.0
        x = x[:, None] if x.dim() == 3 else x.permute(0, 3, 1, 2)
        return x.contiguous(), torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)

    (xtr, ytr), (xte, yte) = tensors(train), tensors(test)
    return Dataset(name, xtr, ytr, xte, yte, num_classes=num_classes, data_range=(0.0, 1.0))


def mnist(seeds: Seeds, root: str | None = None) -> Dataset:
    """MNIST (LeCun et al. 1998), downloaded on first use (torchvision layout under ``data.root``)."""
    return _torchvision("MNIST", root, seeds, "mnist", 10)


def fashion_mnist(seeds: Seeds, root: str | None = None) -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017), downloaded on first use (torchvision layout)."""
    return _torchvision("FashionMNIST", root, seeds, "fashion_mnist", 10)


def cifar10(seeds: Seeds, root: str | None = None) -> Dataset:
    """CIFAR-10 (Krizhevsky 2009), downloaded on first use (torchvision layout)."""
    return _torchvision("CIFAR10", root, seeds, "cifar10", 10)


def cifar100(seeds: Seeds, root: str | None = None) -> Dataset:
    """CIFAR-100 (Krizhevsky 2009), downloaded on first use (torchvision layout)."""
    return _torchvision("CIFAR100", root, seeds, "cifar100", 100)


LIBSVM_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"  # a9a, a9a.t


def _fetched(path: Path, files: list[str], url: str, name: str) -> None:
    """Download each of ``files`` missing under ``path`` from ``url`` + file (torchvision's
    ``download_url``; LibSVM publishes no checksum, so none is checked: a file that does not parse is
    refused when read)."""
    from urllib.error import URLError

    from torchvision.datasets.utils import download_url

    for file in files:
        if not (path / file).is_file():
            try:
                download_url(url + file, str(path), file)
            except (RuntimeError, URLError, OSError) as error:
                raise offline_error(name, path, error, f"{', '.join(files)} from {url}") from None


def libsvm(
    seeds: Seeds,
    root: str | None = None,
    file: str = "a9a",
    test_file: str | None = "a9a.t",
    features: int = 123,
    url: str = LIBSVM_URL,
) -> Dataset:
    """A LibSVM file (e.g. a9a, 123 binary features) read with scikit-learn; labels mapped to 0..K-1.
    Downloaded on first use from ``url`` (the LibSVM binary data sets page, or a mirror of it)."""
    from sklearn.datasets import load_svmlight_file

    where = Path(root).expanduser() if root else cache_folder("libsvm")
    with _kept_only_when_read(where):
        path = data_folder(root, "libsvm")
        _fetched(path, [f for f in (file, test_file) if f], url, file)
    try:
        x, y = load_svmlight_file(str(path / file), n_features=features)
        test = load_svmlight_file(str(path / test_file), n_features=features) if test_file else None
    except ValueError as error:  # a file there that is not LibSVM text
        raise unreadable_error(file, path, error) from None
    labels = np.unique(y)
    to_int = {v: i for i, v in enumerate(labels)}
    x = np.asarray(x.todense(), dtype=np.float32)
    y = np.array([to_int[v] for v in y], dtype=np.int64)
    if test is not None:
        xt, yt = test
        xt = torch.as_tensor(np.asarray(xt.todense(), dtype=np.float32))
        yt = torch.as_tensor(np.array([to_int[v] for v in yt], dtype=np.int64))
        return Dataset(file, torch.as_tensor(x), torch.as_tensor(y), xt, yt, num_classes=len(labels))
    return _split(file, x, y, 0.2, seeds.numpy("data.split"), num_classes=len(labels))
