"""Read and write capture files: one Parquet file per capture, written atomically, versioned on read."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION, file_metadata
from tracekit.errors import CaptureFileError, InputNotFound, OutputExistsError

# How capture files are encoded (benchmarks/RESULTS.md, "Parquet encoding", has the measurements):
# - dictionary pages only for the string columns (already dictionary arrays): trying dictionary encoding
#   on unique int64 columns such as ts_ns costs a third of the write time and saves nothing;
# - DELTA_BINARY_PACKED for the integer columns (timestamps, ids and durations change by small steps),
#   then LZ4: on real traces as small as plain + zstd (−15 % to +20 %) and ~30 % faster to write,
#   which is most of what the parser's parent process does;
# - min/max statistics only where a reader may filter row groups: computing them for every column
#   (the string ones especially) doubled the time to write a capture.
PARQUET_OPTIONS = {
    "compression": "lz4",
    "use_dictionary": [f.name for f in SCHEMA if pa.types.is_dictionary(f.type)],
    "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in SCHEMA if pa.types.is_integer(f.type)},
    "write_statistics": ["kind", "rank", "step", "ts_ns"],
}


@dataclass
class Capture:
    """A capture in memory: the event table (schema.SCHEMA) and the file metadata document."""

    table: pa.Table
    meta: dict = field(default_factory=dict)
    path: Path | None = None

    @property
    def manifest(self) -> dict | None:
        return self.meta.get("manifest")

    @property
    def traces(self) -> list[dict]:
        return self.meta.get("traces") or []

    def rows_by_kind(self) -> dict[str, int]:
        """Row counts by kind (event, step, busy, ...); cheap, and never imports pandas."""
        import pyarrow.compute as pc

        if self.table.num_rows == 0:
            return {}
        kind = _decoded(self.table, "kind")
        return {row["values"]: row["counts"] for row in pc.value_counts(kind).to_pylist() if row["values"]}

    def summary(self) -> dict:
        """What the capture holds: ranks, devices, steps, and row counts by kind and by category."""
        import pyarrow.compute as pc

        t = self.table
        kind = _decoded(t, "kind")
        is_event = pc.equal(kind, "event")
        is_step = pc.equal(kind, "step")
        steps = t.filter(is_step).select(["rank", "step", "name", "ts_ns", "dur_ns"]).to_pylist()
        events = t.filter(is_event)
        devices = sorted(
            {
                (r, d)
                for r, d in zip(
                    t.filter(pc.equal(kind, "busy")).column("rank").to_pylist(),
                    t.filter(pc.equal(kind, "busy")).column("device").to_pylist(),
                )
                if d is not None
            }
        )
        by_kind = {row["values"]: row["counts"] for row in pc.value_counts(kind).to_pylist() if row["values"]}
        cats = pc.value_counts(pc.fill_null(_decoded(events, "cat"), "(no cat)")).to_pylist()
        by_cat = dict(sorted(((row["values"], row["counts"]) for row in cats), key=lambda x: (-x[1], x[0])))
        ranks = sorted(set(t.column("rank").to_pylist()) - {None})
        return {
            "events": events.num_rows,
            "ranks": ranks,
            "devices": [{"rank": r, "device": d} for r, d in devices],
            "steps": len(steps),
            "step_rows": steps,
            "rows_by_kind": by_kind,
            "events_by_cat": by_cat,
        }


def _decoded(table: pa.Table, column: str) -> pa.Array:
    col = table.column(column).combine_chunks() if table.num_rows else pa.array([], pa.string())
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def check_output(path: Path, force: bool) -> None:
    """Refuse to overwrite an existing output unless --force."""
    if path.exists() and not force:
        raise OutputExistsError(f"{path} exists; pass --force to overwrite")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


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
    )
    table = capture.table.cast(SCHEMA).replace_schema_metadata(md)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
    capture.path = path
    return path


class CaptureWriter:
    """Write a capture in pieces (bounded memory): event tables as they are parsed, the metadata last.

        with CaptureWriter(path, force=force) as w:
            w.write(table)                     # any number of times, schema.SCHEMA tables
            w.meta = {"sources": [...], "traces": [...]}
    The file appears (atomically) only if the block succeeds."""

    def __init__(self, path: Path, *, force: bool = False) -> None:
        self.path = Path(path)
        check_output(self.path, force)
        self.meta: dict = {}
        self._atomic = atomic_path(self.path)
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> CaptureWriter:
        tmp = self._atomic.__enter__()
        self._writer = pq.ParquetWriter(tmp, SCHEMA, **PARQUET_OPTIONS)
        return self

    def write(self, table: pa.Table) -> None:
        assert self._writer is not None
        if table.num_rows:
            self._writer.write_table(table.cast(SCHEMA))

    def __exit__(self, exc_type, exc, tb) -> bool | None:
        assert self._writer is not None
        if exc_type is None:
            self._writer.add_key_value_metadata(
                file_metadata(
                    sources=self.meta.get("sources", []),
                    traces=self.meta.get("traces", []),
                    manifest=self.meta.get("manifest"),
                    analysis=self.meta.get("analysis"),
                )
            )
        self._writer.close()
        return self._atomic.__exit__(exc_type, exc, tb)


def read_meta(path: Path) -> dict:
    """The tracekit metadata document of a capture file, with its schema version checked."""
    path = Path(path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file")
    try:
        # The file's key-value metadata (written at close by CaptureWriter, or from the schema).
        kv = pq.read_metadata(path).metadata
    except (pa.ArrowException, OSError) as exc:
        raise CaptureFileError(f"{path}: not a Parquet file ({exc})") from None
    raw = (kv or {}).get(METADATA_KEY)
    if raw is None:
        raise CaptureFileError(
            f"{path}: a Parquet file, but not a tracekit capture (no '{METADATA_KEY.decode()}' metadata); "
            "make one with `tracekit parse TRACE -o capture.parquet`"
        )
    try:
        meta = json.loads(raw)
    except ValueError:
        raise CaptureFileError(f"{path}: tracekit metadata is not valid JSON") from None
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
    return meta


def read_capture(path: Path, columns: list[str] | None = None) -> Capture:
    """Read a capture file written by `write_capture`."""
    path = Path(path)
    meta = read_meta(path)
    try:
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise CaptureFileError(f"{path}: cannot read capture ({exc})") from None
    return Capture(table=table, meta=meta, path=path)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks (the `sources[].sha256` of a capture)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
