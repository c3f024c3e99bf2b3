"""The one data model at the parse → analysis boundary: a capture is one Parquet file, or a folder of
one Parquet file per rank (the folder form, see tracekit.data.store).

Every row is one event. Raw trace events have ``kind == "event"``; the step windows the parser derives
from them sit beside them with kind ``step``, and the analysis may store its own (``idle``). Captures by
earlier tracekit versions also hold ``busy`` and ``dispatch_gap`` rows, which no command reads. Times
are int64 nanoseconds (Kineto writes microseconds with three decimals; the parser converts the decimal
text exactly, never through a float). Strings are dictionary-encoded.

File metadata (key ``tracekit``) is one JSON object::

    {"schema_version": 1, "tracekit_version": "0.1.0",
     "sources": [{"path": "rank0.pt.trace.json.gz", "rank": 0, "bytes": 123, "xxh3_128": "..."}],
     "traces": [{"rank": 0, "source": "...", "metadata": {deviceProperties, distributedInfo, ...}}],
     "manifest": {...} or null,          # the capture manifest, when tracekit captured it
     "analysis": {...} or null,          # a stored analysis report (tracekit analyze --store)
     "failed": [{"path", "rank", "error"}]}  # only when some trace files of the job failed to parse
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pyarrow as pa

from tracekit.version import __version__

SCHEMA_VERSION = 1
METADATA_KEY = b"tracekit"

# Row kinds.
KIND_EVENT = "event"  # a raw trace event
KIND_STEP = "step"  # a step window: ProfilerStep#N on the thread that calls prof.step() (DESIGN.md)
# The profiler's step span, the one step-marker rule (parse and analysis): at most 18 digits, so that the
# number fits the int64 step column (a longer one is not a profiler's step span).
STEP_NAME = re.compile(r"^ProfilerStep#(\d{1,18})$")
# Written by earlier tracekit versions only (no command reads them): a maximal device-busy interval (the
# union of kernel/memcpy/memset over all streams), and host time between consecutive top-level cpu_ops.
KIND_BUSY = "busy"
KIND_DISPATCH_GAP = "dispatch_gap"
KIND_IDLE = "idle"  # analysis: an idle gap with its cause (stored by `analyze --store`)
ROW_KINDS = (KIND_EVENT, KIND_STEP, KIND_BUSY, KIND_DISPATCH_GAP, KIND_IDLE)

# Normalised event categories (the parser maps old Kineto spellings onto these; see parse.py).
CAT_KERNEL = "kernel"
CAT_MEMCPY = "gpu_memcpy"
CAT_MEMSET = "gpu_memset"
CAT_RUNTIME = "cuda_runtime"
CAT_DRIVER = "cuda_driver"
CAT_CPU_OP = "cpu_op"
CAT_USER_ANNOTATION = "user_annotation"
CAT_GPU_USER_ANNOTATION = "gpu_user_annotation"
CAT_PYTHON_FUNCTION = "python_function"
CAT_CUDA_SYNC = "cuda_sync"
CAT_FLOW = "ac2g"  # CPU → GPU launch flow
DEVICE_ACTIVITY_CATS = (CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET)


@dataclass(frozen=True)
class Column:
    """One column: its name, the trace key it comes from, its Arrow type, its unit, and what it means."""

    name: str
    source: str
    type: pa.DataType
    unit: str
    doc: str


_STR = pa.dictionary(pa.int32(), pa.string())

COLUMNS: tuple[Column, ...] = (
    Column("kind", "-", _STR, "", "row kind: event | step | idle (busy, dispatch_gap: earlier versions)"),
    Column("rank", "distributedInfo.rank", pa.int32(), "", "rank of the trace file (0 when unknown)"),
    Column("ph", "ph", _STR, "", "Chrome-trace phase: X, i, s, f, M, C ..."),
    Column("cat", "cat", _STR, "", "normalised category (kernel, cpu_op, cuda_runtime, ac2g ...)"),
    Column("name", "name", _STR, "", "event name; for step rows ProfilerStep#N"),
    Column("pid", "pid", pa.int64(), "", "process id, or device index for device activity"),
    Column("tid", "tid", pa.int64(), "", "thread id, or stream for device activity"),
    Column("ts_ns", "ts", pa.int64(), "ns", "start time"),
    Column("dur_ns", "dur", pa.int64(), "ns", "duration (0 for instants, flows, metadata)"),
    Column(
        "device", "args.device", pa.int32(), "", "device of device activity (else pid); [memory]: Device Id"
    ),
    Column("stream", "args.stream", pa.int64(), "", "stream of device activity / cuda_sync"),
    Column("correlation", "args.correlation", pa.int64(), "", "links a runtime call to its activity"),
    Column("external_id", "args.External id", pa.int64(), "", "links a cpu_op to its runtime calls"),
    Column(
        "flow_id", "id", pa.int64(), "", "flow id of s/f events; [memory]: args.Addr, the block's address"
    ),
    Column("seq", "args.Sequence number", pa.int64(), "", "autograd sequence number"),
    Column("fwd_tid", "args.Fwd thread id", pa.int64(), "", "forward thread of a backward op"),
    Column(
        "bytes", "args.bytes", pa.int64(), "bytes", "bytes moved by memcpy / memset; [memory]: args.Bytes"
    ),
    Column("sync_kind", "args.cuda_sync_kind", _STR, "", "cuda_sync kind: Stream Sync, Event Sync ..."),
    Column("wait_stream", "args.wait_on_stream", pa.int64(), "", "stream waited on (cuda_sync)"),
    Column("py_id", "args.Python id", pa.int64(), "", "python_function node id"),
    Column("py_parent", "args.Python parent id", pa.int64(), "", "python_function parent node id"),
    Column("collective", "args.Collective name", _STR, "", "NCCL collective name"),
    Column("msg_nelems", "args.In msg nelems", pa.int64(), "", "NCCL input message elements"),
    Column("group_size", "args.Group size", pa.int32(), "", "NCCL process group size"),
    Column("pg_ranks", "args.Process Group Ranks", _STR, "", "NCCL process group ranks, as written"),
    Column("label", "args.name", _STR, "", "process/thread name of M events"),
    Column("step", "-", pa.int32(), "", "derived rows: the step number N of ProfilerStep#N"),
    Column("cause", "-", _STR, "", "idle rows: attributed cause"),
    Column("total_allocated", "args.Total Allocated", pa.int64(), "bytes", "[memory] instants: allocated"),
    Column("total_reserved", "args.Total Reserved", pa.int64(), "bytes", "[memory] instants: reserved"),
    Column(
        "input_dims",
        "args.Input Dims",
        _STR,
        "",
        "cpu_op: its inputs' shapes as the trace writes them (record_shapes=True), JSON text; absent in "
        "captures parsed before it (read as null: OPTIONAL_COLUMNS)",
    ),
)
# Columns added after schema version 1 was fixed: a capture parsed before lacks them, and reads them as
# nulls (tracekit.data.store), so captures already made stay readable.
OPTIONAL_COLUMNS = frozenset({"input_dims"})

SCHEMA = pa.schema([pa.field(c.name, c.type) for c in COLUMNS])
COLUMN_NAMES = tuple(c.name for c in COLUMNS)


def metadata_doc(
    *,
    sources: list[dict],
    traces: list[dict],
    manifest: dict | None = None,
    analysis: dict | None = None,
    failed: list[dict] | None = None,
) -> dict:
    """The tracekit metadata document of a capture (the value of a file's ``tracekit`` key).
    `failed`: trace files of the job that could not be parsed (path, rank, error), when there are."""

    doc = {
        "schema_version": SCHEMA_VERSION,
        "tracekit_version": __version__,
        "sources": sources,
        "traces": traces,
        "manifest": manifest,
        "analysis": analysis,
    }
    if failed:
        doc["failed"] = failed
    return doc


def file_metadata(
    *,
    sources: list[dict],
    traces: list[dict],
    manifest: dict | None = None,
    analysis: dict | None = None,
    failed: list[dict] | None = None,
) -> dict[bytes, bytes]:
    """The Parquet key-value metadata of a capture file."""
    doc = metadata_doc(sources=sources, traces=traces, manifest=manifest, analysis=analysis, failed=failed)
    return {METADATA_KEY: json.dumps(doc, sort_keys=True, default=str).encode()}


def device_properties(metadata: object) -> list[dict]:
    """A trace's `deviceProperties` (Kineto: a list of objects with id, name, ...), only the objects
    (a damaged or foreign trace may hold a string, or a list of strings: the parser drops and counts
    those, and a capture parsed before that holds them as they were)."""
    props = metadata.get("deviceProperties") if isinstance(metadata, dict) else None
    return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
