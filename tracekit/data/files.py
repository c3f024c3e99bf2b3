"""Where captures live: every file access of a capture goes through these few helpers.

A location is a local path (str or Path) or a URI that a pyarrow filesystem knows (``s3://bucket/key``,
``gs://…``, ``file:///…``). Local paths use the OS directly; URIs go through
``pyarrow.fs.FileSystem.from_uri``, so supporting another store means changing only this module.

    with open_read(loc) as fh: ...            # a readable binary file (pyarrow NativeFile)
    with atomic_write(loc) as fh: ...         # appears whole or not at all
    with staged_folder(loc) as tmp: ...       # a folder written aside, moved into place when complete
    names = list_dir(loc); join(loc, "rank=0", "part-0.parquet")

Atomicity: a local file is written to a temporary name beside it and renamed; a local folder is built
in a temporary folder beside it and renamed. An object store has no rename: its objects appear whole
when their upload completes (a PUT is atomic), and a capture folder there is complete only once its
metadata file exists, which is written last.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Union

import pyarrow as pa
import pyarrow.fs as pafs

Location = Union[str, os.PathLike]


def is_uri(loc: Location) -> bool:
    """True for ``scheme://…`` locations (object stores, remote filesystems)."""
    return "://" in str(loc)


def filesystem(loc: Location) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of `loc` and the path inside it."""
    if is_uri(loc):
        return pafs.FileSystem.from_uri(str(loc))
    return pafs.LocalFileSystem(), os.path.abspath(os.fspath(loc))


def join(base: Location, *parts: str) -> Location:
    """`base`/`parts`: a Path for a local base, a str for a URI."""
    if is_uri(base):
        return "/".join([str(base).rstrip("/"), *parts])
    return Path(base).joinpath(*parts)


def sibling(loc: Location, name: str) -> Location:
    """`name` in the folder that holds `loc`."""
    if is_uri(loc):
        return str(loc).rstrip("/").rsplit("/", 1)[0] + "/" + name
    return Path(loc).parent / name


def name_of(loc: Location) -> str:
    """The last component of `loc` (a file or folder name)."""
    return str(loc).rstrip("/").rsplit("/", 1)[-1] if is_uri(loc) else Path(loc).name


def _info(loc: Location) -> pafs.FileInfo:
    fs, path = filesystem(loc)
    return fs.get_file_info(path)


def exists(loc: Location) -> bool:
    if not is_uri(loc):
        return os.path.exists(loc)
    return _info(loc).type != pafs.FileType.NotFound


def is_dir(loc: Location) -> bool:
    if not is_uri(loc):
        return os.path.isdir(loc)
    return _info(loc).type == pafs.FileType.Directory


def is_file(loc: Location) -> bool:
    if not is_uri(loc):
        return os.path.isfile(loc)
    return _info(loc).type == pafs.FileType.File


def size(loc: Location) -> int:
    if not is_uri(loc):
        return os.path.getsize(loc)
    return int(_info(loc).size)


def list_dir(loc: Location) -> list[str]:
    """Names of the entries of folder `loc`, sorted (not recursive)."""
    if not is_uri(loc):
        return sorted(os.listdir(loc))
    fs, path = filesystem(loc)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos)


def open_read(loc: Location) -> pa.NativeFile:
    """`loc` opened for reading, with random access (Parquet footers are at the end)."""
    if not is_uri(loc):
        return pa.OSFile(os.fspath(loc), "rb")
    fs, path = filesystem(loc)
    return fs.open_input_file(path)


def read_bytes(loc: Location) -> bytes:
    with open_read(loc) as fh:
        return fh.read()


@contextlib.contextmanager
def atomic_write(loc: Location) -> Iterator[pa.NativeFile]:
    """A binary file to write `loc` through; `loc` appears only if the block succeeds."""
    if is_uri(loc):
        fs, path = filesystem(loc)
        with fs.open_output_stream(path) as out:
            yield out
        return
    path = Path(loc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with pa.OSFile(tmp, "wb") as out:
            yield out
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(loc: Location, data: bytes) -> None:
    """Write `data` to `loc` atomically."""
    with atomic_write(loc) as out:
        out.write(data)


@contextlib.contextmanager
def staged_folder(loc: Location) -> Iterator[Location]:
    """A folder to build `loc` in. Local: a temporary folder beside `loc`, renamed over it (an existing
    `loc` is replaced: the caller has checked it may be) only if the block succeeds. URI: `loc` itself,
    cleared first (see the module docstring)."""
    if is_uri(loc):
        if exists(loc):
            remove_tree(loc)
        yield loc
        return
    path = Path(loc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def make_dirs(loc: Location) -> None:
    """Create folder `loc` and its parents (object stores have no folders: nothing to do)."""
    if not is_uri(loc):
        os.makedirs(loc, exist_ok=True)


def remove_tree(loc: Location) -> None:
    """Delete folder `loc` and everything in it."""
    if not is_uri(loc):
        shutil.rmtree(loc)
        return
    fs, path = filesystem(loc)
    fs.delete_dir(path)


def remove(loc: Location) -> None:
    """Delete file `loc` if it exists."""
    if not is_uri(loc):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(loc)
        return
    fs, path = filesystem(loc)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)
