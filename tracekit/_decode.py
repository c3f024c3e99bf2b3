"""Decoding Kineto Chrome-trace JSON into Arrow columns (the parser's private engine).

The JSON is decoded typed with msgspec: one small Struct per event holding only the fields and ``args``
keys that tracekit keeps (everything else is skipped by the decoder without building Python objects).
Numbers that may be fractional (``ts``, ``dur``) are decoded untyped with ``float_hook=str``, so a float
arrives as its exact decimal text and is converted to integer nanoseconds by Arrow's string → decimal
cast, never through a double (1.7e15 µs with three decimals has 19 significant digits; a double has 16).

`decode_events` turns one JSON array of events into one Arrow RecordBatch of `RAW_SCHEMA`; `parse.py`
splits big files into chunks at event boundaries and calls it per chunk, in worker processes.
"""

from __future__ import annotations

import decimal
import gc
import gzip
import json
import mmap
import re
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import InputNotFound, TraceFormatError, TruncatedTraceError

# ---------------------------------------------------------------------------------------------------
# The typed view of one event. Field names are the Chrome-trace / Kineto keys; every value is `Any` so
# that a trace with an odd type in one field (a string pid, a stream written as "0x0") still decodes:
# the column builders below coerce values and turn what cannot be coerced into nulls.


class _Args(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    # Very old Kineto (torch 1.8/1.9, e.g. HTA's inference_rank_1 trace) spells it in lower case.
    external_id_old: Any = msgspec.field(default=None, name="external id")
    seq: Any = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Any = msgspec.field(default=None, name="Fwd thread id")
    bytes: Any = None
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    wait_stream: Any = msgspec.field(default=None, name="wait_on_stream")
    py_id: Any = msgspec.field(default=None, name="Python id")
    py_parent: Any = msgspec.field(default=None, name="Python parent id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    name: Any = None
    # [memory] instants (profile_memory=True)
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Optional[_Args] = None


_EMPTY_ARGS = _Args()
_EVENTS_DECODER = msgspec.json.Decoder(list[Optional[_Event]], float_hook=str)
_TOP_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY_DECODER = msgspec.json.Decoder()

# Old Kineto category spellings → the current ones (schema.py). torch 1.8/1.9 Kineto wrote
# Operator/Runtime/Kernel/Memcpy/Memset and flow categories async_gpu; torch ≤1.12 wrote the flow
# category async_cpu_to_gpu (HTA's control/test traces). Newer Kineto writes ac2g.
CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async_gpu": "ac2g",
    "async_cpu_to_gpu": "ac2g",
}
KEEP_CATS = (
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
)
# Device-side events: device = args.device else pid, stream = args.stream else tid.
DEVICE_SIDE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync")
META_NAMES = ("process_name", "thread_name")
MEMORY_NAME = "[memory]"

_STR = pa.dictionary(pa.int32(), pa.string())
US = pa.decimal128(38, 3)  # times as written: µs (or ns), three decimals, exact

# The columns decode_events produces (a subset of schema.SCHEMA, plus the raw-µs flag column).
RAW_SCHEMA = pa.schema(
    [
        ("ph", _STR),
        ("cat", _STR),
        ("name", _STR),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts", US),  # as written: µs (or ns, see parse.time_unit), exact
        ("dur", US),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("correlation", pa.int64()),
        ("external_id", pa.int64()),
        ("flow_id", pa.int64()),
        ("seq", pa.int64()),
        ("fwd_tid", pa.int64()),
        ("bytes", pa.int64()),
        ("sync_kind", _STR),
        ("wait_stream", pa.int64()),
        ("py_id", pa.int64()),
        ("py_parent", pa.int64()),
        ("collective", _STR),
        ("msg_nelems", pa.int64()),
        ("group_size", pa.int32()),
        ("pg_ranks", _STR),
        ("label", _STR),
        ("total_allocated", pa.int64()),
        ("total_reserved", pa.int64()),
    ]
)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC while decoding: millions of short-lived objects make it run constantly."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---------------------------------------------------------------------------------------------------
# Reading files


def read_trace_bytes(path: Path) -> tuple[bytes | mmap.mmap, bool]:
    """The JSON bytes of a trace file (gunzipped), and whether the gzip stream ended early.

    Plain files are memory-mapped (the OS pages them in as the decoder walks them)."""
    path = Path(path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file")
    if path.is_dir():
        raise InputNotFound(f"{path}: is a folder, expected a trace file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic == b"\x1f\x8b":
                fh.seek(0)
                return _gunzip(path, fh.read())
            fh.seek(0, 2)
            if fh.tell() == 0:
                raise TraceFormatError(f"{path}: empty file, not a trace")
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), False
    except OSError as exc:
        raise InputNotFound(f"{path}: cannot read ({exc.strerror or exc})") from None


def _gunzip(path: Path, data: bytes) -> tuple[bytes, bool]:
    try:
        return gzip.decompress(data), False
    except EOFError:
        pass  # the gzip stream ends early: a trace cut off while being written
    except (OSError, zlib.error) as exc:
        raise TraceFormatError(
            f"{path}: corrupt gzip file ({exc}); re-copy or re-capture the trace"
        ) from None
    # Keep what decompresses before the cut; the JSON decoder then reports it as truncated.
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(data)
    except zlib.error as exc:
        raise TraceFormatError(
            f"{path}: corrupt gzip file ({exc}); re-copy or re-capture the trace"
        ) from None
    return out, True


# ---------------------------------------------------------------------------------------------------
# The document: trace-level metadata and the byte range of traceEvents

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class Document:
    """A trace file split into its metadata (dict) and the raw bytes of its traceEvents array."""

    def __init__(self, metadata: dict, events: bytes | memoryview, dropped_bytes: int = 0) -> None:
        self.metadata = metadata
        self.events = events  # the JSON array text, '[' ... ']'
        self.dropped_bytes = dropped_bytes


def split_document(buf: bytes | mmap.mmap, path: Path, *, salvage: bool, gz_truncated: bool) -> Document:
    """Decode the top level of a trace; keep traceEvents as raw bytes for the chunked event decoder."""
    view = memoryview(buf)
    start = _first_non_ws(view)
    if start is None:
        raise TraceFormatError(f"{path}: empty file, not a trace")
    first = view[start : start + 1].tobytes()
    if first not in (b"{", b"["):
        try:
            value = _ANY_DECODER.decode(view)
        except msgspec.DecodeError:
            raise TraceFormatError(
                f"{path}: not JSON (starts with {bytes(view[start : start + 12])!r}); "
                "expected a PyTorch profiler trace (*.pt.trace.json[.gz])"
            ) from None
        raise TraceFormatError(
            f"{path}: JSON, but not a Chrome trace (the top level is a {type(value).__name__}, "
            "expected an object with 'traceEvents')"
        )
    try:
        if first == b"[":
            # The Chrome trace "JSON Array Format": a bare list of events, no metadata.
            return Document({}, view)
        top = _TOP_DECODER.decode(view)
    except msgspec.DecodeError as exc:
        if _is_truncation(exc) or gz_truncated:
            return _truncated(view, path, salvage=salvage, reason=str(exc))
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"{path}: not a Chrome trace ({exc})") from None
    if gz_truncated:
        return _truncated(view, path, salvage=salvage, reason="gzip stream ends early")
    raw = top.pop("traceEvents", None)
    if raw is None:
        raise TraceFormatError(
            f"{path}: JSON, but not a Chrome trace (no 'traceEvents' key; keys: {', '.join(sorted(top)[:8])})"
        )
    metadata = {}
    for key, value in top.items():
        try:
            metadata[key] = _ANY_DECODER.decode(value)
        except msgspec.DecodeError:  # pragma: no cover - msgspec already validated it
            continue
    events = _locate(view, raw)
    if _first_non_ws(events) is None or events[_first_non_ws(events)] != ord("["):
        raise TraceFormatError(f"{path}: not a Chrome trace ('traceEvents' is not a list)")
    return Document(metadata, events)


def _first_non_ws(view: memoryview | bytes) -> int | None:
    n = len(view)
    i = 0
    # Look at a bounded prefix at a time: the view may be a 1 GB mmap.
    while i < n:
        block = bytes(view[i : i + 4096])
        stripped = block.lstrip()
        if stripped:
            return i + len(block) - len(stripped)
        i += 4096
    return None


def _locate(view: memoryview, raw: msgspec.Raw) -> memoryview:
    """The slice of `view` that holds `raw` (msgspec.Raw is a view into the input, but has no offset)."""
    raw_view = memoryview(raw)
    size = len(raw_view)
    for m in _EVENTS_KEY.finditer(view):
        begin = m.end() - 1
        if view[begin : begin + size] == raw_view:
            return view[begin : begin + size]
    return raw_view  # pragma: no cover - key written with escapes; the Raw itself is still valid


def _is_truncation(exc: Exception) -> bool:
    return "truncated" in str(exc).lower()


def _truncated(view: memoryview, path: Path, *, salvage: bool, reason: str) -> Document:
    if not salvage:
        raise TruncatedTraceError(
            f"{path}: the JSON ends early ({reason}): the profiler was probably killed while writing it; "
            "pass --salvage to keep every complete event"
        )
    m = _EVENTS_KEY.search(view)
    if m is None:
        raise TruncatedTraceError(f"{path}: the JSON ends before its first event; nothing to salvage")
    header = bytes(view[: m.start()])
    events_start = m.end() - 1
    end = _last_complete_event_end(view, events_start)
    if end is None:
        raise TruncatedTraceError(
            f"{path}: the JSON ends before its first complete event; nothing to salvage"
        )
    events = bytes(view[events_start:end]) + b"]"
    return Document(_salvage_header(header), events, dropped_bytes=len(view) - end)


def _last_complete_event_end(view: memoryview, events_start: int, max_tries: int = 10_000) -> int | None:
    """The offset just past the last complete event of a truncated traceEvents array.

    Walks back over the '}' bytes from the end; the first prefix that decodes as a list of events wins.
    Each try decodes the whole prefix, but the last complete event is almost always within a few '}'."""
    data = view[events_start:]
    pos = len(data)
    tries = 0
    raw = bytes(data)
    while tries < max_tries:
        pos = raw.rfind(b"}", 0, pos)
        if pos <= 0:
            return None
        tries += 1
        candidate = raw[: pos + 1] + b"]"
        try:
            msgspec.json.decode(candidate, type=list[Any])
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        return events_start + pos + 1
    return None


def _salvage_header(header: bytes) -> dict:
    """Best effort: the metadata keys written before traceEvents (Kineto writes most of them first)."""
    text = header.rstrip()
    if text.endswith(b","):
        text = text[:-1]
    try:
        doc = json.loads(text + b"}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


# ---------------------------------------------------------------------------------------------------
# Events → Arrow columns


def decode_events(data: bytes | memoryview, *, where: str = "trace") -> tuple[pa.RecordBatch, dict]:
    """Decode one JSON array of events into a RecordBatch of RAW_SCHEMA (kept events only).

    Times stay as written (decimal128, exact); `parse.py` decides the unit of the whole trace and converts
    them to int64 ns. Returns the batch and stats: events seen, the largest |ts| and whether any time has a
    fractional part (both feed the unit decision)."""
    with gc_paused():
        try:
            events = _EVENTS_DECODER.decode(data)
        except msgspec.ValidationError as exc:
            raise TraceFormatError(f"{where}: an event has the wrong shape ({exc})") from None
        except msgspec.DecodeError as exc:
            if _is_truncation(exc):
                raise TruncatedTraceError(
                    f"{where}: the JSON ends early ({exc}); pass --salvage to keep every complete event"
                ) from None
            raise TraceFormatError(f"{where}: not valid JSON ({exc})") from None
        return _columns(events)


def _columns(events: list) -> tuple[pa.RecordBatch, dict]:
    events = [e for e in events if e is not None]
    seen = len(events)
    ph = _strings([e.ph for e in events])
    cat = _strings([e.cat for e in events])
    name = _strings([e.name for e in events])
    cat = _normalise_cats(cat)
    ts = _times([e.ts for e in events])
    dur = _times([e.dur for e in events])

    keep = pc.or_(
        pc.or_(pc.is_in(cat, value_set=pa.array(KEEP_CATS)), pc.is_in(ph, value_set=pa.array(["s", "f"]))),
        pc.or_(
            pc.and_(pc.equal(ph, "M"), pc.is_in(name, value_set=pa.array(META_NAMES))),
            pc.and_(pc.equal(ph, "i"), pc.equal(name, MEMORY_NAME)),
        ),
    )
    keep = pc.fill_null(keep, False)
    keep_np = keep.to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(keep_np)
    kept = [events[i] for i in idx] if len(idx) != len(events) else events
    take = pa.array(idx, pa.int64())

    ph, cat, name = ph.take(take), cat.take(take), name.take(take)
    ts, dur = ts.take(take), dur.take(take)
    args = [e.args or _EMPTY_ARGS for e in kept]

    pid = _ints([e.pid for e in kept])
    tid = _ints([e.tid for e in kept])
    device = _ints([a.device for a in args])
    stream = _ints([a.stream for a in args])
    device_side = pc.is_in(cat, value_set=pa.array(DEVICE_SIDE_CATS))
    device = pc.if_else(pc.and_(device_side, pc.is_null(device)), pid, device)
    stream = pc.if_else(pc.and_(device_side, pc.is_null(stream)), tid, stream)
    is_memory = pc.fill_null(pc.equal(name, MEMORY_NAME), False)
    mem_device = _ints([a.device_id for a in args])
    device = pc.if_else(is_memory, mem_device, device)
    nbytes = pc.if_else(is_memory, _ints([a.mem_bytes for a in args]), _ints([a.bytes for a in args]))
    ext = _ints([a.external_id for a in args])
    ext_old = _ints([a.external_id_old for a in args])
    ext = pc.coalesce(ext, ext_old)
    is_flow = pc.is_in(ph, value_set=pa.array(["s", "f"]))
    flow_id = pc.if_else(is_flow, _ints([e.id for e in kept]), pa.nulls(len(kept), pa.int64()))
    is_meta = pc.fill_null(pc.equal(ph, "M"), False)
    label = pc.if_else(is_meta, _plain_strings([a.name for a in args]), pa.nulls(len(kept), pa.string()))

    columns = {
        "ph": ph,
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "device": device,
        "stream": stream,
        "correlation": _ints([a.correlation for a in args]),
        "external_id": ext,
        "flow_id": flow_id,
        "seq": _ints([a.seq for a in args]),
        "fwd_tid": _ints([a.fwd_tid for a in args]),
        "bytes": nbytes,
        "sync_kind": _plain_strings([a.sync_kind for a in args]),
        "wait_stream": _ints([a.wait_stream for a in args]),
        "py_id": _ints([a.py_id for a in args]),
        "py_parent": _ints([a.py_parent for a in args]),
        "collective": _plain_strings([a.collective for a in args]),
        "msg_nelems": _ints([a.msg_nelems for a in args]),
        "group_size": _ints([a.group_size for a in args]),
        "pg_ranks": _plain_strings([a.pg_ranks for a in args]),
        "label": label,
        "total_allocated": _ints([a.total_allocated for a in args]),
        "total_reserved": _ints([a.total_reserved for a in args]),
    }
    arrays = [_cast(columns[f.name], f.type) for f in RAW_SCHEMA]
    batch = pa.RecordBatch.from_arrays(arrays, schema=RAW_SCHEMA)
    max_ts = pc.max(pc.abs(ts)).as_py() if len(ts) else None
    fractional = any(len(x) and bool(pc.any(pc.not_equal(x, pc.round(x, 0))).as_py()) for x in (ts, dur))
    stats = {"events_seen": seen, "max_abs_ts": str(max_ts or 0), "fractional": fractional}
    return batch, stats


def _cast(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type == typ:
        return arr
    if pa.types.is_dictionary(typ):
        if pa.types.is_dictionary(arr.type):
            return arr.cast(typ)
        return pc.dictionary_encode(arr.cast(pa.string())).cast(typ)
    if pa.types.is_integer(typ) and pa.types.is_integer(arr.type):
        # Out-of-range values (a group size beyond int32) become null rather than failing the parse.
        info = np.iinfo(typ.to_pandas_dtype())
        in_range = pc.and_(pc.greater_equal(arr, info.min), pc.less_equal(arr, info.max))
        arr = pc.if_else(in_range, arr, pa.nulls(len(arr), arr.type))
    return arr.cast(typ)


def _strings(values: list) -> pa.Array:
    """A dictionary-encoded string column; non-string values are written as JSON text."""
    try:
        arr = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array([_as_text(v) for v in values], pa.string())
    return pc.dictionary_encode(arr)


def _plain_strings(values: list) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_as_text(v) for v in values], pa.string())


def _as_text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    try:
        return json.dumps(v, separators=(", ", ": "))
    except (TypeError, ValueError):
        return str(v)


def _normalise_cats(cat: pa.DictionaryArray) -> pa.DictionaryArray:
    dictionary = cat.dictionary.to_pylist()
    if not any(c in CAT_ALIASES for c in dictionary):
        return cat
    new = pa.array([CAT_ALIASES.get(c, c) for c in dictionary], pa.string())
    return pc.dictionary_encode(pc.take(new, cat.indices))


_INT_RE = re.compile(r"\s*(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*$")


def _ints(values: list) -> pa.Array:
    """An int64 column from JSON ints, or from strings holding ints ("7", "0x0" as ROCm writes streams,
    "stream 7"); floats (which arrive as text) keep their integer part only if it is exact."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([_as_int(v) for v in values], pa.int64())


def _as_int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, str):
        m = _INT_RE.search(v)
        if m is None:
            try:
                d = decimal.Decimal(v)
            except (decimal.InvalidOperation, ValueError):
                return None
            if d.is_finite() and d == d.to_integral_value() and abs(d) < 2**63:
                return int(d)
            return None
        text = m.group(1)
        n = int(text, 16) if "x" in text.lower() else int(text)
        return n if -(2**63) <= n < 2**63 else None
    return None


def _times(values: list) -> pa.Array:
    """ts/dur values as written (JSON ints, or floats as their decimal text) → decimal128(38, 3), exactly
    (values with more than three decimals are rounded half to even). Non-numbers become null."""
    try:
        return pa.array(values, pa.int64()).cast(US)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    try:
        return pa.array(values, pa.string()).cast(US)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _times_slow(values)


def to_int64_ns(value: pa.Array, unit: str) -> pa.Array:
    """decimal128(38, 3) times in `unit` ("us" or "ns") → int64 ns; out-of-range values become null."""
    if unit == "ns":
        rounded = pc.round(value, 0, round_mode="half_to_even")
        lo, hi = pa.scalar(decimal.Decimal(-(2**63)), US), pa.scalar(decimal.Decimal(2**63 - 1), US)
        ok = pc.and_(pc.greater_equal(rounded, lo), pc.less_equal(rounded, hi))
        return pc.if_else(ok, rounded, pa.nulls(len(value), US)).cast(pa.int64())
    # A decimal128(38, 3) stores the unscaled integer, µs × 1000 = ns: its low 64 bits are the answer
    # once the value is known to fit in int64.
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    n = len(value)
    lo, hi = pa.scalar(decimal.Decimal(-(2**63)) / 1000, US), pa.scalar(decimal.Decimal(2**63 - 1) / 1000, US)
    fits = pc.fill_null(pc.and_(pc.greater_equal(value, lo), pc.less_equal(value, hi)), False)
    fits_np = fits.to_numpy(zero_copy_only=False)
    if n == 0:
        return pa.array([], pa.int64())
    words = np.frombuffer(value.buffers()[1], dtype=np.int64, count=2 * (value.offset + n))
    return pa.array(words[2 * value.offset :: 2], pa.int64(), mask=~fits_np)


def _times_slow(values: list) -> pa.Array:
    out: list[decimal.Decimal | None] = []
    ctx = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)
    limit = decimal.Decimal(10) ** 34
    for v in values:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, str)):
            out.append(None)
            continue
        try:
            d = ctx.create_decimal(v) if isinstance(v, str) else decimal.Decimal(v)
        except (decimal.InvalidOperation, ValueError):
            out.append(None)
            continue
        if not d.is_finite() or abs(d) >= limit:
            out.append(None)
            continue
        out.append(d.quantize(_MILLI, context=ctx))
    return pa.array(out, US)


_MILLI = decimal.Decimal("0.001")
