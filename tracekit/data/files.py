"""Where captures live: every file access of a capture goes through these few helpers.

A location is a local path (str or Path) or a URI (``s3://bucket/key``, ``gs://…``, ``hdfs://…``,
``file:///…``): one that ``pyarrow.fs.FileSystem.from_uri`` knows, else one that fsspec knows when it
is installed (``memory://``, and gcsfs/adlfs/… when those are). Local paths use the OS directly, so
supporting another store means changing only this module. Credentials and endpoints come from the
environment as the store's own tools read them (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, AWS_REGION, …);
on a Ray cluster each node uses its own. A store's failure (no bucket, no credentials, refused) is a
TracekitError of one line naming the location.

    with open_read(loc) as fh: ...            # a readable binary file (pyarrow NativeFile)
    with atomic_write(loc) as fh: ...         # appears whole or not at all
    with staged_folder(loc) as tmp: ...       # a folder written aside, moved into place when complete
    with local_copy(loc) as path: ...         # a local file with loc's bytes (downloaded when remote)
    names = list_dir(loc); join(loc, "rank=0", "part-0.parquet")

Atomicity: a local file is written to a temporary name beside it and renamed; a local folder is built
in a temporary folder beside it and renamed. An object store has no rename. There a file is written
locally first, uploaded to a temporary key beside its own (``.NAME.<random>.tmp``), then copied
server-side onto its key (S3: CopyObject) and the temporary key deleted: S3 makes an object visible
whole or not at all (a reader sees the old object or the new one, never a part), so a failed or
interrupted write never leaves a partial object at the key (at worst a temporary key, deleted when the
failure is seen; names starting with '.' are skipped by every reader here and by pyarrow's datasets).
Writing straight to the key is not safe: pyarrow's S3 stream completes its upload when it is closed
or dropped, even when the block that wrote it failed. (Like every folder pyarrow writes on S3, the
folder keeps an empty "folder/" marker object.) A capture *folder* there is complete only once its
metadata file exists, which is written last.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Union

import pyarrow as pa
import pyarrow.fs as pafs

from tracekit.data import signals
from tracekit.errors import InputNotFound, OutputExistsError, OutputWriteError, TracekitError

Location = Union[str, os.PathLike]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_COPY_BLOCK = 8 << 20
_OBJECT_STORES = ("s3", "gcs", "abfs")  # pyarrow's type_name of stores without real folders
S3_COPY_LIMIT = 5 << 30  # the largest object S3 copies in one request (CopyObject)


def is_uri(loc: Location) -> bool:
    """True for ``scheme://…`` locations (object stores, remote filesystems)."""
    return isinstance(loc, str) and bool(_URI.match(loc))


def filesystem(loc: Location) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of `loc` and the path inside it."""
    if not is_uri(loc):
        return pafs.LocalFileSystem(), os.path.abspath(os.fspath(loc))
    uri = str(loc)
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass  # a scheme pyarrow does not know: try fsspec
    except (OSError, pa.ArrowException) as exc:  # e.g. an S3 bucket whose region cannot be found
        raise _store_error(uri, "cannot open its filesystem", exc) from None
    scheme = uri.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        raise TracekitError(
            f"{uri}: pyarrow has no filesystem for '{scheme}://' and fsspec is not installed; "
            f"pip install fsspec (and fsspec's package for {scheme}://, e.g. gcsfs, adlfs)"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise TracekitError(f"{uri}: no filesystem for '{scheme}://' ({first_line(exc)})") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


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
    try:
        return fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot look at", exc) from None


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
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot list", exc) from None
    return sorted(i.base_name for i in infos)


def list_files(loc: Location) -> list[str]:
    """Names of the files directly inside folder `loc` (not its folders), sorted."""
    if not is_uri(loc):
        return sorted(e.name for e in os.scandir(os.fspath(loc)) if e.is_file())
    fs, path = filesystem(loc)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot list", exc) from None
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def open_read(loc: Location) -> pa.NativeFile:
    """`loc` opened for reading, with random access (Parquet footers are at the end)."""
    if not is_uri(loc):
        return pa.OSFile(os.fsencode(loc), "rb")  # bytes: a name that is not UTF-8 opens too
    fs, path = filesystem(loc)
    try:
        return fs.open_input_file(path)
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot read", exc) from None


def read_bytes(loc: Location) -> bytes:
    with open_read(loc) as fh:
        return fh.read()


@contextlib.contextmanager
def atomic_write(loc: Location, *, replace: bool = True) -> Iterator[pa.NativeFile]:
    """A binary file to write `loc` through; `loc` appears only if the block succeeds (see the module
    docstring for what that means on an object store). Without `replace`, a local `loc` that appeared
    while the block ran (another process writing the same new output) is not overwritten. A symbolic
    link at `loc` is written through (`output_target`); folders made for it go again if the block fails."""
    loc = output_target(loc)
    with new_folders_removed_on_failure(loc):
        tmp = temp_file(loc)
        try:
            with pa.OSFile(os.fsencode(tmp), "wb") as out:
                yield out
            if is_uri(loc):
                signals.check()
                upload(tmp, loc)
            else:
                publish(tmp, Path(loc), replace=replace)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


# --- the rules every output follows (docs/DESIGN.md, "Outputs and inputs") ----------------------------
# An output is written to a temporary file beside it and renamed over the name: so it must be a name a
# rename may replace. A symbolic link is written through (its target is the output: the link stays a
# link); a device, FIFO or socket is never an output (the rename would replace the device node, e.g.
# /dev/null as root); a folder is an output only of the commands that write folders. Folders made for an
# output that then fails are removed again: tracekit removes only what it created.

_SPECIAL = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(loc: Location) -> str | None:
    """What a local `loc` is, when it exists (through links) and is neither a file nor a folder."""
    if is_uri(loc):
        return None
    try:
        mode = os.stat(loc).st_mode
    except OSError:
        return None
    return next((what for test, what in _SPECIAL if test(mode)), None)


def output_target(loc: Location) -> Location:
    """Where output `loc` is written: `loc`, or the file a symbolic link at `loc` leads to (a link is
    written through, never replaced; a dangling link's target is created)."""
    if is_uri(loc) or not os.path.islink(loc):
        return loc
    return Path(os.path.realpath(loc))


def check_output_kind(loc: Location) -> None:
    """Refuse, whatever --force says, an output that no rename may replace: a device, FIFO or socket
    (through links), or a symbolic link loop."""
    if is_uri(loc) or not os.path.lexists(loc):
        return
    try:
        os.stat(loc)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputWriteError(f"cannot write {loc}: a symbolic link loop; name a file") from None
        return  # a dangling link: its target is written (output_target)
    what = special_kind(loc)
    if what is not None:
        raise OutputExistsError(
            f"{loc} is {what}, not a file: tracekit writes an output aside and renames it into place, "
            "which would replace it; name a regular file (or leave -o out to print)"
        )


def check_rewrite(loc: Location, force: bool) -> None:
    """An existing file tracekit rewrites in place (`analyze --store` adds the analysis to the capture):
    without `force`, only one the user may write and owns (a read-only file, or another user's in a shared
    folder, would be replaced by the rename: its protection, or its owner, lost)."""
    if force or is_uri(loc) or not os.path.exists(loc):
        return
    st = os.stat(loc)
    why = None
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        why = f"belongs to another user (uid {st.st_uid})"
    elif not st.st_mode & stat.S_IWUSR:  # its mode bits, not access(): root may write any file
        why = "is read-only"
    if why:
        raise OutputExistsError(f"{loc} {why}; tracekit would replace it: pass --force to do so anyway")


@contextlib.contextmanager
def new_folders_removed_on_failure(loc: Location) -> Iterator[None]:
    """Run the block that writes `loc`; if it fails, remove the folders above `loc` that did not exist
    before it and are empty (a failed `-o new1/new2/x.parquet` used to leave new1/new2)."""
    if is_uri(loc):
        yield
        return
    missing = []
    parent = Path(os.path.abspath(loc)).parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    try:
        yield
    except BaseException:
        remove_empty_folders(missing)
        raise


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove `folders` (deepest first) that are empty; a folder that is not empty stays, and so do the
    folders above it."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError:
            return


# A temporary name keeps this much of the output's name: NAME_MAX (255 bytes) must hold the output's
# own name, not its name plus the temporary's prefix and suffix (a legal 248-byte name was refused).
_TEMP_NAME_CHARS = 32


def temp_file(loc: Location, *, folder: bool = False) -> Path:
    """A new empty temporary file (or folder) for writing `loc`: a hidden `.NAME.XXXX.tmp` beside a local
    `loc` (the same file system, so the final rename is atomic), in the temporary folder for a URI."""
    try:
        if is_uri(loc):
            parent, prefix = None, "tracekit-"
        else:
            path = Path(loc)
            path.parent.mkdir(parents=True, exist_ok=True)
            parent, prefix = path.parent, f".{path.name[:_TEMP_NAME_CHARS]}."
        if folder:
            return Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
        os.close(fd)
        return Path(tmp)
    except OSError as exc:
        raise write_error(loc, exc) from None


def publish(tmp: Path, path: Path, *, replace: bool) -> None:
    """Move the finished temporary `tmp` to `path`, with the mode a new file gets (the umask's) or that
    of the file it replaces. Without `replace` an existing `path` is never overwritten, even one that
    appeared since the caller checked (a file: linked into place, which fails if the name is taken; a
    folder: renamed, which fails over a non-empty folder)."""
    signals.check()  # a stop signal lost in a callback: the output is not committed
    os.chmod(tmp, output_mode(path, folder=tmp.is_dir()))
    if replace:
        os.replace(tmp, path)
        return
    try:
        if tmp.is_dir():
            os.rename(tmp, path)
            return
        os.link(tmp, path)
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
        raise _appeared(path) from exc
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            raise _appeared(path) from None
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise _appeared(path) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _appeared(path: Path) -> OutputExistsError:
    return OutputExistsError(
        f"{path} appeared while tracekit was writing it (another process writing the same output?); "
        "it was left as it is: pass --force to overwrite it"
    )


def output_mode(path: Location, *, folder: bool = False) -> int:
    """The permissions of an output: those of the file it replaces, else what open()/mkdir give a new
    one (0o666 / 0o777 less the umask). A temporary file is created 0600, which would leave every output
    unreadable by a colleague or a TensorBoard server."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode) == folder:
            return stat.S_IMODE(st.st_mode)
    return (0o777 if folder else 0o666) & ~_umask()


def _umask() -> int:
    # /proc/self/status first: setting the umask to read it races with another thread creating a file.
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# What the user can do about an output that could not be written, by errno.
_WRITE_ADVICE = {
    errno.ENOSPC: "free some space or write it elsewhere",
    errno.EDQUOT: "free some space or write it elsewhere",
    errno.EFBIG: "a file-size limit (ulimit -f) or the file system's largest file: write it elsewhere",
    errno.EROFS: "a read-only file system: write it elsewhere",
    errno.EACCES: "write it in a folder you may write to",
    errno.EPERM: "write it in a folder you may write to",
    errno.ENAMETOOLONG: "choose a shorter name",
    errno.EISDIR: "that is a folder: name a file",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ELOOP: "the path holds a symbolic link loop",
}
WRITE_ERRNOS = frozenset(_WRITE_ADVICE)


def write_error(loc: Location, exc: OSError) -> OutputWriteError:
    """The one-line error for an output that could not be written."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    advice = _WRITE_ADVICE.get(exc.errno or 0, "write it elsewhere")
    return OutputWriteError(f"cannot write {loc} ({reason}); nothing was written: {advice}")


def upload(local: Location, loc: Location) -> None:
    """Copy the finished local file `local` to `loc` on an object store: to a temporary key beside
    it, then server-side onto the key, so that the key only ever holds a whole file."""
    fs, path = filesystem(loc)
    size = os.path.getsize(local)
    if fs.type_name == "s3" and size > S3_COPY_LIMIT:
        raise TracekitError(
            f"{loc}: {size / 2**30:.1f} GiB is over S3's 5 GiB limit for the server-side copy that makes "
            "the write atomic; write a capture folder instead (-o ending in '/': one file per rank)"
        )
    parent, _, name = path.rstrip("/").rpartition("/")
    temp_key = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp" if parent else f".{name}.tmp"
    try:
        if parent and fs.type_name not in _OBJECT_STORES:  # there it would write a "folder/" marker
            with contextlib.suppress(OSError, pa.ArrowException):
                fs.create_dir(parent, recursive=True)
        with open(local, "rb") as src, fs.open_output_stream(temp_key) as out:
            shutil.copyfileobj(src, out, _COPY_BLOCK)
        fs.move(temp_key, path)
    except (OSError, pa.ArrowException) as exc:
        with contextlib.suppress(OSError, pa.ArrowException):
            fs.delete_file(temp_key)
        raise _store_error(loc, "cannot write", exc) from None


@contextlib.contextmanager
def local_copy(loc: Location) -> Iterator[Path]:
    """A local file holding `loc`'s bytes: `loc` itself when local, else a download into a temporary
    file removed afterwards (the parser memory-maps its input; an object is fetched once, in order)."""
    if not is_uri(loc):
        yield Path(loc)
        return
    fd, tmp = tempfile.mkstemp(prefix="tracekit-", suffix="-" + name_of(loc))
    try:
        with os.fdopen(fd, "wb") as out, open_read(loc) as src:
            shutil.copyfileobj(src, out, _COPY_BLOCK)
        yield Path(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_bytes(loc: Location, data: bytes) -> None:
    """Write `data` to `loc` atomically."""
    try:
        with atomic_write(loc) as out:
            out.write(data)
    except OSError as exc:  # a full disk: one line (it was a traceback)
        if exc.errno not in WRITE_ERRNOS:
            raise
        raise write_error(loc, exc) from None


def named_as_output(exc: OutputWriteError, stage: Location, loc: Location) -> OutputWriteError:
    """A write error raised inside `stage` (the temporary folder an output is built in) as one about
    the output `loc`: the user never named the stage ("cannot write .cdir.x1y2.tmp/.files/0.parquet")."""
    text = str(exc)
    for spelling in {os.path.abspath(stage), str(stage)} if not is_uri(stage) else {str(stage)}:
        text = re.sub(re.escape(spelling) + r"[^\s(]*", lambda _: str(loc), text)
    return OutputWriteError(text)


@contextlib.contextmanager
def staged_folder(loc: Location, *, replace: bool = True) -> Iterator[Location]:
    """A folder to build `loc` in. Local: a temporary folder beside `loc`, renamed over it only if the
    block succeeds (an existing `loc` is replaced when `replace`: the caller has checked it may be;
    without, an empty one only). URI: `loc` itself, cleared first (see the module docstring)."""
    if is_uri(loc):
        if exists(loc):
            remove_tree(loc)
        yield loc
        return
    path = Path(output_target(loc))
    with new_folders_removed_on_failure(path):
        tmp = temp_file(path, folder=True)
        try:
            try:
                yield tmp
            except OutputWriteError as exc:
                raise named_as_output(exc, tmp, loc) from None
            if replace and path.exists():
                signals.check()
                with signals.held():  # a stop between the two renames would leave `path` moved away
                    old = temp_file(path, folder=True)
                    os.chmod(tmp, output_mode(path, folder=True))
                    os.replace(path, old / path.name)
                    os.replace(tmp, path)
                    shutil.rmtree(old, ignore_errors=True)
            else:
                publish(tmp, path, replace=False)
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
    try:
        fs.delete_dir(path)
    except (OSError, pa.ArrowException) as exc:
        raise _store_error(loc, "cannot delete", exc) from None


def remove(loc: Location) -> None:
    """Delete file `loc` if it exists."""
    if not is_uri(loc):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(loc)
        return
    fs, path = filesystem(loc)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def split_joined(arg: str) -> list[str]:
    """The locations of a command-line argument that may join several with ',' (`diff A1,A2,A3 B`,
    `--python-from B1,B2`): one location when a file or folder of that whole name exists (a name that
    holds a comma, `my,run.parquet`, used to be cut: "my: no such file"), else its parts."""
    if not is_uri(arg) and os.path.lexists(arg):
        return [arg]
    return [p for p in arg.split(",") if p]


def check_input(loc: Location) -> None:
    """A local input is a file or a folder that is there: a dangling link or a link loop says so
    (`not_found`), and a FIFO, device or socket (a shell's process substitution `<(zcat t.gz)` is a
    pipe) is refused up front: tracekit reads a trace more than once, in any order, where a pipe gives
    its bytes once, front to back (a FIFO without a writer made it wait forever)."""
    if is_uri(loc):
        return
    if not os.path.exists(loc):
        raise not_found(loc)
    what = special_kind(loc)
    if what is not None:
        raise InputNotFound(
            f"{loc} is {what}, not a file: tracekit reads a trace more than once and in any order, which "
            "a pipe (or a shell's <(...)) cannot give; write what it carries to a file first and name "
            "that file"
        )


def not_found(loc: Location) -> InputNotFound:
    """The error for an input that is not there: a symbolic link loop or a dangling link says so (it
    used to be "no such file" for a name `ls` shows)."""
    if not is_uri(loc) and os.path.lexists(loc):
        try:
            os.stat(loc)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return InputNotFound(f"{loc}: a symbolic link loop (it never reaches a file)")
            return InputNotFound(f"{loc}: a symbolic link to {os.readlink(str(loc))}, which does not exist")
    return InputNotFound(f"{loc}: no such file or folder")


def _store_error(loc: Location, doing: str, exc: BaseException) -> TracekitError:
    """One line for a store's failure: pyarrow's messages for S3 run over several lines."""
    if isinstance(exc, FileNotFoundError):
        return InputNotFound(f"{loc}: no such file or folder")
    if isinstance(exc, IsADirectoryError):
        return InputNotFound(f"{loc}: is a folder, expected a file")
    return TracekitError(f"{loc}: {doing} ({first_line(exc)})")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
