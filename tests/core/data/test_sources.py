"""Data directory resolution, downloads from a loopback HTTP server, and the MNIST loaders.

No test here contacts anything but 127.0.0.1.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.data import (
    KNOWN_FILES,
    ensure_file,
    ensure_files,
    file_md5,
    load_mnist,
    mnist_splits,
    resolve_data_dir,
    sources,
    url_for,
    verify_md5,
)
from bbb.errors import DataError, UserError

NAME = "t10k-labels-idx1-ubyte.gz"


def idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.fixture(autouse=True)
def _no_proxy_no_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep urllib away from any proxy or mirror configured in the environment."""
    for var in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "BBB_DATA_URL",
    ):
        monkeypatch.delenv(var, raising=False)


# ---------------------------------------------------------------- resolution


def test_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home, cache, env, arg = (tmp_path / n for n in ("home", "cache", "env", "arg"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("BBB_DATA", raising=False)
    assert resolve_data_dir() == home / ".cache" / "bbb"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert resolve_data_dir() == home / ".cache" / "bbb"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert resolve_data_dir() == cache / "bbb"
    monkeypatch.setenv("BBB_DATA", "")
    assert resolve_data_dir() == cache / "bbb"
    monkeypatch.setenv("BBB_DATA", str(env))
    assert resolve_data_dir() == env
    assert resolve_data_dir(arg) == arg
    assert resolve_data_dir(str(arg)) == arg
    assert not arg.exists() and not env.exists()  # resolving creates nothing


def test_relative_data_dir_becomes_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_data_dir("data") == tmp_path / "data"


def test_url_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert url_for("mnist", NAME) == "https://ossci-datasets.s3.amazonaws.com/mnist/" + NAME
    assert url_for("fashion-mnist", NAME).startswith("http://fashion-mnist.s3-website.")
    assert url_for("mushroom", "agaricus-lepiota.data") == (
        "https://archive.ics.uci.edu/ml/machine-learning-databases/mushroom/agaricus-lepiota.data"
    )
    assert url_for("mnist", NAME, "http://127.0.0.1:1/x") == "http://127.0.0.1:1/x/" + NAME
    monkeypatch.setenv("BBB_DATA_URL", "http://127.0.0.1:1/mirror/")
    assert url_for("mnist", NAME) == "http://127.0.0.1:1/mirror/mnist/" + NAME
    assert url_for("mnist", NAME, "http://127.0.0.1:2/") == "http://127.0.0.1:2/" + NAME


def test_known_files_table() -> None:
    assert set(KNOWN_FILES) == {"mnist", "fashion-mnist", "mushroom"}
    for files in KNOWN_FILES.values():
        for digest in files.values():
            assert len(digest) == 32 and int(digest, 16) >= 0


def test_verify_md5(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"hello")
    assert file_md5(path) == md5(b"hello")
    verify_md5(path, md5(b"hello"))
    verify_md5(path, md5(b"hello").upper())
    with pytest.raises(DataError, match=r"f\.bin: checksum mismatch: expected 0+, got 5d41"):
        verify_md5(path, "0" * 32)
    with pytest.raises(DataError, match="nope"):
        verify_md5(tmp_path / "nope", "0" * 32)


def test_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="valid names: fashion-mnist, mnist, mushroom"):
        ensure_file("cifar", "x", data_dir=tmp_path)
    with pytest.raises(DataError, match="unknown file"):
        ensure_file("mnist", "x.gz", data_dir=tmp_path)


# ---------------------------------------------------------------- local files


def test_existing_file_is_used_without_download_when_not_verified(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    folder.mkdir()
    (folder / NAME).write_bytes(b"not checked on load")
    assert ensure_file("mnist", NAME, data_dir=tmp_path, download=False, verify=False) == folder / NAME
    assert ensure_file(
        "mnist", NAME, data_dir=tmp_path, base_url="http://127.0.0.1:9/", verify=False
    ) == (folder / NAME)
    assert listing(folder) == [NAME]


def test_missing_without_download_names_everything(tmp_path: Path) -> None:
    names = ["t10k-images-idx3-ubyte.gz", NAME]
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / names[0]).write_bytes(b"present")
    with pytest.raises(DataError) as excinfo:
        ensure_files("mnist", names, data_dir=tmp_path, download=False, verify=False)
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert f"mnist/{NAME}" in msg and names[0] not in msg
    assert str(tmp_path) in msg and "BBB_DATA" in msg and "--data-dir" in msg


# ---------------------------------------------------------------- downloads


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.routes[path] = (body, declared Content-Length)``."""

    server: _Server

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        body, length = route
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, tuple[bytes, int]] = {}
        self.hits: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    """A loopback HTTP server in a thread, shut down after the test."""
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


@pytest.fixture
def labels_gz() -> bytes:
    return idx_gz(np.array([3, 1, 4, 1, 5], dtype=np.uint8))


@pytest.fixture
def serve(server: _Server, labels_gz: bytes, monkeypatch: pytest.MonkeyPatch):
    """``serve(path, extra=0, checksum=None)``: the server sends the labels file at ``path``
    (declaring ``extra`` bytes more than it sends), and mnist/NAME's known checksum is
    ``checksum`` (default: the file's)."""

    def serve(path: str, extra: int = 0, checksum: str | None = None) -> None:
        server.routes[path] = (labels_gz, len(labels_gz) + extra)
        monkeypatch.setitem(KNOWN_FILES["mnist"], NAME, checksum or md5(labels_gz))

    return serve


def test_download_verifies_and_places_file(server: _Server, serve, labels_gz: bytes, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    serve(f"/files/{NAME}")
    path = ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url + "/files/")
    assert path == tmp_path / "mnist" / NAME
    assert path.read_bytes() == labels_gz
    assert listing(tmp_path / "mnist") == [NAME]  # the stamp is in the user's cache, not here
    # present now: no second request, and no second hash (checked while downloading)
    monkeypatch.setattr(sources, "file_md5", lambda p: pytest.fail("hashed again"))
    ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url + "/files/")
    assert server.hits == [f"/files/{NAME}"]


def test_download_through_mirror_env(server: _Server, serve, labels_gz: bytes, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path) -> None:
    serve(f"/m/mnist/{NAME}")
    monkeypatch.setenv("BBB_DATA_URL", server.url + "/m")
    assert ensure_file("mnist", NAME, data_dir=tmp_path).read_bytes() == labels_gz


def test_checksum_mismatch_leaves_nothing(server: _Server, serve, labels_gz: bytes, tmp_path: Path) -> None:
    serve(f"/{NAME}", checksum="0" * 32)
    with pytest.raises(DataError) as excinfo:
        ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url)
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert msg.startswith(
        f"checksum mismatch for {server.url}/{NAME}: expected {'0' * 32}, got {md5(labels_gz)}"
    )
    assert listing(tmp_path / "mnist") == []


def test_short_transfer_leaves_nothing(server: _Server, serve, tmp_path: Path) -> None:
    serve(f"/{NAME}", extra=100)  # the server promises more bytes than it sends, then hangs up
    with pytest.raises(DataError) as excinfo:
        ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url)
    assert "\n" not in str(excinfo.value) and NAME in str(excinfo.value)
    assert listing(tmp_path / "mnist") == []


def test_http_404(server: _Server, tmp_path: Path) -> None:
    with pytest.raises(DataError) as excinfo:
        ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url)
    msg = str(excinfo.value)
    assert "404" in msg and f"mnist/{NAME} not found in {tmp_path}" in msg
    assert listing(tmp_path / "mnist") == []


def test_interrupt_during_download_leaves_nothing(
    server: _Server,
    labels_gz: bytes,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    class Bar:
        def update(self, n: int) -> None:
            raise KeyboardInterrupt

        def close(self) -> None:
            pass

    server.routes[f"/{NAME}"] = (labels_gz, len(labels_gz))
    monkeypatch.setitem(KNOWN_FILES["mnist"], NAME, md5(labels_gz))
    monkeypatch.setattr(sources, "_progress", lambda total, desc: Bar())
    with pytest.raises(KeyboardInterrupt):
        ensure_file("mnist", NAME, data_dir=tmp_path, base_url=server.url)
    assert listing(tmp_path / "mnist") == []


def test_unreachable_server_gives_offline_message(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        with pytest.raises(DataError) as excinfo:
            ensure_files(
                "mnist",
                ["t10k-images-idx3-ubyte.gz", NAME],
                data_dir=tmp_path,
                base_url=url,
            )
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert f"mnist/t10k-images-idx3-ubyte.gz, mnist/{NAME} not found in {tmp_path}" in msg
    assert url in msg and "BBB_DATA" in msg and "--data-dir" in msg
    assert listing(tmp_path / "mnist") == []


# ---------------------------------------------------------------- MNIST loaders


def fake_mnist(root: Path, dataset: str = "mnist", n_train: int = 30, n_test: int = 7) -> None:
    """Write tiny MNIST-format files; pixel (i, 0, 0) is the image index modulo 256."""
    rng = np.random.default_rng(0)
    folder = root / dataset
    folder.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[:, 0, 0] = np.arange(n) % 256
        images[0, 5, 5] = 255
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(idx_gz(images))
        (folder / f"{split}-labels-idx1-ubyte.gz").write_bytes(idx_gz(labels))


def test_load_mnist_synthetic(tmp_path: Path) -> None:
    fake_mnist(tmp_path, "fashion-mnist")
    x, y = load_mnist("test", "fashion-mnist", data_dir=tmp_path, download=False, verify=False)
    assert x.shape == (7, 28, 28) and x.dtype == torch.uint8
    assert y.dtype == torch.int64 and y.tolist() == list(range(7))
    with pytest.raises(DataError, match="mnist/t10k"):
        load_mnist("test", "mnist", data_dir=tmp_path, download=False, verify=False)


def test_load_mnist_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="valid names: mnist, fashion-mnist"):
        load_mnist("train", "kmnist", data_dir=tmp_path)
    with pytest.raises(DataError, match="valid splits: train, test"):
        load_mnist("validation", data_dir=tmp_path)


def test_load_mnist_rejects_bad_labels_and_shapes(tmp_path: Path) -> None:
    fake_mnist(tmp_path)
    folder = tmp_path / "mnist"
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(idx_gz(np.full(7, 10, np.uint8)))
    with pytest.raises(DataError, match="label 10 out of range"):
        load_mnist("test", data_dir=tmp_path, download=False, verify=False)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(idx_gz(np.zeros((30, 27, 28), np.uint8)))
    with pytest.raises(DataError, match="27x28, expected 28x28"):
        load_mnist("train", data_dir=tmp_path, download=False, verify=False)


def test_mnist_splits_synthetic(tmp_path: Path) -> None:
    fake_mnist(tmp_path)
    d = mnist_splits(data_dir=tmp_path, val_size=10, seed=3, download=False, verify=False)
    assert set(d) == {"train_x", "train_y", "val_x", "val_y", "test_x", "test_y"}
    assert d["train_x"].shape == (20, 784) and d["val_x"].shape == (10, 784)
    assert d["test_x"].shape == (7, 784)
    for key in ("train_x", "val_x", "test_x"):
        assert d[key].dtype == torch.float32
    for key in ("train_y", "val_y", "test_y"):
        assert d[key].dtype == torch.int64
    assert float(d["train_x"].max().maximum(d["val_x"].max())) == pytest.approx(255 / 126)
    # train and validation partition the training images (pixel 0 holds the index)
    ids = torch.cat([d["train_x"][:, 0], d["val_x"][:, 0]]) * 126
    assert sorted(ids.round().long().tolist()) == list(range(30))
    # labels travel with their images
    assert torch.equal(d["train_y"], (d["train_x"][:, 0] * 126).round().long() % 10)

    again = mnist_splits(data_dir=tmp_path, val_size=10, seed=3, download=False, verify=False)
    assert all(torch.equal(d[k], again[k]) for k in d)
    other = mnist_splits(data_dir=tmp_path, val_size=10, seed=4, download=False, verify=False)
    assert not torch.equal(d["val_y"], other["val_y"]) or not torch.equal(
        d["val_x"], other["val_x"]
    )

    unit = mnist_splits(data_dir=tmp_path, scale=255, val_size=0, download=False, verify=False)
    assert unit["val_x"].shape == (0, 784) and unit["val_y"].shape == (0,)
    assert unit["train_x"].shape == (30, 784)
    assert float(unit["train_x"].max()) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scale": 0.0}, "scale"),
        ({"scale": -1.0}, "scale"),
        ({"scale": float("nan")}, "scale"),
        ({"val_size": 30}, "val_size"),
        ({"val_size": -1}, "val_size"),
    ],
)
def test_mnist_splits_bad_arguments(tmp_path: Path, kwargs: dict[str, float], match: str) -> None:
    fake_mnist(tmp_path)
    with pytest.raises(UserError, match=match):
        mnist_splits(data_dir=tmp_path, download=False, verify=False, **kwargs)  # type: ignore[arg-type]
