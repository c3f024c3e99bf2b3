"""Where traces and captures live: a local path, `s3://…`, or any filesystem pyarrow or fsspec knows.

    loc = resolve("s3://bucket/job/")            # or "runs/job", "gs://…", "hdfs://…", "file:///…"
    for trace in loc.files(TRACE_SUFFIXES): ...  # the files directly inside a folder (or prefix)
    with local_copy(trace) as path: ...          # a local file to mmap (a download when remote)
    with atomic_write(resolve("s3://bucket/out/capture.parquet"), force=False) as tmp:
        write(tmp)                               # a local temporary file, published on success
    pq.read_table(loc.path, filesystem=loc.fs)   # Parquet reads go straight to the store

A URI is resolved by `pyarrow.fs.FileSystem.from_uri` (S3, GCS, HDFS, ABFS, local), else by fsspec
when it is installed (`memory://`, and gcsfs/adlfs/… when those are). Credentials and endpoints come
from the environment as the store's own tools read them (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL,
AWS_DEFAULT_REGION, …); on a Ray cluster each node uses its own.

What is atomic: locally, a write goes to a temporary file beside the target and is renamed over it. On
an object store there is no rename: a write is uploaded to a temporary key beside the target
(`.NAME.<random>.tmp`), then copied server-side onto the target key (S3 CopyObject) and the temporary
key deleted. S3 makes one object visible whole or not at all (a reader sees the old object or the new
one, never a part), so a failed or interrupted upload never leaves a partial object at the target (at
worst a temporary key, deleted when the failure is seen). A *folder* of several objects is not atomic
on S3: its writer writes the metadata object last, and readers take a folder without it as unfinished.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.fs as pafs

from tracekit.errors import InputNotFound, OutputExistsError, TracekitError

PathLike = Union[str, Path, "Location"]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_COPY_BLOCK = 8 << 20


def is_uri(target: object) -> bool:
    """Whether `target` is a URI (`scheme://…`) rather than a local path."""
    return isinstance(target, str) and bool(_URI.match(target))


class Location:
    """A file or folder on some filesystem: `fs` (a pyarrow FileSystem) and `path` inside it.

    `text` is what the user wrote (messages name it). Pickling keeps only `text`: a Location sent to
    a Ray task is resolved again where it runs, with that machine's credentials."""

    __slots__ = ("text", "fs", "path")

    def __init__(self, text: str, fs: pafs.FileSystem, path: str) -> None:
        self.text = text
        self.fs = fs
        self.path = path

    def __reduce__(self):
        return (resolve, (self.text,))

    def __repr__(self) -> str:
        return f"Location({self.text!r})"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, str]:
        return ("file" if self.is_local else _scheme(self.text), self.path.rstrip("/"))

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def local_path(self) -> Optional[Path]:
        """The local path (None for a remote location)."""
        return Path(self.path) if self.is_local else None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def names_folder(self) -> bool:
        """Whether the user wrote a folder: a trailing '/' (how `-o DIR/` asks for the folder form)."""
        return self.text.endswith(("/", os.sep))

    def child(self, name: str) -> Location:
        """The location `name` inside this folder."""
        sep = "" if self.text.endswith(("/", os.sep)) else "/"
        return Location(self.text + sep + name, self.fs, self.path.rstrip("/") + "/" + name)

    # -- questions ------------------------------------------------------------------------------

    def info(self) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.path)
        except (OSError, pa.ArrowException) as exc:
            raise _store_error(self, "cannot look at", exc) from None

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def size(self) -> int:
        info = self.info()
        if info.type != pafs.FileType.File:
            raise InputNotFound(f"{self}: no such file")
        return int(info.size)

    def files(self, suffixes: Sequence[str] = (), *, recursive: bool = False) -> list[Location]:
        """The files inside this folder (or under this prefix) whose names end with one of `suffixes`
        (any name when empty), sorted by path. Names starting with '.' (temporaries) are skipped."""
        selector = pafs.FileSelector(self.path, recursive=recursive, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except (OSError, pa.ArrowException) as exc:
            raise _store_error(self, "cannot list", exc) from None
        base = self.path.rstrip("/")
        out = []
        for info in infos:
            if info.type != pafs.FileType.File or info.base_name.startswith("."):
                continue
            if suffixes and not info.base_name.endswith(tuple(suffixes)):
                continue
            rel = info.path[len(base) + 1 :] if info.path.startswith(base + "/") else info.base_name
            out.append(self.child(rel))
        return sorted(out, key=lambda loc: loc.path)

    def folders(self) -> list[Location]:
        """The folders directly inside this one, sorted by name."""
        selector = pafs.FileSelector(self.path, recursive=False, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except (OSError, pa.ArrowException) as exc:
            raise _store_error(self, "cannot list", exc) from None
        return sorted(
            (self.child(i.base_name) for i in infos if i.type == pafs.FileType.Directory),
            key=lambda loc: loc.path,
        )

    # -- reading --------------------------------------------------------------------------------

    def open(self) -> pa.NativeFile:
        """A random-access binary file (pyarrow NativeFile: read, seek, size; a context manager)."""
        try:
            return self.fs.open_input_file(self.path)
        except FileNotFoundError:
            raise InputNotFound(f"{self}: no such file") from None
        except IsADirectoryError:
            raise InputNotFound(f"{self}: is a folder, expected a file") from None
        except (OSError, pa.ArrowException) as exc:
            raise _store_error(self, "cannot read", exc) from None

    def read_bytes(self) -> bytes:
        with self.open() as fh:
            return fh.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)


def resolve(target: PathLike) -> Location:
    """The Location of a local path or a URI; a URI no filesystem knows is one line (exit code 2)."""
    if isinstance(target, Location):
        return target
    if isinstance(target, Path) or not is_uri(target):
        text = os.fspath(target)
        return Location(text, _LOCAL, os.path.abspath(text))
    try:
        fs, path = pafs.FileSystem.from_uri(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        fs, path = _fsspec(target)
    except (OSError, pa.ArrowException) as exc:  # e.g. an S3 bucket whose region cannot be found
        raise TracekitError(f"{target}: cannot open its filesystem ({_first_line(exc)})") from None
    if isinstance(fs, pafs.LocalFileSystem):  # file:///…
        return Location(target, _LOCAL, path)
    return Location(target, fs, path)


_LOCAL = pafs.LocalFileSystem()


def _fsspec(uri: str) -> tuple[pafs.FileSystem, str]:
    scheme = _scheme(uri)
    try:
        import fsspec
    except ImportError:
        raise TracekitError(
            f"{uri}: pyarrow has no filesystem for '{scheme}://' and fsspec is not installed; "
            f"pip install fsspec (and the fsspec package for {scheme}, e.g. gcsfs, adlfs)"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise TracekitError(f"{uri}: no filesystem for '{scheme}://' ({_first_line(exc)})") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def _scheme(text: str) -> str:
    return text.split("://", 1)[0] if is_uri(text) else "file"


# -- reading a whole file locally ------------------------------------------------------------------


@contextlib.contextmanager
def local_copy(loc: PathLike) -> Iterator[Path]:
    """A local path holding `loc`'s bytes: the file itself when local, else a download into a
    temporary file (removed afterwards). The parser memory-maps local files; this lets it do the same
    with an object it fetched once, sequentially."""
    loc = resolve(loc)
    if loc.is_local:
        yield Path(loc.path)
        return
    fd, tmp = tempfile.mkstemp(prefix="tracekit-", suffix="-" + loc.name)
    try:
        with os.fdopen(fd, "wb") as out, loc.open() as src:
            shutil.copyfileobj(src, out, _COPY_BLOCK)
        yield Path(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# -- writing ---------------------------------------------------------------------------------------


def check_output(loc: PathLike, force: bool) -> None:
    """Refuse to overwrite an existing output unless --force."""
    loc = resolve(loc)
    if not force and loc.exists():
        raise OutputExistsError(f"{loc} exists; pass --force to overwrite")


@contextlib.contextmanager
def atomic_write(loc: PathLike, *, force: bool = True) -> Iterator[Path]:
    """Yield a local temporary path; when the block succeeds, publish it at `loc` atomically (see the
    module docstring for what that means on an object store). With `force=False`, an existing `loc`
    is refused first."""
    loc = resolve(loc)
    if not force:
        check_output(loc, force)
    if loc.is_local:
        path = Path(loc.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    else:
        fd, tmp = tempfile.mkstemp(prefix="tracekit-", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        if loc.is_local:
            os.replace(tmp, loc.path)
        else:
            upload(Path(tmp), loc)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def upload(local: Path, loc: Location) -> None:
    """Copy a finished local file to `loc` on an object store: to a temporary key beside it, then a
    server-side copy onto the key, so the key only ever holds a whole file."""
    parent = loc.path.rstrip("/").rsplit("/", 1)[0]
    temp_key = f"{parent}/.{loc.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with contextlib.suppress(OSError, pa.ArrowException):
            loc.fs.create_dir(parent, recursive=True)  # a no-op on S3; needed by fsspec's file-like stores
        with open(local, "rb") as src, loc.fs.open_output_stream(temp_key) as out:
            shutil.copyfileobj(src, out, _COPY_BLOCK)
        loc.fs.move(temp_key, loc.path)
    except (OSError, pa.ArrowException) as exc:
        with contextlib.suppress(OSError, pa.ArrowException):
            loc.fs.delete_file(temp_key)
        raise _store_error(loc, "cannot write", exc) from None


def remove(loc: PathLike) -> None:
    """Delete a file, or a folder and everything in it (for --force over a folder capture)."""
    loc = resolve(loc)
    info = loc.info()
    try:
        if info.type == pafs.FileType.Directory:
            loc.fs.delete_dir(loc.path)
        elif info.type == pafs.FileType.File:
            loc.fs.delete_file(loc.path)
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot delete", exc) from None


def _store_error(loc: Location, doing: str, exc: BaseException) -> TracekitError:
    """One line for a filesystem or object-store failure (no bucket, no credentials, refused...)."""
    if isinstance(exc, FileNotFoundError):
        return InputNotFound(f"{loc}: no such file or folder")
    return TracekitError(f"{loc}: {doing} ({_first_line(exc)})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
