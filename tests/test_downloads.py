"""Real data sets on first use, tested without the internet: a loopback HTTP server serves tiny files in
the real formats (MNIST's gzipped IDX, CIFAR-10's pickled batches in a tar.gz, LibSVM text) and the loaders
are pointed at it.

What is checked: torchvision's own download, md5 verification (a corrupted file is refused), extraction
and parsing; decpriv's cache folder, its conversion to tensors, the second run reading the cache without
the network, and the one sentence when the files cannot be fetched. What is not: the real files and
their real checksums, which are torchvision's constants. The tiny files' checksums go in through
torchvision's public class attributes (``MNIST.mirrors`` / ``resources``, ``CIFAR10.url`` / ``tgz_md5``
/ ``train_list`` / ``test_list`` / ``meta``), as a mirror of the real files would be declared.
"""

import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10, MNIST

from decpriv import NO_USER_CONF
from decpriv.cli import main
from decpriv.data import datasets
from decpriv.errors import ConfigError
from decpriv.random.streams import Seeds

SEEDS = Seeds(0)
pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")  # pytest resets the import-time filter


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no request lines in the test output
        pass


@pytest.fixture
def server(tmp_path):
    """(folder served, base URL) of a loopback HTTP server; stopped after the test."""
    folder = tmp_path / "served"
    folder.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def idx(array: np.ndarray) -> bytes:
    """The IDX format MNIST ships in: magic (0, 0, type 0x08 = ubyte, ndim), the sizes, the bytes."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def tiny_mnist(folder: Path, rng: np.random.Generator) -> tuple[list[tuple[str, str]], dict]:
    """Gzipped IDX files for 12 training and 6 test images; returns torchvision's resources list."""
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (12, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, 12),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (6, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, 6),
    }
    resources = []
    for name, array in arrays.items():
        data = gzip.compress(idx(array))
        (folder / f"{name}.gz").write_bytes(data)
        resources.append((f"{name}.gz", md5(data)))
    return resources, arrays


def test_mnist_downloads_on_first_use_then_reads_the_cache(server, tmp_path, monkeypatch):
    folder, url = server
    resources, arrays = tiny_mnist(folder, np.random.default_rng(0))
    monkeypatch.setattr(MNIST, "mirrors", [url])
    monkeypatch.setattr(MNIST, "resources", resources)
    root = tmp_path / "cache"
    data = datasets.mnist(SEEDS, str(root))
    assert data.x_train.shape == (12, 1, 28, 28) and data.x_test.shape == (6, 1, 28, 28)
    expected = torch.as_tensor(arrays["train-images-idx3-ubyte"], dtype=torch.float32)[:, None] / 255
    assert torch.equal(data.x_train, expected) and data.data_range == (0.0, 1.0)
    assert data.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert (root / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()
    for served in folder.iterdir():
        served.unlink()  # the server has nothing left: a second load must come from the cache
    assert torch.equal(datasets.mnist(SEEDS, str(root)).x_train, expected)


def test_a_corrupted_download_is_refused_by_its_checksum(server, tmp_path, monkeypatch):
    folder, url = server
    resources, _ = tiny_mnist(folder, np.random.default_rng(0))
    (folder / resources[0][0]).write_bytes(gzip.compress(b"not the file the checksum names"))
    monkeypatch.setattr(MNIST, "mirrors", [url])
    monkeypatch.setattr(MNIST, "resources", resources)
    with pytest.raises(ConfigError, match="could not be downloaded"):
        datasets.mnist(SEEDS, str(tmp_path / "cache"))


def test_offline_is_one_sentence_naming_the_folder_to_fill(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # the discard port: nothing listens
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "data=mnist", "~attack", "protocol.rounds=1"]) == 2
    err = capsys.readouterr().err.strip()
    folder = tmp_path / "xdg" / "decpriv" / "mnist"
    assert err.startswith(f"error: data.root='{folder}': mnist is not there and could not be downloaded")
    assert "put torchvision's MNIST files" in err and f"in {folder} by hand" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_a_run_on_downloaded_mnist_end_to_end(server, tmp_path, monkeypatch):
    folder, url = server
    resources, _ = tiny_mnist(folder, np.random.default_rng(1))
    monkeypatch.setattr(MNIST, "mirrors", [url])
    monkeypatch.setattr(MNIST, "resources", resources)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "data=mnist", f"data.root={tmp_path / 'cache'}", "topology.n=4", "~attack"]
    assert main([*argv, "protocol.rounds=2", "protocol.batch_size=null", "hydra.run.dir=r"]) == 0
    assert (tmp_path / "r" / "summary.csv").is_file()


def _batch(rng: np.random.Generator, k: int) -> bytes:
    return pickle.dumps(
        {
            "data": rng.integers(0, 256, (k, 3072), dtype=np.uint8),
            "labels": [int(v) for v in rng.integers(0, 10, k)],
        }
    )


def test_cifar10_downloads_its_archive_and_checks_every_batch(server, tmp_path, monkeypatch):
    folder, url = server
    rng = np.random.default_rng(2)
    files = {f"data_batch_{i}": _batch(rng, 3) for i in range(1, 6)}
    files["test_batch"] = _batch(rng, 4)
    files["batches.meta"] = pickle.dumps({"label_names": [f"class{i}" for i in range(10)]})
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (folder / "cifar-10-python.tar.gz").write_bytes(archive.getvalue())
    monkeypatch.setattr(CIFAR10, "url", url + "cifar-10-python.tar.gz")
    monkeypatch.setattr(CIFAR10, "tgz_md5", md5(archive.getvalue()))
    monkeypatch.setattr(
        CIFAR10, "train_list", [[f"data_batch_{i}", md5(files[f"data_batch_{i}"])] for i in range(1, 6)]
    )
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5(files["test_batch"])]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5(files["batches.meta"])})
    data = datasets.cifar10(SEEDS, str(tmp_path / "cache"))
    assert data.x_train.shape == (15, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    first = pickle.loads(files["data_batch_1"])
    assert torch.equal(
        data.x_train[0], torch.as_tensor(first["data"][0].reshape(3, 32, 32), dtype=torch.float32) / 255
    )
    assert data.y_train[:3].tolist() == first["labels"]


def test_libsvm_a9a_downloads_both_files(server, tmp_path):
    folder, url = server
    (folder / "a9a").write_text("-1 3:1 11:1\n+1 1:1 123:1\n-1 2:1\n+1 5:1 7:1\n")
    (folder / "a9a.t").write_text("+1 4:1\n-1 9:1\n")
    data = datasets.libsvm(SEEDS, str(tmp_path / "cache"), url=url)
    assert data.x_train.shape == (4, 123) and data.x_test.shape == (2, 123)
    assert data.x_train[1, 122] == 1 and data.y_train.tolist() == [0, 1, 0, 1]
    with pytest.raises(
        ConfigError, match=r"a9a is not there and could not be downloaded.*put a9a, a9a.t from"
    ):
        datasets.libsvm(SEEDS, str(tmp_path / "other"), url="http://127.0.0.1:9/")


def test_the_snap_ego_graph_downloads_and_reads_as_an_edge_list(server, tmp_path):
    from decpriv.data.snap import facebook_ego

    folder, url = server
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"1 2\n2 3\n3 1\n3 4\n7 8\n"  # a triangle with a tail, and a pair apart
        info = tarfile.TarInfo("facebook/414.edges")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (folder / "facebook.tar.gz").write_bytes(archive.getvalue())
    with pytest.warns(UserWarning, match="kept the largest, 4 of 6 nodes"):
        graph = facebook_ego(414, str(tmp_path / "cache"), url + "facebook.tar.gz")
    assert graph.number_of_nodes() == 4 and graph.number_of_edges() == 4
    with pytest.raises(ConfigError, match=r"topology.ego=5: SNAP's archive has no facebook/5.edges"):
        facebook_ego(5, str(tmp_path / "cache"), url + "facebook.tar.gz")


@pytest.mark.parametrize(
    "preset", ["yu_e2_mnist", "yu_e3_mnist", "elmrini_fig4_mnist", "pasquini_fig3_cifar10"]
)
def test_paper_scale_presets_compose_on_their_real_data(preset):
    """The presets at paper scale name the real data set (their runs download it: not in CI)."""
    from decpriv.api import compose_config

    cfg = compose_config([f"experiment={preset}"])[0]
    wanted = "cifar10" if "cifar" in preset else "mnist"
    assert cfg.data._target_ == f"decpriv.data.datasets.{wanted}" and cfg.data.root is None
