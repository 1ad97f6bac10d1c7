"""Where data files live, where they come from, and how they get there.

Files are stored as ``<data dir>/<dataset>/<original file name>``, for example
``~/.cache/bbb/mnist/train-images-idx3-ubyte.gz``. The data directory is, in order: the
``data_dir`` argument (the command line's ``--data-dir``), the ``BBB_DATA`` environment
variable, or the per-user cache ``$XDG_CACHE_HOME/bbb`` (``~/.cache/bbb``).

A missing file is downloaded from its public URL into a temporary file in the same folder,
checked against its official MD5, then renamed into place, so a partial or wrong file is
never left behind. ``BBB_DATA_URL`` points downloads at a mirror laid out like the data
directory (``<BBB_DATA_URL>/<dataset>/<file name>``).

A file that is already there is checked against its official MD5 once: a stamp (its size,
modification time and inode) is then kept in the user's cache, ``<cache>/verified/<folder
key>.json`` (the cache: ``$BBB_CACHE``, else ``$XDG_CACHE_HOME/bbb``, else ``~/.cache/bbb``), so
later runs do not hash it again. Verifying never writes into the data folder (which may be
read-only or shared): only a download adds files there. Where the cache cannot be written the
file is hashed on every run (about 0.1 s for MNIST), silently. A damaged or truncated file is
named in a :class:`bbb.errors.DataError` instead of used. ``BBB_DATA_VERIFY=0`` turns the check
off (for a copy that differs from the official file on purpose).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from bbb.errors import DataError, DiskFullError, NetworkError, UserError
from bbb.io import atomic_write
from bbb.options import Dataset

__all__ = [
    "BASE_URLS",
    "DATASETS",
    "DOWNLOAD_TIMEOUT",
    "CACHE_ENV",
    "KNOWN_FILES",
    "VERIFY_ENV",
    "download_dataset",
    "ensure_file",
    "ensure_files",
    "file_md5",
    "resolve_data_dir",
    "url_for",
    "verify_files",
    "verify_md5",
]

log = logging.getLogger(__name__)

DATASETS: tuple[str, ...] = tuple(d.value for d in Dataset)
"""Names of the data sets this module knows, which are also their folder names."""

BASE_URLS: dict[str, str] = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "fashion-mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "mushroom": "https://archive.ics.uci.edu/ml/machine-learning-databases/mushroom/",
}
"""Public URL prefix of each data set; a file's URL is the prefix plus its name."""

KNOWN_FILES: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
    "mushroom": {
        "agaricus-lepiota.data": "08abc775ae2a79b402cc75f3a29e4b7d",
    },
}
"""Official MD5 of every known file: ``KNOWN_FILES[dataset][file name]``."""

DOWNLOAD_TIMEOUT = 30.0
"""Seconds to wait for the server to connect or to send more data."""

_CHUNK = 1 << 20

CACHE_ENV = "BBB_CACHE"
"""Environment variable: the folder of the user's cache (the stamps of verified files), instead of
``$XDG_CACHE_HOME/bbb`` or ``~/.cache/bbb``."""

VERIFY_ENV = "BBB_DATA_VERIFY"
"""Environment variable: ``0`` (or ``no``, ``false``, ``off``) skips the MD5 check of files present."""

_STAMP_VERSION = 1


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _check_dataset(dataset: str) -> None:
    if dataset not in KNOWN_FILES:
        raise DataError(
            f"unknown data set {dataset!r}; valid names: {', '.join(sorted(KNOWN_FILES))}"
        )


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the data directory.

    Parameters
    ----------
    data_dir
        Explicit folder (the ``--data-dir`` option); wins over everything else.

    Returns
    -------
    Path
        ``data_dir`` if given, else ``$BBB_DATA`` if set and non-empty, else
        ``$XDG_CACHE_HOME/bbb`` (when that is an absolute path), else ``~/.cache/bbb``.
        The folder need not exist.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser().absolute()
    return _env_or_user_cache("BBB_DATA")


def _env_or_user_cache(env: str) -> Path:
    """The folder ``$env`` when that is set and non-empty, else the user's cache for bbb:
    ``$XDG_CACHE_HOME/bbb`` (when that is an absolute path), else ``~/.cache/bbb``."""
    own = os.environ.get(env, "")
    if own:
        return Path(own).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).expanduser().is_absolute():
        return Path(xdg).expanduser() / "bbb"
    return Path.home() / ".cache" / "bbb"


def url_for(dataset: str, filename: str, base_url: str | None = None) -> str:
    """Return the URL a file is downloaded from.

    ``base_url`` (prefix for the file name) wins, then ``$BBB_DATA_URL`` (a mirror laid out
    like the data directory: ``<BBB_DATA_URL>/<dataset>/<file name>``), then the official
    :data:`BASE_URLS` entry.
    """
    if base_url:
        return base_url.rstrip("/") + "/" + filename
    mirror = os.environ.get("BBB_DATA_URL", "")
    if mirror:
        return f"{mirror.rstrip('/')}/{dataset}/{filename}"
    return BASE_URLS[dataset] + filename


def file_md5(path: str | os.PathLike[str]) -> str:
    """Return the hexadecimal MD5 digest of a file."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_md5(path: str | os.PathLike[str], expected: str) -> None:
    """Check a file against its expected MD5.

    Raises
    ------
    DataError
        When the file is missing, unreadable, or its digest differs from ``expected``.
    """
    try:
        got = file_md5(path)
    except OSError as exc:
        raise DataError(_one_line(f"{path}: cannot read: {exc.strerror or exc}")) from None
    if got != expected.lower():
        try:
            size = f", {os.stat(path).st_size} bytes"
        except OSError:
            size = ""
        raise DataError(
            f"{path}: checksum mismatch: expected {expected.lower()}, got {got} (damaged or "
            f"truncated{size}); delete it and re-run to download again, or point --data-dir at a "
            "good copy"
        )


def _verify_wanted(verify: bool | None) -> bool:
    if verify is not None:
        return bool(verify)
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def _cache_root() -> Path:
    """The user's cache: ``$BBB_CACHE``, else ``$XDG_CACHE_HOME/bbb`` (when absolute), else
    ``~/.cache/bbb``."""
    return _env_or_user_cache(CACHE_ENV)


def _stamp_path(folder: Path) -> Path:
    """Where the stamp of the data-set folder ``folder`` is kept: in the user's cache, one file per
    folder (never in the data folder itself)."""
    key = hashlib.sha1(str(folder.absolute()).encode(), usedforsecurity=False).hexdigest()[:16]
    return _cache_root() / "verified" / f"{key}.json"


def _read_stamp(path: Path, folder: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(obj, dict) or obj.get("version") != _STAMP_VERSION:
        return {}
    if obj.get("folder") not in (None, str(folder.absolute())):
        return {}
    files = obj.get("files")
    return files if isinstance(files, dict) else {}


def _fingerprint(st: os.stat_result, md5: str) -> dict[str, Any]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "md5": md5.lower()}


def _write_stamp(folder: Path, verified: dict[str, dict[str, Any]]) -> None:
    """Record ``verified`` (file name -> fingerprint) in the user's cache; skipped (silently)
    where the cache cannot be written."""
    path = _stamp_path(folder)
    files = {**_read_stamp(path, folder), **verified}
    obj = {"version": _STAMP_VERSION, "folder": str(folder.absolute()), "files": files}

    def write(f: BinaryIO) -> None:
        f.write((json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())

    try:
        atomic_write(path, write)
    except (OSError, UserError) as exc:  # read-only, not a folder, or full: hash again next time
        log.debug("cannot write the data stamp %s: %s", path, exc)


def verify_files(dataset: str, paths: Iterable[str | os.PathLike[str]],
                 verify: bool | None = None) -> None:
    """Check files of ``dataset`` against their official MD5, once per file version.

    Files whose stamp (size, modification time, inode and expected MD5) matches are not
    hashed again; the stamps live in the user's cache (see the module's docstring), never
    beside the files.

    Raises
    ------
    DataError
        A file is unreadable or its MD5 is not the official one (damaged or truncated).
    """
    if not _verify_wanted(verify):
        return
    _check_dataset(dataset)
    by_folder: dict[Path, list[Path]] = {}
    for p in paths:
        p = Path(p)
        by_folder.setdefault(p.parent, []).append(p)
    for folder, files in by_folder.items():
        stamps = _read_stamp(_stamp_path(folder), folder)
        verified: dict[str, dict[str, Any]] = {}
        try:
            for path in files:
                expected = KNOWN_FILES[dataset].get(path.name)
                if expected is None:
                    continue
                try:
                    st = path.stat()
                except OSError as exc:
                    raise DataError(_one_line(f"{path}: cannot read: {exc.strerror or exc}")) from None
                fp = _fingerprint(st, expected)
                if stamps.get(path.name) == fp:
                    continue
                verify_md5(path, expected)
                verified[path.name] = fp
        finally:  # the good ones are stamped even when a later file is damaged
            if verified:
                _write_stamp(folder, verified)


def _progress(total: int | None, desc: str) -> Any:
    """A tqdm bar when stderr is a terminal (:func:`bbb.progress.progress_bar`), else ``None``."""
    from ..progress import progress_bar, stderr_is_terminal

    if not stderr_is_terminal():
        return None
    return progress_bar(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024)


def _download(url: str, dest: Path, md5: str, timeout: float) -> None:
    """Stream ``url`` into a temporary file beside ``dest``, check the MD5, rename into place."""
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "bbb-data/0.1"})
        response = urllib.request.urlopen(request, timeout=timeout)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise NetworkError(exc) from exc
    with response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None

        def write(f: BinaryIO) -> None:
            h = hashlib.md5(usedforsecurity=False)
            received = 0
            bar = _progress(total, dest.name)
            try:
                while True:
                    try:
                        chunk = response.read(_CHUNK)
                    except (OSError, http.client.HTTPException) as exc:
                        raise NetworkError(exc) from exc
                    if not chunk:
                        break
                    f.write(chunk)
                    h.update(chunk)
                    received += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            if total is not None and received != total:
                raise NetworkError(f"connection closed after {received} of {total} bytes")
            got = h.hexdigest()
            if got != md5.lower():
                raise DataError(
                    f"checksum mismatch for {url}: expected {md5.lower()}, got {got}; "
                    "nothing was saved; try again later, or set BBB_DATA or --data-dir to a "
                    "folder holding a good copy"
                )

        atomic_write(dest, write)


def ensure_files(
    dataset: str,
    filenames: Iterable[str],
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    base_url: str | None = None,
    verify: bool | None = None,
) -> list[Path]:
    """Return the paths of some files of a data set, downloading the missing ones.

    Parameters
    ----------
    dataset
        One of :data:`DATASETS`.
    filenames
        Original file names, each listed in ``KNOWN_FILES[dataset]``.
    data_dir
        Data directory; see :func:`resolve_data_dir`.
    download
        Whether to fetch missing files.
    base_url
        URL prefix to download from instead of the official one.
    verify
        Check files already present against their official MD5 (once; later calls trust
        the stamp, see :func:`verify_files`). ``None``: yes unless ``BBB_DATA_VERIFY=0``.

    Raises
    ------
    DataError
        Unknown data set or file; a file is missing and cannot be downloaded (the message
        names every missing file, the folder searched and how to provide them); a
        download or a file present does not match its checksum.
    """
    _check_dataset(dataset)
    names = list(filenames)
    for name in names:
        if name not in KNOWN_FILES[dataset]:
            raise DataError(
                f"unknown file {name!r} for data set {dataset!r}; known files: "
                f"{', '.join(sorted(KNOWN_FILES[dataset]))}"
            )
    root = resolve_data_dir(data_dir)
    folder = root / dataset
    paths = [folder / name for name in names]
    missing = [p for p in paths if not p.is_file()]

    def missing_error(reason: str) -> DataError:
        still = [p.name for p in missing if not p.is_file()]
        listed = ", ".join(f"{dataset}/{n}" for n in still)
        return DataError(
            _one_line(
                f"{listed} not found in {root} ({reason}); set BBB_DATA or pass --data-dir "
                f"to a folder holding {dataset}/<original file name>, or go online so "
                f"{'they' if len(still) > 1 else 'it'} can be downloaded"
            )
        )

    if missing and not download:
        raise missing_error("download disabled")
    verify_files(dataset, [p for p in paths if p not in missing], verify)
    fetched: dict[Path, dict[str, Any]] = {}
    for path in missing:
        url = url_for(dataset, path.name, base_url)
        log.info("downloading %s to %s", url, path)
        try:
            _download(url, path, KNOWN_FILES[dataset][path.name], DOWNLOAD_TIMEOUT)
        except NetworkError as exc:
            raise missing_error(f"download from {url} failed: {exc.__cause__ or exc}") from None
        except DiskFullError:  # (an OSError) its own line: free some space
            raise
        except OSError as exc:
            raise DataError(
                _one_line(
                    f"cannot save {path}: {exc}; set BBB_DATA or pass --data-dir to a "
                    "writable folder"
                )
            ) from None
        try:  # checked while downloading: stamp it so the next run does not hash it
            fetched[path] = _fingerprint(path.stat(), KNOWN_FILES[dataset][path.name])
        except OSError:
            pass
    if fetched:
        _write_stamp(folder, {p.name: fp for p, fp in fetched.items()})
    return paths


def ensure_file(
    dataset: str,
    filename: str,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    base_url: str | None = None,
    verify: bool | None = None,
) -> Path:
    """Return the path of one data file, downloading it if missing.

    See :func:`ensure_files` for the parameters and errors.
    """
    return ensure_files(dataset, [filename], data_dir, download, base_url, verify)[0]


def download_dataset(
    dataset: str,
    data_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
) -> list[Path]:
    """Make sure every file of a data set is present, downloading what is missing."""
    _check_dataset(dataset)
    return ensure_files(dataset, sorted(KNOWN_FILES[dataset]), data_dir, True, base_url)
