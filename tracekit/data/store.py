"""Read and write captures, atomically, versioned on read. A capture has one of two forms:

- a file: one Parquet file, its metadata document under the file's ``tracekit`` key;
- a folder: one Parquet file per rank plus the metadata document beside them::

      capture/_tracekit.json              the metadata document, plus "parts" (which rank is where)
      capture/rank=0/part-0.parquet       rank 0's rows (events and derived rows)
      capture/rank=1/part-0.parquet

  The folder is a Hive-partitioned dataset: pyarrow (`pq.read_table("capture")`), DuckDB
  (`read_parquet('capture/*/*.parquet', hive_partitioning=true)`), Polars and Spark read it as one
  table with a `rank` column. So the rank is in the folder name only, not in the part files (a column
  of the same name in the files would clash with the partition key in pyarrow's dataset discovery), and
  the metadata file's name starts with `_`, which those readers skip. Each part file also carries the
  metadata of its own rank (sources, traces) under its `tracekit` key. The metadata file is written
  last: a folder without it is not a capture (an interrupted write).

Every access to a file goes through tracekit.data.files, so a capture may live in object storage.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import arrow, files, signals, stitch
from tracekit.data.files import Location
from tracekit.data.schema import (
    METADATA_KEY,
    OPTIONAL_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    file_metadata,
    metadata_doc,
)
from tracekit.data.summary import Summary, kind_codes, only_value, rows_metadata, summarize_table
from tracekit.errors import CaptureFileError, OutputExistsError, OutputWriteError, Terminated


# How capture files are encoded (benchmarks/RESULTS.md, "Parquet encoding", has the measurements):
# - dictionary pages only for the string columns (already dictionary arrays): trying dictionary encoding
#   on unique int64 columns such as ts_ns costs a third of the write time and saves nothing;
# - DELTA_BINARY_PACKED for the integer columns (timestamps, ids and durations change by small steps),
#   then LZ4: on real traces about as small as plain + zstd and faster to write, which is most of what
#   the parser's parent process does;
# - min/max statistics only where a reader may filter row groups: computing them for every column
#   (the string ones especially) doubled the time to write a capture;
# - the writer takes 64 Ki rows per call into each column instead of 1 Ki: the same bytes, less CPU to
#   encode a parse's chunk (fewer passes through each column's per-batch work).
def _parquet_options(schema: pa.Schema) -> dict:
    return {
        "write_batch_size": 1 << 16,
        "compression": "lz4",
        "use_dictionary": [f.name for f in schema if pa.types.is_dictionary(f.type)],
        "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)},
        "write_statistics": [n for n in ("kind", "rank", "step", "ts_ns") if n in schema.names],
    }


PARQUET_OPTIONS = _parquet_options(SCHEMA)

# The folder form (module docstring).
FOLDER_META = "_tracekit.json"
PART_NAME = "part-0.parquet"
RANK_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("rank"))  # a part file's columns: no rank
_RANK_POSITION = SCHEMA.get_field_index("rank")


@dataclass
class Capture:
    """A capture in memory: the event table (schema.SCHEMA) and the file metadata document."""

    table: pa.Table
    meta: dict = field(default_factory=dict)
    path: Location | None = None  # where it was read from: a local path or a URI
    # the user's --step (a regex of the event name that starts each step, instead of ProfilerStep:
    # tracekit.parse.iterations); an option of this analysis, never stored in the capture
    step_marker: str | None = None

    @property
    def manifest(self) -> dict | None:
        return self.meta.get("manifest")

    @property
    def traces(self) -> list[dict]:
        return self.meta.get("traces") or []

    def rows_by_kind(self) -> dict[str, int]:
        """Row counts by kind (event, step, busy, ...), in the order each kind first appears; cheap, and
        never imports pandas, nor pyarrow.compute (`tracekit parse` counts its steps with it)."""
        counts: dict[str, int] = {}
        for chunk in self.table.column("kind").chunks if self.table.num_rows else []:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            codes, dictionary = arrow.codes(chunk)
            codes = codes[codes >= 0]
            if not len(codes):
                continue
            n = np.bincount(codes, minlength=len(dictionary))
            first = np.full(len(dictionary), len(codes))
            np.minimum.at(first, codes, np.arange(len(codes)))
            for c in np.argsort(first, kind="stable").tolist():
                if n[c] and dictionary[c]:
                    counts[dictionary[c]] = counts.get(dictionary[c], 0) + int(n[c])
        return counts

    def summary(self) -> dict:
        """What the capture holds: ranks, devices, steps, and row counts by kind and by category (the
        same document as tracekit.data.summary.summarize of the capture on disk)."""

        return summarize_table(self.table)


def check_output(
    path: Location,
    force: bool,
    inputs: Sequence[Location] = (),
    others: Sequence[Optional[Location]] = (),
) -> None:
    """Refuse an output that is a folder, a device, FIFO or socket (files.check_output_kind), that is one
    of the command's `inputs` (or inside an input folder: the command would destroy what it reads), that
    is one of the command's `others` outputs (two results written to one file: the first lost), or that
    exists unless --force. A symbolic link is checked, and written, as the file it leads to."""
    files.check_output_kind(path)
    if not files.is_uri(path) and os.path.isdir(path):
        raise OutputExistsError(f"{path} is a folder; name a file to write (e.g. {Path(path) / 'out'})")
    check_parents(files.output_target(path))
    check_not_input(path, inputs)
    check_distinct(path, others)
    if files.exists(path) and not force:
        raise OutputExistsError(f"{path} exists; pass --force to overwrite")


def check_distinct(path: Location, others: Sequence[Optional[Location]]) -> None:
    """Refuse an output that another output of the same command names (by any spelling or link)."""
    for other in others:
        if other is not None and _same_place(path, other):
            raise OutputExistsError(
                f"{path} is named for two outputs ({other} too); the second would overwrite the first: "
                "name two files"
            )


def _same_place(a: Location, b: Location) -> bool:
    if files.is_uri(a) or files.is_uri(b):
        return str(a).rstrip("/") == str(b).rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def check_parents(path: Location) -> None:
    """Before any work: the output's nearest existing ancestor is a folder (`-o FILE/x.txt` used to fail
    only when written, after a command had written its other outputs)."""
    if files.is_uri(path):
        return
    parent = Path(os.path.abspath(path)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputWriteError(
            f"cannot write {path} ({parent} is a file, not a folder); nothing was written: name a folder"
        )


def check_not_input(path: Location, inputs: Sequence[Location]) -> None:
    """Refuse an output that is one of `inputs` (the same file, by any name), or inside an input that is
    a capture folder (writing there changes the capture). A run folder of traces may hold outputs."""
    if files.is_uri(path):
        return
    out = Path(os.path.realpath(path))
    for loc in inputs:
        if files.is_uri(loc):
            continue
        src = Path(os.path.realpath(loc))
        same = out == src or (out.exists() and src.exists() and os.path.samefile(out, src))
        if same or (src in out.parents and is_capture_folder(src)):
            raise OutputExistsError(
                f"{path} is {'also an input' if same else 'inside the input capture'} ({loc}); writing "
                "it would destroy what tracekit reads: choose another output path"
            )


def check_folder_output(path: Location, force: bool, inputs: Sequence[Location] = ()) -> None:
    """Refuse to write a capture folder over an existing one unless --force, and over any other
    non-empty folder or a file even with it (--force replaces a capture, never other data)."""
    check_not_input(path, inputs)
    if not files.exists(path):
        return
    if files.is_dir(path) and not files.list_dir(path):
        return
    if not is_capture_folder(path):
        what = "a file" if files.is_file(path) else "a folder that is not a tracekit capture"
        raise OutputExistsError(f"{path} is {what}; name a new folder for the capture")
    if not force:
        raise OutputExistsError(f"{path} exists; pass --force to overwrite")
    foreign = _not_ours(path)
    if foreign:
        raise OutputExistsError(
            f"{path} holds files tracekit did not write ({', '.join(foreign[:3])}), which replacing the "
            "capture would delete; move them, or name a new folder"
        )


def _not_ours(root: Location) -> list[str]:
    """The entries of a local capture folder that its writers did not make (they make the metadata
    file, each rank's folder with its part and its stored idle rows, and hidden `.NAME.XXXX.tmp` files
    on the way)."""
    if files.is_uri(root):
        return []
    own = {FOLDER_META}
    out = []
    for entry in sorted(os.listdir(root)):
        inside = os.path.join(root, entry)
        if entry in own or (entry.startswith(".") and entry.endswith(".tmp")):
            continue
        if entry.startswith("rank=") and os.path.isdir(inside) and not os.path.islink(inside):
            out += [
                f"{entry}/{x}" for x in sorted(os.listdir(inside)) if x not in (PART_NAME, IDLE_PART_NAME)
            ]
        else:
            out.append(entry)
    return out


def check_store(path: Location, meta: dict, force: bool) -> None:
    """`analyze --store` rewrites the capture in place: the file, or a folder's metadata file and idle
    parts. Without `force`, each must be one the user may write and owns (files.check_rewrite)."""
    if meta.get("form") != "folder":
        files.check_rewrite(path, force)
        return
    files.check_rewrite(files.join(path, FOLDER_META), force)
    for part in meta.get("parts") or []:
        files.check_rewrite(files.join(path, f"rank={part['rank']}", IDLE_PART_NAME), force)


@contextmanager
def atomic_path(path: Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside `path`; move it to `path` only if the block succeeds (over an
    existing `path` only with `replace`: files.publish). The temporary file is removed whatever happens
    (short of the process being killed), and a write that fails for a reason of the output's (no space,
    a file-size limit, no permission, a read-only file system, a name too long: files.WRITE_ERRNOS)
    becomes one OutputWriteError."""
    named = Path(path)
    path = Path(files.output_target(named))
    with files.new_folders_removed_on_failure(path):
        tmp_path = files.temp_file(path)
        try:
            yield tmp_path
            files.publish(tmp_path, path, replace=replace)
        except OSError as exc:
            if exc.errno in files.WRITE_ERRNOS:
                raise write_error(named, exc) from None
            raise
        finally:
            if tmp_path.exists():
                tmp_path.unlink()


write_error = files.write_error


def write_capture(capture: Capture, path: Path, *, force: bool = False) -> Path:
    """Write a capture atomically (temp file + rename). Existing files are kept unless `force`."""
    path = Path(path)
    check_output(path, force)
    meta = dict(capture.meta)
    md = file_metadata(
        sources=meta.get("sources", []),
        traces=meta.get("traces", []),
        manifest=meta.get("manifest"),
        analysis=meta.get("analysis"),
        failed=meta.get("failed"),
    )
    rows = Summary(steps=False)
    rows.add_table(capture.table)
    md.update(rows_metadata(rows, capture.table.num_rows))
    table = capture.table.cast(SCHEMA).replace_schema_metadata(md)
    with atomic_path(path, replace=force) as tmp:
        try:
            pq.write_table(table, tmp, **PARQUET_OPTIONS)
        except OSError as exc:
            raise write_error(path, exc) from None
    capture.path = path
    return path


@dataclass(frozen=True)
class EncodedRows:
    """Rows already encoded as the row groups of a capture file (`encode_rows`, in a parse's decode
    worker): a stitched CaptureWriter appends them as they are. `summary`: their Summary(steps=False)'s
    stored document (tracekit.data.summary), for the file's footer."""

    data: bytes
    num_rows: int
    summary: dict


def encode_rows(table: pa.Table, *, part: bool = False) -> EncodedRows:
    """`table` (schema.SCHEMA) encoded as CaptureWriter(part=part) writes it: one Parquet file of its
    row groups (tracekit.data.stitch), and the summary of its rows."""
    rows = Summary(steps=False)
    rows.add_table(table)
    schema, conformed = _conformed(table, part)
    return EncodedRows(
        stitch.encode(conformed, schema, _parquet_options(schema)), table.num_rows, rows.stored()
    )


def _conformed(table: pa.Table, part: bool) -> tuple[pa.Schema, pa.Table]:
    if not table.schema.equals(SCHEMA):  # a cast imports pyarrow.compute (start-up of a parse)
        table = table.cast(SCHEMA)
    if part:
        return RANK_SCHEMA, table.remove_column(_RANK_POSITION)
    return SCHEMA, table


_MAX_KIND_RUNS = 16  # more runs than this: rows of kinds interleaved, written as one table


def _kind_runs(table: pa.Table) -> list[pa.Table]:
    """`table` cut where its kind changes (slices, no copy), or whole: one kind, or kinds interleaved."""
    codes, _ = kind_codes(table.column("kind"))
    cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    if not len(cuts) or len(cuts) >= _MAX_KIND_RUNS:
        return [table]
    bounds = [0, *cuts.tolist(), table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


class CaptureWriter:
    """Write a capture in pieces (bounded memory): event tables as they are parsed, the metadata last.

        with CaptureWriter(path, force=force) as w:
            w.write(table)                     # any number of times, schema.SCHEMA tables
            w.meta = {"sources": [...], "traces": [...]}
    The file appears (atomically) only if the block succeeds. `stitched`: the row groups are encoded
    one table at a time and appended (tracekit.data.stitch), so that `write` also takes EncodedRows
    that a decode worker encoded; the file is byte for byte the same. The footer holds, beside the
    metadata document, the summary of every row written (tracekit.data.summary: what `tracekit info`
    reads in place of the rows)."""

    def __init__(
        self, path: Location, *, force: bool = False, part: bool = False, stitched: bool = False
    ) -> None:
        self.path = path if files.is_uri(path) else Path(path)
        check_output(self.path, force)
        self.meta: dict = {}
        self.rows = 0
        self._part = part
        # A part file of the folder form: RANK_SCHEMA, the rank column dropped from every table.
        self._schema = RANK_SCHEMA if part else SCHEMA
        self._atomic = files.atomic_write(self.path, replace=force)
        self._stitched = stitched
        self._writer: pq.ParquetWriter | stitch.Stitcher | None = None
        self._summary = Summary(steps=False)

    def __enter__(self) -> CaptureWriter:
        try:
            sink = self._atomic.__enter__()
        except OSError as exc:
            raise write_error(self.path, exc) from None
        try:
            options = _parquet_options(self._schema)
            if self._stitched:
                self._writer = stitch.Stitcher(sink, self._schema, options)
            else:
                self._writer = pq.ParquetWriter(sink, self._schema, **options)
        except OSError as exc:
            self._atomic.__exit__(type(exc), exc, None)
            raise write_error(self.path, exc) from None
        return self

    def write(self, table: pa.Table | EncodedRows) -> None:
        """Append rows. A table whose rows come in a few runs of one kind each (a rank's events, then
        its steps) is written run by run, so that each row group holds one kind: a reader of some
        kinds, and `tracekit info`, then skip the others by their statistics."""
        assert self._writer is not None
        if not table.num_rows:
            return
        try:
            for piece in [table] if isinstance(table, EncodedRows) else _kind_runs(table):
                if isinstance(self._writer, stitch.Stitcher):
                    encoded = piece if isinstance(piece, EncodedRows) else encode_rows(piece, part=self._part)
                    self._writer.append(encoded.data)
                    self._summary.merge(encoded.summary)
                else:
                    assert isinstance(piece, pa.Table), "EncodedRows need a stitched CaptureWriter"
                    self._writer.write_table(_conformed(piece, self._part)[1])
                    self._summary.add_table(piece)
        except OSError as exc:  # the disk is full, a file-size limit: whatever the errno
            raise write_error(self.path, exc) from None
        self.rows += table.num_rows

    def __exit__(self, exc_type, exc, tb) -> bool | None:
        # The footer, then the rename or the removal, run whole: a stop signal that comes meanwhile is
        # raised after them (inside the footer's write it left pyarrow's writer half closed, and its
        # __del__ printed "Exception ignored ... Invalid operation on closed file").
        with signals.held():
            lost = signals.recorded() if exc_type is None else None
            if lost is not None:  # a stop signal lost in a callback: the capture is not committed
                stop = Terminated(lost)
                self._finish(Terminated, stop, None)
                raise stop
            return self._finish(exc_type, exc, tb)

    def _finish(self, exc_type, exc, tb) -> bool | None:
        assert self._writer is not None
        try:
            if exc_type is None:
                metadata = file_metadata(
                    sources=self.meta.get("sources", []),
                    traces=self.meta.get("traces", []),
                    manifest=self.meta.get("manifest"),
                    analysis=self.meta.get("analysis"),
                    failed=self.meta.get("failed"),
                )
                metadata.update(rows_metadata(self._summary, self.rows))
                if isinstance(self._writer, stitch.Stitcher):
                    self._writer.close(metadata)  # writes the footer
                else:
                    self._writer.add_key_value_metadata(metadata)
            if isinstance(self._writer, pq.ParquetWriter):
                self._writer.close()  # writes the footer
        except OSError as err:
            if exc_type is None:
                failure = write_error(self.path, err)
                self._atomic.__exit__(type(failure), failure, None)  # removes the temporary file
                raise failure from None
            # Closing a file whose writing already failed: the first error is the one to report.
        try:
            return self._atomic.__exit__(exc_type, exc, tb)
        except OSError as err:  # closing or renaming the finished file
            if exc_type is not None or err.errno is None:
                raise
            raise write_error(self.path, err) from None


def is_capture_folder(loc: Location) -> bool:
    """A folder holding a capture's metadata file (the folder form)."""
    return files.is_dir(loc) and files.exists(files.join(loc, FOLDER_META))


def rank_part(root: Location, rank: int) -> Location:
    """Where rank `rank`'s Parquet file of the capture folder `root` is."""
    return files.join(root, f"rank={rank}", PART_NAME)


IDLE_PART_NAME = "idle-0.parquet"  # a folder's stored analysis: each rank's idle rows (analyze --store)


def is_capture(loc: Location) -> bool:
    """A capture (either form), as opposed to trace files or a run folder of traces."""
    if files.is_dir(loc):
        return is_capture_folder(loc)
    if not files.is_file(loc):
        return False
    try:
        with files.open_read(loc) as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def write_folder_meta(root: Location, meta: dict, parts: list[dict]) -> None:
    """Write the metadata file of capture folder `root` (last: it marks the folder complete).
    `parts`: [{"rank": r, "path": "rank=r/part-0.parquet", "rows": n}], by rank."""
    doc = metadata_doc(
        sources=meta.get("sources", []),
        traces=meta.get("traces", []),
        manifest=meta.get("manifest"),
        analysis=meta.get("analysis"),
        failed=meta.get("failed"),
    )
    doc["form"] = "folder"
    doc["parts"] = sorted(parts, key=lambda p: p["rank"])
    files.write_bytes(files.join(root, FOLDER_META), json.dumps(doc, sort_keys=True, default=str).encode())


def read_meta(path: Location) -> dict:
    """The tracekit metadata document of a capture (file or folder), with its schema version checked."""
    if not files.exists(path):
        raise files.not_found(path)
    if files.is_dir(path):
        meta_path = files.join(path, FOLDER_META)
        if not files.exists(meta_path):
            raise CaptureFileError(
                f"{path}: a folder without {FOLDER_META}: not a tracekit capture folder, or one whose "
                "writing was interrupted; parse the traces again"
            )
        try:
            raw = files.read_bytes(meta_path)
        except OSError as exc:
            raise CaptureFileError(f"{meta_path}: cannot read ({exc})") from None
        return _checked(raw, meta_path)
    try:
        # The file's key-value metadata (written at close by CaptureWriter, or from the schema).
        with files.open_read(path) as fh:
            kv = pq.read_metadata(fh).metadata
    except (pa.ArrowException, OSError) as exc:
        raise CaptureFileError(f"{path}: not a Parquet file ({files.first_line(exc)})") from None
    stored = (kv or {}).get(METADATA_KEY)
    if stored is None:
        raise CaptureFileError(
            f"{path}: a Parquet file, but not a tracekit capture (no '{METADATA_KEY.decode()}' metadata); "
            "make one with `tracekit parse TRACE -o capture.parquet`"
        )
    return _checked(stored, path)


def _checked(raw: bytes, path: Location) -> dict:
    try:
        meta = json.loads(raw)
    except ValueError:
        raise CaptureFileError(f"{path}: tracekit metadata is not valid JSON") from None
    if not isinstance(meta, dict):
        raise CaptureFileError(f"{path}: tracekit metadata is not a JSON object")
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise CaptureFileError(f"{path}: tracekit metadata has no schema_version")
    if version > SCHEMA_VERSION:
        raise CaptureFileError(
            f"{path}: capture schema version {version} needs a newer tracekit "
            f"(this one reads up to version {SCHEMA_VERSION}); upgrade tracekit or re-parse the trace"
        )
    if version < SCHEMA_VERSION:
        raise CaptureFileError(
            f"{path}: capture schema version {version} is older than this tracekit's {SCHEMA_VERSION}; "
            "re-parse the original trace with `tracekit parse`"
        )
    _check_meta_shape(meta, path)
    return meta


_DAMAGED = "a damaged or hand-edited capture; parse the traces again"


def _check_meta_shape(meta: dict, path: Location) -> None:
    """The parts of the metadata document tracekit reads have the shapes it wrote: lists of objects,
    ranks that are ints, part paths inside the capture folder (a document naming ../../etc/x, or an
    absolute path, would make tracekit read files outside the capture)."""
    for key in ("traces", "sources", "failed", "parts"):
        value = meta.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(x, dict) for x in value)):
            raise CaptureFileError(f"{path}: its metadata's '{key}' is not a list of objects ({_DAMAGED})")
    for key in ("manifest", "analysis"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise CaptureFileError(f"{path}: its metadata's '{key}' is not an object ({_DAMAGED})")
    for trace in meta.get("traces") or []:
        if "rank" in trace and not _is_rank(trace["rank"]):
            raise CaptureFileError(
                f"{path}: a trace's rank is {trace['rank']!r}, not a rank number ({_DAMAGED})"
            )
    if meta.get("form") != "folder":
        return
    for part in meta.get("parts") or []:
        if not _is_rank(part.get("rank")):
            raise CaptureFileError(
                f"{path}: a part's rank is {part.get('rank')!r}, not a rank number ({_DAMAGED})"
            )
        for key in ("path", "idle"):
            rel = part.get(key)
            if (key == "path" or rel is not None) and not _inside(rel):
                raise CaptureFileError(
                    f"{path}: a part's {key} {rel!r} is not a file inside the capture folder ({_DAMAGED})"
                )


def _is_rank(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _inside(rel) -> bool:
    """A relative path below the folder: no '..', no absolute path, no drive, no backslash."""
    if not isinstance(rel, str) or not rel or "\\" in rel or ":" in rel.split("/")[0]:
        return False
    parts = rel.split("/")
    return not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def check_schema(path: Location, meta: dict) -> None:
    """The columns and types of a capture's files (footers only: nothing read), as _check_schema."""
    try:
        if meta.get("form") != "folder":
            with files.open_read(path) as fh:
                _check_schema(pq.read_schema(fh), path)
            return
        for part in meta.get("parts") or []:
            loc = files.join(path, *part["path"].split("/"))
            with files.open_read(loc) as fh:
                _check_schema(pq.read_schema(fh), loc, [c for c in SCHEMA.names if c != "rank"])
    except (pa.ArrowException, OSError) as exc:
        raise CaptureFileError(f"{path}: cannot read capture ({files.first_line(exc)})") from None


def _checked_table(table: pa.Table, path: Location, columns: Optional[list[str]] = None) -> pa.Table:
    """The table checked against the schema, with the optional columns it lacks (a capture parsed before
    they were added) as nulls, where they are asked for (all columns, or named in `columns`)."""
    _check_schema(table.schema, path, columns)
    names = SCHEMA.names if columns is None else columns
    for name in names:
        if name in OPTIONAL_COLUMNS and name not in table.column_names:
            at = min(names.index(name), table.num_columns)
            table = table.add_column(
                at, SCHEMA.field(name), pa.nulls(table.num_rows, SCHEMA.field(name).type)
            )
    return table


def _readable(
    loc: Location, columns: Optional[list[str]], schema: Optional[pa.Schema] = None
) -> Optional[list[str]]:
    """`columns` less the optional ones the file at `loc` lacks (pyarrow refuses a column it has not):
    they are added back as nulls by _checked_table. `schema`: the file's, where the caller read it."""
    if columns is None or not OPTIONAL_COLUMNS.intersection(columns):
        return columns
    if schema is None:
        with files.open_read(loc) as fh:
            schema = pq.read_schema(fh)
    return [c for c in columns if c in schema.names or c not in OPTIONAL_COLUMNS]


def _check_schema(schema: pa.Schema, path: Location, columns: Optional[list[str]] = None) -> None:
    """A capture's table has the schema's columns and types (a file whose column was dropped or retyped
    by another tool used to end in a KeyError or a 33-line schema dump, or be analysed as it was)."""
    for want in SCHEMA if columns is None else [SCHEMA.field(c) for c in columns if c in SCHEMA.names]:
        if want.name not in schema.names and want.name in OPTIONAL_COLUMNS:
            continue  # a capture parsed before the column was added: read as nulls
        if want.name not in schema.names:
            raise CaptureFileError(f"{path}: the capture has no column '{want.name}' ({_DAMAGED})")
        got = schema.field(want.name).type
        if not _same_type(got, want.type):
            raise CaptureFileError(
                f"{path}: the capture's column '{want.name}' is {got}, not {want.type} ({_DAMAGED})"
            )


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    def base(t: pa.DataType) -> pa.DataType:
        t = t.value_type if pa.types.is_dictionary(t) else t
        return pa.string() if pa.types.is_large_string(t) else t

    return base(got) == base(want)


def capture_ranks(meta: dict) -> list[int]:
    """The ranks a capture holds, from its metadata document (either form)."""
    if meta.get("form") == "folder":
        return sorted(int(p["rank"]) for p in meta.get("parts") or [])
    return sorted({int(t.get("rank", 0)) for t in meta.get("traces") or []})


def read_rank(
    path: Location,
    rank: int,
    meta: dict,
    columns: Optional[list[str]] = None,
    kinds: Optional[Sequence[str]] = None,
) -> pa.Table:
    """One rank's rows of a capture (either form) as a schema.SCHEMA table (or `columns` of it; `kinds`:
    see read_capture, for the folder form)."""
    arrow.prefer_jemalloc()
    try:
        if meta.get("form") == "folder":
            part = next((p for p in meta.get("parts") or [] if int(p["rank"]) == rank), None)
            if part is None:
                raise CaptureFileError(
                    f"{path}: no rank {rank} in this capture (ranks {capture_ranks(meta)})"
                )
            want = [c for c in (SCHEMA.names if columns is None else columns) if c != "rank"]
            tables = []
            for rel in (part["path"], part.get("idle")):  # the rank's rows; its stored idle rows
                if rel:
                    loc = files.join(path, *rel.split("/"))
                    with files.open_read(loc) as fh:
                        t = _read_kinds(fh, _readable(loc, want), kinds)
                    tables.append(_checked_table(t, loc, want))
            table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            return _checked_table(_with_rank_column(table, rank, columns), path, columns)
        readable = _readable(path, columns)
        with files.open_read(path) as fh:
            table = pq.read_table(fh, columns=readable, filters=[("rank", "=", rank)])
        return _checked_table(table, path, columns)
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise CaptureFileError(f"{path}: cannot read rank {rank} ({files.first_line(exc)})") from None


def read_ranks(path: Location, ranks: list[int], meta: dict, columns: Optional[list[str]] = None) -> pa.Table:
    """The rows of several ranks of a capture (either form) as one schema.SCHEMA table (or `columns`)."""
    arrow.prefer_jemalloc()
    if meta.get("form") == "folder" or len(ranks) == 1:
        tables = [read_rank(path, r, meta, columns) for r in ranks]
        if len(tables) == 1:
            return tables[0]
        schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
        return pa.concat_tables([t.cast(schema) for t in tables])
    try:
        readable = _readable(path, columns)
        with files.open_read(path) as fh:
            table = pq.read_table(fh, columns=readable, filters=[("rank", "in", list(ranks))])
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise CaptureFileError(f"{path}: cannot read ranks {ranks} ({files.first_line(exc)})") from None
    return _checked_table(table, path, columns)


def _with_rank_column(table: pa.Table, rank: int, columns: Optional[list[str]]) -> pa.Table:
    rank_col = arrow.from_numpy(np.full(table.num_rows, rank, dtype=np.int32))  # no pandas import
    if columns is None:
        return table.add_column(_RANK_POSITION, SCHEMA.field("rank"), rank_col)
    if "rank" not in columns:
        return table
    return table.add_column(columns.index("rank"), SCHEMA.field("rank"), rank_col)


def read_capture(
    path: Location, columns: list[str] | None = None, kinds: Optional[Sequence[str]] = None
) -> Capture:
    """Read a whole capture (file or folder) into memory (or only `columns` of it; with `kinds`, only
    the row groups that may hold rows of those kinds, by their `kind` statistics: what a reader of
    events and steps does not need (the busy and dispatch-gap rows of captures by earlier versions) is
    not read; a row group of unknown or mixed kinds is read whole)."""
    arrow.prefer_jemalloc()
    meta = read_meta(path)
    if meta.get("form") == "folder":
        parts = [read_rank(path, r, meta, columns, kinds) for r in capture_ranks(meta)]
        schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
        table = pa.concat_tables([t.cast(schema) for t in parts]) if parts else schema.empty_table()
        return Capture(table=table, meta=meta, path=path)
    try:
        with files.open_read(path) as fh:
            schema = pq.read_schema(fh)
        _check_schema(schema, path, columns)
        readable = _readable(path, columns, schema)
        with files.open_read(path) as fh:
            table = pq.read_table(fh, columns=readable) if kinds is None else _read_kinds(fh, readable, kinds)
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise CaptureFileError(f"{path}: cannot read capture ({files.first_line(exc)})") from None
    return Capture(table=_checked_table(table, path, columns), meta=meta, path=path)


def _read_kinds(fh: Any, columns: Optional[list[str]], kinds: Optional[Sequence[str]]) -> pa.Table:
    """`columns` of the row groups of an open Parquet file that may hold rows of `kinds`
    (tracekit.data.summary's reading of the `kind` statistics CaptureWriter writes); all of them with
    `kinds` None. (ParquetFile, not read_table: that one imports pandas, ~0.5 s.)"""

    pf = pq.ParquetFile(fh)
    if kinds is None:
        return pf.read(columns=columns)
    md = pf.metadata
    groups = [i for i in range(md.num_row_groups) if only_value(md.row_group(i), "kind") in (None, *kinds)]
    return pf.read_row_groups(groups, columns=columns)


# A source file's fingerprint, `sources[].xxh3_128`: the 128-bit xxHash3 of all its bytes. It says which
# file a capture was parsed from (`tracekit annotate` finds a capture's trace by it): the same bytes, as
# sha256 did, at a fraction of its cost (benchmarks/RESULTS.md); it is not a guard against a forged file
# (nothing in a capture is signed).
# Captures written before it carry `sha256`, which is still checked.
DIGEST = "xxh3_128"
_DIGESTS = ("xxh3_128", "sha256")


def file_digest(path: Location, algorithm: str = DIGEST) -> str:
    """Hex digest of a file's bytes by `algorithm` (DIGEST, or "sha256": older captures' sources)."""
    if algorithm not in _DIGESTS:
        raise ValueError(f"unknown digest {algorithm!r} (known: {', '.join(_DIGESTS)})")
    h: Any
    if algorithm == "sha256":
        h = hashlib.sha256()
    else:
        import xxhash

        h = xxhash.xxh3_128()
    if files.is_uri(path):
        with files.open_read(path) as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return h.hexdigest()
        # Hashed in place through a mapping, a window at a time, each window's pages dropped from this
        # process once hashed (a large file mapped whole and kept would add itself to a parse's peak), and
        # no copy into a buffer.
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for a in range(0, size, _DIGEST_WINDOW):
                    b = min(size, a + _DIGEST_WINDOW)
                    h.update(view[a:b])
                    if hasattr(mmap, "MADV_DONTNEED"):
                        mapped.madvise(mmap.MADV_DONTNEED, a, b - a)
            finally:
                view.release()
    return h.hexdigest()


_DIGEST_WINDOW = 64 << 20  # a multiple of the page size (madvise's start must be page-aligned)


def source_digest(source: dict) -> tuple[str, str] | None:
    """(algorithm, hex digest) a capture's `sources[]` entry records, or None."""
    for algorithm in _DIGESTS:
        if source.get(algorithm):
            return algorithm, source[algorithm]
    return None
