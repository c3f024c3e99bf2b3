"""Parse PyTorch profiler (Kineto) Chrome traces into one capture: raw events plus derived rows.

    capture = parse_paths([Path("run/")])          # a run folder, or trace files (one per rank)
    write_capture(capture, Path("capture.parquet"))
    capture = load_capture(Path("capture.parquet"))  # or a trace / folder, parsed on the fly

Format quirks are handled here and in `_decode.py`, once, and listed in docs/QUIRKS.md.
"""

from __future__ import annotations

import decimal
import hashlib
import os
import re
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import _decode
from tracekit.derive import derive_rows
from tracekit.errors import InputNotFound, OutputExistsError, TraceFormatError
from tracekit.schema import KIND_EVENT, SCHEMA
from tracekit.store import Capture, check_output, read_capture, write_capture

TRACE_SUFFIXES = (".json", ".json.gz")
PARQUET_MAGIC = b"PAR1"

# Progress callback: (source name, bytes done, bytes total).
Progress = Callable[[str, int, int], None]

# A µs timestamp at or above this is after the year 5000: such a trace must be in ns.
_NS_MAGNITUDE = 10**17


def parse_paths(paths: list[Path], *, salvage: bool = False, progress: Optional[Progress] = None) -> Capture:
    """Parse trace files and/or run folders (one file per rank) into one in-memory Capture.

    Each file's rank comes from its ``distributedInfo.rank``, else from its name (``rank-3``,
    ``rank_3``, ``rank3``), else 0. With `salvage`, a truncated file keeps every complete event.
    Raises a TracekitError subclass for anything that is not a readable trace."""
    files = find_trace_files(paths)
    tables, sources, traces = [], [], []
    for path, display in files:
        table, source, trace = parse_file(path, display, salvage=salvage, progress=progress)
        tables.append(table)
        sources.append(source)
        traces.append(trace)
    events = pa.concat_tables(tables)
    if events.num_rows == 0:
        names = ", ".join(str(p) for p, _ in files)
        raise TraceFormatError(f"{names}: no profiler events in the trace; nothing to parse")
    table = pa.concat_tables([events, derive_rows(events)])
    return Capture(table=table, meta={"sources": sources, "traces": traces, "manifest": None})


def load_capture(path: Path) -> Capture:
    """A capture from a .parquet capture file, or parsed on the fly from a trace file or run folder."""
    path = Path(path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file or folder")
    if path.is_file():
        with open(path, "rb") as fh:
            if fh.read(4) == PARQUET_MAGIC:
                return read_capture(path)
    return parse_paths([path])


# ---------------------------------------------------------------------------------------------------


def find_trace_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """(path, display name) of every trace file named or inside a named folder (not recursive)."""
    if not paths:
        raise InputNotFound("no trace given; name a trace file (*.pt.trace.json[.gz]) or a run folder")
    found: list[tuple[Path, str]] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise InputNotFound(f"{p}: no such file or folder")
        if p.is_dir():
            inside = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(TRACE_SUFFIXES))
            if not inside:
                subdirs = sorted(q.name for q in p.iterdir() if q.is_dir())
                hint = f" (it has folders: {', '.join(subdirs[:5])}; name one run folder)" if subdirs else ""
                raise InputNotFound(f"{p}: no trace files (*.json, *.json.gz) in this folder{hint}")
            found.extend((q, f"{p.name}/{q.name}" if p.name else q.name) for q in inside)
        else:
            found.append((p, p.name))
    return found


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_of(metadata: dict, name: str) -> int:
    """distributedInfo.rank, else a rank in the file name (rank-3, rank_3, rank3), else 0."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
        if isinstance(r, str) and r.strip().isdigit():
            return int(r)
    m = _RANK_IN_NAME.search(Path(name).name)
    return int(m.group(1)) if m else 0


def parse_file(
    path: Path, display: str, *, salvage: bool = False, progress: Optional[Progress] = None
) -> tuple[pa.Table, dict, dict]:
    """One trace file → (table of its raw events in schema.SCHEMA, source entry, trace entry)."""
    buf, gz_truncated = _decode.read_trace_bytes(path)
    size = os.path.getsize(path)
    if progress:
        progress(display, 0, size)
    # Errors name the path as the user gave it; the capture's metadata keeps only `display`.
    doc = _decode.split_document(buf, path, salvage=salvage, gz_truncated=gz_truncated)
    batch, stats = _decode.decode_events(doc.events, where=str(path))
    unit = time_unit(doc.metadata, stats)
    rank = rank_of(doc.metadata, display)
    table, dropped = _to_schema(pa.Table.from_batches([batch]), rank=rank, unit=unit)
    if progress:
        progress(display, size, size)
    source = {"path": display, "rank": rank, "bytes": size, "sha256": _sha256(path)}
    metadata = dict(doc.metadata)
    if isinstance(metadata.get("traceName"), str):
        # Kineto writes the absolute temp path it traced to; keep only the file name.
        metadata["traceName"] = Path(metadata["traceName"]).name
    trace = {
        "rank": rank,
        "source": display,
        "time_unit": unit,
        "events": table.num_rows,
        "events_in_file": stats["events_seen"],
        "dropped_events_without_time": dropped,
        "salvaged_dropped_bytes": doc.dropped_bytes if salvage else None,
        "metadata": metadata,
    }
    return table, source, trace


def time_unit(metadata: dict, stats: dict) -> str:
    """'us' or 'ns': the unit of the trace's ts/dur numbers.

    The Chrome trace format puts ts/dur in µs and Kineto always writes µs (with three decimals since
    ~torch 2.0). ``displayTimeUnit`` only sets how a viewer displays them: Kineto builds with
    DISPLAY_TRACE_IN_NS write "ns" there while still writing µs (HTA's ns_resolution trace, torch 2.3).
    So the numbers are taken as ns only when (a) a timestamp is too large to be µs (≥ 1e17: after the
    year 5000), or (b) displayTimeUnit is "ns" and no number has a fractional part (a writer that
    really wrote integer ns)."""
    if decimal.Decimal(stats["max_abs_ts"]) >= _NS_MAGNITUDE:
        return "ns"
    if metadata.get("displayTimeUnit") == "ns" and not stats["fractional"]:
        return "ns"
    return "us"


def _to_schema(raw: pa.Table, *, rank: int, unit: str) -> tuple[pa.Table, int]:
    """Raw decoded columns → schema.SCHEMA (kind=event, rank; times rescaled if the trace is in ns)."""
    columns = {name: raw.column(name).combine_chunks() for name in raw.column_names}
    ts_ns = _decode.to_int64_ns(columns.pop("ts"), unit)
    dur_ns = _decode.to_int64_ns(columns.pop("dur"), unit)
    # An event without a usable time (missing, not a number, out of range) cannot be placed: drop it.
    timed = pc.is_valid(ts_ns)
    dropped = len(ts_ns) - pc.sum(timed).as_py() if len(ts_ns) else 0
    if dropped:
        columns = {k: v.filter(timed) for k, v in columns.items()}
        ts_ns, dur_ns = ts_ns.filter(timed), dur_ns.filter(timed)
    columns["ts_ns"], columns["dur_ns"] = ts_ns, pc.fill_null(dur_ns, 0)
    n = len(ts_ns)
    arrays = []
    for field in SCHEMA:
        if field.name == "kind":
            arrays.append(pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), [KIND_EVENT]))
        elif field.name == "rank":
            arrays.append(pa.array([rank] * n, pa.int32()))
        elif field.name in columns:
            arrays.append(columns[field.name].cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA), dropped


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def parse_to_file(
    paths: list[Path],
    output: Path,
    *,
    force: bool = False,
    salvage: bool = False,
    progress: Optional[Progress] = None,
) -> Capture:
    """`tracekit parse`: parse `paths` and write the capture to `output` atomically.

    An existing `output` is kept unless `force` (checked before any parsing)."""
    output = Path(output)
    check_output(output, force)
    for p in paths:
        if Path(p).exists() and Path(p).resolve() == output.resolve():
            raise OutputExistsError(f"{output} is also an input; choose another output path")
    capture = parse_paths(paths, salvage=salvage, progress=progress)
    write_capture(capture, output, force=force)
    return capture
