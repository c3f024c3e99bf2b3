"""Decoding Kineto Chrome-trace JSON into Arrow columns (the parser's private engine).

The JSON is decoded typed with msgspec: one small Struct per event holding only the fields and ``args``
keys that tracekit keeps (everything else is skipped by the decoder without building Python objects).
Numbers that may be fractional (``ts``, ``dur``) are decoded untyped with ``float_hook=str``, so a float
arrives as its exact decimal text and is converted to integer nanoseconds by Arrow's string → decimal
cast, never through a double (1.7e15 µs with three decimals has 19 significant digits; a double has 16).

`decode_events` turns one JSON array of events into one Arrow RecordBatch of `RAW_SCHEMA`; `parse.py`
splits big files into chunks at event boundaries and calls it per chunk, in worker processes.

When the optional C extension is built (tracekit/parse/_fastscan.c, wrapper `fast.py`), it scans a
chunk into columns first, several times faster. What it does not read itself it hands back per value (a number
as text, converted by `time_value` / `_as_int` here) or per event (decoded here by `decode_items`);
only invalid JSON sends a whole chunk to msgspec. Both paths build the batch with `assemble`, so they
give identical tables.
"""

from __future__ import annotations

import collections
import decimal
import functools
import gc
import json
import mmap
import re
import sys
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar, cast

import msgspec
import numpy as np
import pyarrow as pa
from msgspec.structs import astuple

from tracekit.data import arrow as _arrow
from tracekit.data.files import check_input
from tracekit.data.schema import (
    CAT_CUDA_SYNC,
    CAT_GPU_USER_ANNOTATION,
    CAT_USER_ANNOTATION,
    DEVICE_ACTIVITY_CATS,
    SCHEMA,
    STEP_NAME,
)
from tracekit.errors import InputNotFound, TraceFormatError, TruncatedTraceError

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------------
# The typed view of one event. Field names are the Chrome-trace / Kineto keys; every value is `Any` so
# that a trace with an odd type in one field (a string pid, a stream written as "0x0") still decodes:
# the column builders below coerce values and turn what cannot be coerced into nulls.


# The args keys kept as integers (names of _Args fields); the scanner fills them in this order.
INT_ARGS = (
    "device",
    "stream",
    "correlation",
    "external_id",
    "external_id_old",
    "seq",
    "fwd_tid",
    "bytes",
    "wait_stream",
    "py_id",
    "py_parent",
    "msg_nelems",
    "group_size",
    "mem_bytes",
    "total_allocated",
    "total_reserved",
    "device_id",
    "addr",
)


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
    addr: Any = msgspec.field(default=None, name="Addr")
    # a framework op's input shapes (record_shapes=True): kept as the JSON text written, as the C
    # scanner keeps it (tracekit.whatif.knobs reads batch norms' and elementwise ops' sizes from it)
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]


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
DEVICE_SIDE_CATS = (*DEVICE_ACTIVITY_CATS, CAT_GPU_USER_ANNOTATION, CAT_CUDA_SYNC)
META_NAMES = ("process_name", "thread_name")
MEMORY_NAME = "[memory]"

_STR = pa.dictionary(pa.int32(), pa.string())
US = pa.decimal128(38, 3)  # times as written: µs (or ns), three decimals, exact

# The columns decode_events produces: schema.SCHEMA without the ones the parser adds (kind, rank) and the
# derived-row ones (step, cause).
EVENT_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in ("kind", "rank", "step", "cause")])


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


MSGSPEC_DEPTH = 1000  # the levels msgspec may nest, whatever the caller's stack depth


def steady_recursion(fn: Callable[..., T]) -> Callable[..., T]:
    """Run `fn` with Python's recursion limit set to the caller's stack depth + MSGSPEC_DEPTH.

    msgspec counts its nesting against Python's recursion limit from the current stack depth, so a value
    nested ~1,000 levels decoded at a shallow stack and raised RecursionError under a deep one (a test
    runner, a notebook): the msgspec path then dropped other values than the C scanner did (found by
    tests/test_fuzz_parse.py under pytest, never in a fresh process). With a budget fixed per call, what
    is too deep, and so where values are cut, no longer depends on the caller."""

    @functools.wraps(fn)
    def steady(*args: Any, **kwargs: Any) -> T:
        depth, frame = 0, cast(Optional[Any], sys._getframe())
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        was = sys.getrecursionlimit()
        sys.setrecursionlimit(depth + MSGSPEC_DEPTH)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setrecursionlimit(was)

    return steady


# ---------------------------------------------------------------------------------------------------
# Reading files


def read_trace_bytes(path: Path) -> tuple[bytes | mmap.mmap, Optional[str]]:
    """The JSON bytes of a trace file (gunzipped), and what is wrong with its gzip stream (None: nothing).

    Plain files are memory-mapped (the OS pages them in as the decoder walks them). A gzip stream that
    ends early (a copy or a capture cut off) or is corrupt gives the bytes that decompress before the
    damage, and a phrase that says so ("the gzip stream ends early after 1,234 decompressed bytes"):
    the caller refuses the trace with it, or with --salvage keeps the complete events in those bytes."""
    path = Path(path)
    check_input(path)
    if path.is_dir():
        raise InputNotFound(f"{path}: is a folder, expected a trace file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(3)
            if magic[:2] == b"\x1f\x8b":
                fh.seek(0)
                data, damage = _gunzip(fh.read())
                return _without_bom(data), damage
            if magic == UTF8_BOM:  # read whole (a mapping is read-only): rare, and small ones
                fh.seek(0)
                return _without_bom(fh.read()), None
            fh.seek(0, 2)
            if fh.tell() == 0:
                raise TraceFormatError(f"{path}: empty file, not a trace")
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), None
    except OSError as exc:
        raise InputNotFound(f"{path}: cannot read ({exc.strerror or exc})") from None


# A UTF-8 byte order mark: editors on Windows (Notepad, PowerShell's Out-File) write one before the text.
# JSON forbids it (RFC 8259 §8.1) but allows parsers to ignore it; it is read as whitespace (offsets kept).
UTF8_BOM = b"\xef\xbb\xbf"


def _without_bom(data: bytes) -> bytes:
    return b"   " + data[3:] if data.startswith(UTF8_BOM) else data


def _gunzip(data: bytes) -> tuple[bytes, Optional[str]]:
    try:
        return _gunzip_members(data), None
    except EOFError:
        damage = "is truncated (it ends after {:,} decompressed bytes)"
    except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        damage = f"is corrupt after {{:,}} decompressed bytes ({exc})"
    out = _gunzip_prefix(data)
    return out, "the gzip stream " + damage.format(len(out))


def _gunzip_prefix(data: bytes, piece: int = 1 << 16) -> bytes:
    """What decompresses from the gzip members in `data` before the damage: raw deflate (no CRC check,
    so a stream whose only fault is its checksum gives all of its bytes), a piece at a time, with at
    most 64 KiB of output per call (zlib raises without returning the output of the call that fails)."""
    out: list[bytes] = []
    pos = 0
    while data[pos : pos + 2] == b"\x1f\x8b":
        start = _deflate_start(data, pos)
        if start is None:
            break
        d = zlib.decompressobj(wbits=-15)
        try:
            for i in range(start, len(data), piece):
                buf = data[i : i + piece]
                while buf and not d.eof:
                    out.append(d.decompress(buf, 1 << 16))
                    buf = d.unconsumed_tail
                if d.eof:
                    break
            if not d.eof:
                out.append(d.flush())  # output zlib still holds for the input it took
        except zlib.error:
            break
        if not d.eof:
            break
        pos = len(data) - len(d.unused_data) + 8  # past the member's CRC32 and size
        while pos < len(data) and data[pos] == 0:  # members may be followed by zero padding
            pos += 1
    return b"".join(out)


def _gunzip_members(data: bytes) -> bytes:
    """gzip.decompress, twice as fast on a rank file of a few MB (no Python-level header parsing and
    second CRC pass: zlib checks each member's CRC itself): every member in turn; EOFError when the
    last one ends early."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        data = d.unused_data.lstrip(b"\x00")  # members may be followed by zero padding
    return b"".join(out) if len(out) != 1 else out[0]


def _deflate_start(data: bytes, pos: int) -> Optional[int]:
    """The offset of the deflate data of the gzip member at `pos` (RFC 1952 header), or None."""
    if len(data) < pos + 10 or data[pos + 2] != 8:  # CM: deflate
        return None
    flags, at = data[pos + 3], pos + 10
    if flags & 4:  # FEXTRA
        if len(data) < at + 2:
            return None
        at += 2 + int.from_bytes(data[at : at + 2], "little")
    for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & bit:
            end = data.find(b"\0", at)
            if end < 0:
                return None
            at = end + 1
    if flags & 2:  # FHCRC
        at += 2
    return at if at <= len(data) else None


# ---------------------------------------------------------------------------------------------------
# The document: trace-level metadata and the byte range of traceEvents

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class Document:
    """A trace file split into its metadata (dict) and the raw bytes of its traceEvents array."""

    def __init__(self, metadata: dict, events: bytes | memoryview, dropped_bytes: int = 0) -> None:
        self.metadata = metadata
        self.events = events  # the JSON array text, '[' ... ']'
        self.dropped_bytes = dropped_bytes
        self.deep_values = 0  # values nested deeper than MAX_DEPTH levels, replaced by null


@steady_recursion
def split_document(
    buf: bytes | mmap.mmap, path: Path, *, salvage: bool, gz_damage: Optional[str] = None
) -> Document:
    """Decode the top level of a trace; keep traceEvents as raw bytes for the chunked event decoder.

    `gz_damage`: what read_trace_bytes said about the gzip stream: the JSON is refused with it, or, with
    `salvage`, its complete events are kept. A file nested too deep for msgspec's recursion limit is
    read with its values below MAX_DEPTH levels (of an event) replaced by null, and counted."""
    view = memoryview(buf)
    start = _first_non_ws(view)
    if start is None:
        if gz_damage:
            raise TraceFormatError(f"{path}: {gz_damage}: nothing to read; re-copy the file")
        raise TraceFormatError(f"{path}: empty file, not a trace")
    first = view[start : start + 1].tobytes()
    try:
        return _split(view, start, path, salvage=salvage, gz_damage=gz_damage)
    except RecursionError:
        # The array format's events are level 2 of the file, the object format's level 3.
        stripped, cuts = _strip_deep(bytes(view), MAX_DEPTH + (1 if first == b"[" else 2))
        doc = _split(memoryview(stripped), start, path, salvage=salvage, gz_damage=gz_damage)
        doc.deep_values = cuts
        return doc


def _split(view: memoryview, start: int, path: Path, *, salvage: bool, gz_damage: Optional[str]) -> Document:
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
            msgspec.json.decode(view, type=msgspec.Raw)  # validates; raises like the object case
            if gz_damage and not salvage:
                raise _damaged(path, gz_damage)
            end = len(bytes(view).rstrip())
            return Document({}, view[start:end])
        top = _TOP_DECODER.decode(view)
    except msgspec.DecodeError as exc:
        if _is_truncation(exc) or gz_damage:
            return _truncated(view, path, salvage=salvage, reason=str(exc), gz_damage=gz_damage)
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"{path}: not a Chrome trace ({exc})") from None
    if gz_damage and not salvage:  # the JSON is complete; the gzip stream's end is not
        raise _damaged(path, gz_damage)
    raw = top.pop("traceEvents", None)
    if raw is None:
        raise TraceFormatError(
            f"{path}: JSON, but not a Chrome trace (no 'traceEvents' key; keys: {', '.join(sorted(top)[:8])})"
        )
    metadata = {}
    for key, value in top.items():
        try:
            metadata[key] = _ANY_DECODER.decode(value)
        except (msgspec.DecodeError, RecursionError):  # pragma: no cover - msgspec already validated it
            continue
    events = _locate(view, raw)
    opening = _first_non_ws(events)
    if opening is None or events[opening] != ord("["):
        raise TraceFormatError(f"{path}: not a Chrome trace ('traceEvents' is not a list)")
    return Document(metadata, events)


def _damaged(path: Path, gz_damage: str) -> TruncatedTraceError:
    return TruncatedTraceError(
        f"{path}: {gz_damage}; re-copy the file, "
        "or pass --salvage to keep every complete event before the damage"
    )


@steady_recursion
def locate_events(buf: bytes | mmap.mmap, max_tail: int = 8 << 20) -> tuple[dict, int, int] | None:
    """Fast path: (metadata, start, end) with buf[start:end] the traceEvents array ('[' ... ']').

    Reads only the text around the array: the metadata before it (Kineto writes most keys first) and
    after it, a little first, more only when needed (copying a large tail to search it is a visible
    part of a large parse). Returns None whenever the layout is not the plain one (then split_document, which
    validates the whole file, is used); the chunk decoders validate the array itself."""
    for head_size in (1 << 20, 64 << 20):
        head = bytes(buf[: min(len(buf), head_size)])
        m = _EVENTS_KEY.search(head)
        if m is not None or len(head) == len(buf):
            break
    if m is None:
        return None
    opening = head.lstrip()
    if not opening.startswith(b"{"):
        return None
    header = head[len(head) - len(opening) + 1 : m.start()].rstrip()
    if header.endswith(b","):
        header = header[:-1]
    try:
        metadata = _ANY_DECODER.decode(b"{" + header + b"}")
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(metadata, dict):
        return None
    start = m.end() - 1
    for tail_size in (1 << 16, max_tail):
        found = _trailer(buf, start, tail_size)
        if found is not None:
            trailer, end = found
            return {**metadata, **trailer}, start, end
        if tail_size >= len(buf) - start:
            break
    return None


def _trailer(buf: bytes | mmap.mmap, start: int, tail_size: int) -> tuple[dict, int] | None:
    """(the metadata after the events array, the offset just past its ']') from the last `tail_size`
    bytes, or None: the rightmost ']' that closes an array of objects and is followed by the rest of
    a JSON object."""
    tail_from = max(start + 1, len(buf) - tail_size)
    tail = bytes(buf[tail_from:])
    pos = len(tail)
    while True:
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0:
            return None
        before = tail[:pos].rstrip()
        after = tail[pos + 1 :].strip()
        if before.endswith((b"}", b"[")) and after.endswith(b"}"):
            body = after[1:].lstrip() if after.startswith(b",") else after
            text = b"{" + body if body.startswith((b'"', b"}")) else None
            if text is not None:
                try:
                    trailer = _ANY_DECODER.decode(text)
                except (msgspec.DecodeError, RecursionError):
                    trailer = None
                if isinstance(trailer, dict):
                    return trailer, tail_from + pos + 1


_SEPARATOR = re.compile(rb"\}\s*,\s*\{")


def split_points(buf: bytes | mmap.mmap, start: int, end: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Cut the events array buf[start:end] ('[' ... ']') into ranges of whole events, about chunk_bytes
    each; each range runs from an event's '{' to an event's '}'. A cut that lands inside a string or a
    nested object makes its chunk fail to decode, and the caller falls back to one decode of the array."""
    first = buf.find(b"{", start, end)
    last = buf.rfind(b"}", start, end)
    if first < 0 or last < 0:
        return [(start + 1, end - 1)]
    ranges, a = [], first
    while a + chunk_bytes < last:
        m = _SEPARATOR.search(buf, a + chunk_bytes, min(last + 1, a + chunk_bytes + (4 << 20)))
        if m is None:
            break
        ranges.append((a, m.start() + 1))
        a = m.end() - 1
    ranges.append((a, last + 1))
    return ranges


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


def _truncated(
    view: memoryview, path: Path, *, salvage: bool, reason: str, gz_damage: Optional[str] = None
) -> Document:
    if not salvage:
        if gz_damage:
            raise _damaged(path, gz_damage)
        raise TruncatedTraceError(
            f"{path}: the JSON ends early ({reason}): the profiler was probably killed while writing it; "
            "pass --salvage to keep every complete event"
        )
    where = f"{gz_damage}, and the JSON" if gz_damage else "the JSON"
    m = _EVENTS_KEY.search(view)
    if m is None:
        raise TruncatedTraceError(f"{path}: {where} ends before its first event; nothing to salvage")
    header = bytes(view[: m.start()])
    events_start = m.end() - 1
    end = _last_complete_event_end(view, events_start)
    if end is None:
        raise TruncatedTraceError(f"{path}: {where} ends before its first complete event; nothing to salvage")
    events = bytes(view[events_start:end]) + b"]"
    return Document(_salvage_header(header), events, dropped_bytes=len(view) - end)


def _last_complete_event_end(view: memoryview, events_start: int, max_tries: int = 10_000) -> int | None:
    """The offset just past the last complete event of a truncated traceEvents array.

    Walks back over the '}' bytes from the end; the first prefix that decodes as a list of events wins.
    Each try decodes the whole prefix, but the last complete event is almost always within a few '}'; a
    try that fails at byte N (garbage from a damaged gzip stream) moves the search before N at once."""
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
            try:
                msgspec.json.decode(candidate, type=list[Any])
            except RecursionError:
                msgspec.json.decode(_strip_deep(candidate, MAX_DEPTH + 1)[0], type=list[Any])
        except msgspec.DecodeError as exc:
            at = _AT_BYTE.search(str(exc))
            if at is not None:
                pos = min(pos, int(at.group(1)))
            continue
        except msgspec.ValidationError:
            continue
        return events_start + pos + 1
    return None


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _salvage_header(header: bytes) -> dict:
    """Best effort: the metadata keys written before traceEvents (Kineto writes most of them first)."""
    text = header.rstrip()
    if text.endswith(b","):
        text = text[:-1]
    try:
        doc = json.loads(text + b"}")
    except (ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


# ---------------------------------------------------------------------------------------------------
# Events → Arrow columns


@steady_recursion
def decode_events(
    data: bytes | memoryview, *, where: str = "trace", unit: str = "us"
) -> tuple[pa.RecordBatch, dict]:
    """Decode one JSON array of events into a RecordBatch of EVENT_SCHEMA (kept, timed events only).

    Times are converted to int64 ns reading the numbers in `unit` ("us" or "ns"); `parse.time_unit`
    decides the unit of a whole trace from the returned stats (the largest |ts| as written and whether
    any time has a fractional part) and re-decodes in the rare case the guess was wrong. The stats also
    count, by reason, the events skipped (`skipped`) and the values dropped from kept events
    (`values_dropped`).

    This is the msgspec decoder, which handles every case and gives the precise errors; the parser
    tries the C scanner (fast.py) first and calls this for whatever the scanner declines. An item
    msgspec cannot take as part of the whole array (one that is not an event object, args that are
    not an object, a value nested too deep for its recursion limit) sends the array through
    `decode_items`, one item at a time, so that one odd event costs that event, not the trace."""
    with gc_paused():
        try:
            try:
                events = _EVENTS_DECODER.decode(data)
                dropped: collections.Counter = collections.Counter()
            except (msgspec.ValidationError, RecursionError):
                events, dropped = decode_items(split_items(data))
        except msgspec.DecodeError as exc:
            raise decode_error(exc, where) from None
        return _columns(events, unit, dropped)


def decode_error(exc: msgspec.DecodeError, where: str) -> TraceFormatError:
    """The user's message for JSON that does not decode."""
    if _is_truncation(exc):
        return TruncatedTraceError(
            f"{where}: the JSON ends early ({exc}); pass --salvage to keep every complete event"
        )
    return TraceFormatError(f"{where}: not valid JSON ({exc})")


# Why an event was skipped, or a value dropped from a kept event: the keys of the stats' `skipped` and
# `values_dropped` counts, of the trace entries in a capture's metadata, and of the warnings.
MAX_DEPTH = 256  # the C scanner's limit too (_fastscan.c); an event is level 1, its args level 2
SKIP_TS_MISSING = "ts missing"
SKIP_TS_NOT_NUMBER = "ts not a number"
SKIP_TS_OUT_OF_RANGE = "ts out of range"
SKIP_NEGATIVE_DUR = "negative dur on device activity"
SKIP_NOT_EVENT = "not an event object"
DROP_ARGS_NOT_OBJECT = "args not an object"
DROP_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
# A kernel, copy or set whose `dur` is missing or not a number: read as 0, so its time is not busy time
# (no profiler writes one; a fuzzed trace's kernel without `dur` used to pass without a word).
DROP_DEVICE_DUR = "device activity dur missing or not a number (read as 0)"

# A ts/dur value's state: usable, or why not (ts: the reason its event is skipped).
TIME_OK, TIME_MISSING, TIME_NOT_NUMBER, TIME_OUT_OF_RANGE = 0, 1, 2, 3
_TIME_SKIPS = {
    TIME_MISSING: SKIP_TS_MISSING,
    TIME_NOT_NUMBER: SKIP_TS_NOT_NUMBER,
    TIME_OUT_OF_RANGE: SKIP_TS_OUT_OF_RANGE,
}


class _NotAnEvent:
    def __repr__(self) -> str:
        return "NOT_EVENT"


NOT_EVENT = _NotAnEvent()  # decode_items' result for an item that is not an event object


class _LooseEvent(msgspec.Struct, gc=False):
    """_Event with args of any type: the second try for an item whose args are not an object."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Any = None


_ITEM_DECODER = msgspec.json.Decoder(Optional[_Event], float_hook=str)
_LOOSE_DECODER = msgspec.json.Decoder(_LooseEvent, float_hook=str)


@steady_recursion
def decode_items(items: list[bytes]) -> tuple[list, collections.Counter]:
    """Decode each item of an events array on its own: an _Event, None (a JSON null) or NOT_EVENT (any
    other non-object); and the counts of values dropped from the events (args that are not an object,
    values nested deeper than msgspec's recursion limit: their containers below MAX_DEPTH levels become
    null). Raises msgspec.DecodeError for an item that is not valid JSON. Used for the few events the C
    scanner declines, and by the msgspec path for an array that does not decode as a whole."""
    out: list = []
    dropped: collections.Counter = collections.Counter()
    for item in items:
        if not item.strip():
            raise msgspec.DecodeError("JSON is malformed: an empty item in the events array")
        try:
            event = _decode_item(item, dropped)
        except RecursionError:
            item, cuts = _strip_deep(item, MAX_DEPTH)
            event = _decode_item(item, dropped)
            if event is not NOT_EVENT:
                dropped[DROP_TOO_DEEP] += cuts
        out.append(event)
    return out, dropped


def _decode_item(item: bytes, dropped: collections.Counter) -> Any:
    try:
        return _ITEM_DECODER.decode(item)
    except msgspec.ValidationError:
        pass
    try:
        loose = _LOOSE_DECODER.decode(item)
    except msgspec.ValidationError:
        return NOT_EVENT
    dropped[DROP_ARGS_NOT_OBJECT] += 1
    return _Event(*astuple(loose)[:-1])


# A JSON string (escapes included) or a bracket: enough to follow the nesting of valid JSON.
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_ITEMS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.DOTALL)


def _strip_deep(item: bytes, limit: int) -> tuple[bytes, int]:
    """`item` with each array or object nested deeper than `limit` levels (the item is level 1) replaced
    by null, and how many were. Iterative: the input is exactly what recursion cannot take."""
    out, pos, depth, cut = [], 0, 0, 0
    for m in _NESTING.finditer(item):
        c = item[m.start()]
        if c == 0x22:  # a string
            continue
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth == limit + 1:
                cut = m.start()
        else:
            depth -= 1
            if depth == limit:
                out += [item[pos:cut], b"null"]
                pos = m.end()
    out.append(item[pos:])
    return b"".join(out), (len(out) - 1) // 2


def split_items(data: bytes | memoryview) -> list[bytes]:
    """The items of the JSON array `data` ('[' ... ']'), as text, found without recursion. Only for an
    array msgspec did not take as a whole; text that is not valid JSON gives items that do not decode."""
    data = bytes(data)
    items: list[bytes] = []
    depth, start = 0, 0
    for m in _ITEMS.finditer(data):
        c = data[m.start()]
        if c == 0x22:
            continue
        if c in (0x5B, 0x7B):
            depth += 1
            if depth == 1:
                start = m.end()
        elif c in (0x5D, 0x7D):
            depth -= 1
            if depth == 0:
                last = data[start : m.start()]
                if items or last.strip():
                    items.append(last)
                return items
        elif depth == 1:  # a comma between items
            items.append(data[start : m.start()])
            start = m.end()
    items.append(data[start:])  # unclosed: decodes as truncated
    return items


_N_ARGS = len(_Args.__struct_fields__)
_NO_ARGS = (None,) * _N_ARGS
_ARG_INDEX = {name: i for i, name in enumerate(_Args.__struct_fields__)}


def _columns(events: list, unit: str, dropped: collections.Counter) -> tuple[pa.RecordBatch, dict]:
    import pyarrow.compute as pc  # the msgspec path only (its import: benchmarks/import_costs.py)

    skipped: collections.Counter = collections.Counter()
    if None in events or NOT_EVENT in events:  # JSON null items; items that are not events
        skipped[SKIP_NOT_EVENT] = sum(e is NOT_EVENT for e in events)
        events = [e for e in events if e is not None and e is not NOT_EVENT]
    seen = len(events)
    if not events:
        return _empty(), _no_stats(skipped, dropped)
    # One C-level pass turns the structs into tuples, one more transposes them into columns: far
    # cheaper than one Python comprehension per field.
    ph, cat, name, pid, tid, ts, dur, flow, args = zip(*map(astuple, events))
    arg_cols = list(zip(*[_NO_ARGS if a is None else astuple(a) for a in args]))

    def arg(field: str) -> tuple:
        return arg_cols[_ARG_INDEX[field]]

    (ts_dec, ts_state), (dur_dec, _) = _times(ts), _times(dur)
    max_ts = pc.max(pc.abs(ts_dec)).as_py()
    fractional = any(bool(pc.any(pc.not_equal(x, pc.round(x, 0))).as_py()) for x in (ts_dec, dur_dec))
    ts_ns = _int_column(to_int64_ns(ts_dec, unit))
    ts_state[(ts_state == TIME_OK) & ~ts_ns[1]] = TIME_OUT_OF_RANGE
    ints = {"pid": _ints(pid), "tid": _ints(tid), "flow": _ints(flow)}
    ints.update((f, _ints(arg(f))) for f in INT_ARGS)
    # (Input Dims' msgspec.Raw values go through _plain_strings' per-value _as_text)
    texts = {f: _arrow.codes(pc.dictionary_encode(_plain_strings(arg(f)))) for f in TEXT_ARGS}
    decoded = Decoded(
        ph=_arrow.codes(_strings(ph)),
        cat=_arrow.codes(_strings(cat)),
        name=_arrow.codes(_strings(name)),
        ts_ns=ts_ns,
        ts_state=ts_state,
        dur_ns=_int_column(to_int64_ns(dur_dec, unit)),
        ints={k: _int_column(v) for k, v in ints.items()},
        texts=texts,
        max_abs_ts=str(max_ts or 0),
        fractional=fractional,
    )
    return assemble(seen, decoded, skipped, dropped)


def _int_column(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    return _arrow.values(arr), _arrow.valid(arr)


def _no_stats(skipped: Optional[dict] = None, dropped: Optional[dict] = None) -> dict:
    return {
        "events_seen": 0,
        "usable_events": 0,  # kept events other than metadata (process and thread names)
        "max_abs_ts": "0",
        "fractional": False,
        "begin_end": 0,  # B and E events (tracekit.parse.begin_end pairs them)
        "skipped": {k: v for k, v in (skipped or {}).items() if v},
        "values_dropped": {k: v for k, v in (dropped or {}).items() if v},
    }


# The args keys kept as integers (INT_ARGS, shared with the C scanner) / as text (names of _Args fields).
TEXT_ARGS = ("sync_kind", "collective", "pg_ranks", "name", "input_dims")

# A column as assemble takes it. Strings: (int32 codes, -1 = null; the list of strings they index).
# Ints: (int64 values; bool mask, True where the value is present).
Strings = Tuple[np.ndarray, list]
Ints = Tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Decoded:
    """A chunk's events as a decoder wrote them, column by column (what `assemble` takes): ph, cat, name
    and the TEXT_ARGS `texts` as Strings; ts/dur in int64 ns (absent: no usable time), with each ts's
    TIME_* state; `ints` the int64 columns of pid, tid, flow (the event's id) and INT_ARGS; the largest
    |ts| as written (decimal text) and whether any time had a fraction of its unit."""

    ph: Strings
    cat: Strings
    name: Strings
    ts_ns: Ints
    ts_state: np.ndarray
    dur_ns: Ints
    ints: dict[str, Ints]
    texts: dict[str, Strings]
    max_abs_ts: str
    fractional: bool


def _where_written(ints: dict[str, Ints], cat: Strings, is_memory: np.ndarray, is_flow: np.ndarray) -> tuple:
    """(device, stream, bytes, external_id, flow_id): each column from the field that holds it in this
    event's kind and torch version (a device activity's own args over its pid/tid; a [memory] instant's
    device, bytes and block address; the external id's older key)."""
    pid, tid = ints["pid"], ints["tid"]
    device_side = _in(cat, DEVICE_SIDE_CATS)
    device = _choose(device_side & ~ints["device"][1], pid, ints["device"])
    stream = _choose(device_side & ~ints["stream"][1], tid, ints["stream"])
    if ints["device_id"][1].any():
        device = _choose(is_memory, ints["device_id"], device)
    nbytes = ints["bytes"]
    if ints["mem_bytes"][1].any():
        nbytes = _choose(is_memory, ints["mem_bytes"], nbytes)
    ext = ints["external_id"]
    if ints["external_id_old"][1].any():
        ext = _choose(~ext[1], ints["external_id_old"], ext)
    flow = ints["flow"][0], ints["flow"][1] & is_flow
    if ints["addr"][1].any():  # a [memory] instant's block address shares the flow id's column
        flow = _choose(is_memory, ints["addr"], flow)
    return device, stream, nbytes, ext, flow


@steady_recursion
def assemble(
    seen: int, decoded: Decoded, skipped: Optional[dict] = None, dropped: Optional[dict] = None
) -> tuple[pa.RecordBatch, dict]:
    """The EVENT_SCHEMA batch and stats of `seen` decoded events, from their columns as written
    (`Decoded`); `skipped` / `dropped`: counts the caller made (items that are not events, values
    dropped). Events that cannot be placed are skipped and counted (`_placeable`). Shared by the msgspec
    decoder and the C scanner (fast.py), so both apply the same rules; numpy only: nothing here imports
    pandas."""
    ph, cat, name, ints, texts = decoded.ph, decoded.cat, decoded.name, decoded.ints, decoded.texts
    ts_ns, ts_state, dur_ns = decoded.ts_ns, decoded.ts_state, decoded.dur_ns
    max_abs_ts, fractional = decoded.max_abs_ts, decoded.fractional
    cat = _operator_steps(cat, _normalise_cats(cat), name)
    is_flow = _in(ph, ("s", "f"))
    is_meta = _in(ph, ("M",))
    is_memory = _in(name, (MEMORY_NAME,))
    ends = _in(ph, ("E",))  # Chrome's E events name no category: kept for parse.begin_end to pair
    keep = _in(cat, KEEP_CATS) | is_flow | (is_meta & _in(name, META_NAMES)) | (_in(ph, ("i",)) & is_memory)
    keep |= ends
    counts = collections.Counter(skipped or {})
    timed = _placeable(keep, is_meta, cat, ts_state, dur_ns, counts)
    n_timed = int(np.count_nonzero(timed))
    no_dur = timed & ~dur_ns[1]
    if no_dur.any():
        no_dur &= _in(ph, ("X",)) & _in(cat, DEVICE_ACTIVITY_CATS)
        dropped = collections.Counter(dropped or {})
        dropped[DROP_DEVICE_DUR] += int(np.count_nonzero(no_dur))
    pid, tid = ints["pid"], ints["tid"]
    device, stream, nbytes, ext, flow = _where_written(ints, cat, is_memory, is_flow)
    label_codes, label_uniques = texts["name"]
    columns: dict[str, Strings | Ints] = {
        "ph": ph,
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts_ns": ts_ns,
        "dur_ns": (np.where(dur_ns[1], dur_ns[0], 0), np.ones(seen, dtype=bool)),
        "device": device,
        "stream": stream,
        "correlation": ints["correlation"],
        "external_id": ext,
        "flow_id": flow,
        "seq": ints["seq"],
        "fwd_tid": ints["fwd_tid"],
        "bytes": nbytes,
        "sync_kind": texts["sync_kind"],
        "wait_stream": ints["wait_stream"],
        "py_id": ints["py_id"],
        "py_parent": ints["py_parent"],
        "collective": texts["collective"],
        "msg_nelems": ints["msg_nelems"],
        "group_size": ints["group_size"],
        "pg_ranks": texts["pg_ranks"],
        # a process/thread name is kept for metadata events only; its dictionary then holds the names
        # those use, in the order they first occur (both decoders alike: the scanner's declined events
        # and msgspec's whole-document decode saw different other `args.name` values)
        "label": first_seen(np.where(is_meta, label_codes, -1), label_uniques),
        "total_allocated": ints["total_allocated"],
        "total_reserved": ints["total_reserved"],
        "input_dims": texts["input_dims"],
    }
    rows = None if n_timed == seen else np.flatnonzero(timed)
    arrays = [_to_arrow(columns[f.name], f.type, rows) for f in EVENT_SCHEMA]
    batch = pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA)
    stats = _no_stats(counts, dropped)
    usable = n_timed - int(np.count_nonzero(timed & is_meta))
    stats.update(events_seen=seen, usable_events=usable, max_abs_ts=max_abs_ts, fractional=fractional)
    stats["begin_end"] = int(np.count_nonzero(timed & (ends | _in(ph, ("B",)))))
    return batch, stats


def first_seen(codes: np.ndarray, uniques: list) -> tuple[np.ndarray, list]:
    """A dictionary column (codes, -1 null; their strings) with only the strings its codes use, in the
    order they first occur, and the codes renumbered to match."""
    present = codes >= 0
    if not present.any():
        return np.full(len(codes), -1, np.int32), []
    used, first = np.unique(codes[present], return_index=True)
    order = used[np.argsort(first)]
    remap = np.full(len(uniques) + 1, -1, np.int32)  # the last entry maps null (-1) to itself
    remap[order] = np.arange(len(order), dtype=np.int32)
    return np.take(remap, codes), [uniques[c] for c in order]


def _placeable(
    keep: np.ndarray, is_meta: np.ndarray, cat: Strings, ts_state: np.ndarray, dur_ns: Ints, counts: dict
) -> np.ndarray:
    """The kept events that can be placed on the timeline; the others are counted in `counts` by reason.

    An event without a usable time (missing, not a number, out of range) cannot be placed. Metadata
    events (process/thread names) need no time in the Chrome trace format and often have none
    (tracekit's own annotate writes none): they are dropped without being counted. Device activity with
    a negative dur would make the busy time and every gap around it wrong."""
    timed = keep & (ts_state == TIME_OK)
    if int(np.count_nonzero(timed)) != int(np.count_nonzero(keep)):
        untimed = keep & ~is_meta
        for state, reason in _TIME_SKIPS.items():
            counts[reason] += int(np.count_nonzero(untimed & (ts_state == state)))
    negative = timed & dur_ns[1] & (dur_ns[0] < 0)
    if negative.any():
        negative &= _in(cat, DEVICE_ACTIVITY_CATS)
        counts[SKIP_NEGATIVE_DUR] += int(np.count_nonzero(negative))
        timed &= ~negative
    return timed


def _in(column: Strings, allowed: tuple) -> np.ndarray:
    """Rows whose string is one of `allowed` (null never is)."""
    codes, uniques = column
    lookup = np.array([u in allowed for u in uniques] + [False], dtype=bool)
    # np.take: half the time of lookup[codes] on int32 codes (no index conversion); code -1 (null)
    # reads the trailing False
    return np.take(lookup, codes)


def _choose(where: np.ndarray, a: Ints, b: Ints) -> Ints:
    """a where `where`, else b (values and presence)."""
    return np.where(where, a[0], b[0]), np.where(where, a[1], b[1])


def _to_arrow(column: Strings | Ints, typ: pa.DataType, rows: Optional[np.ndarray]) -> pa.Array:
    """One EVENT_SCHEMA column of the kept rows (`rows`; None: all)."""
    data, second = column
    if rows is not None:
        data = data[rows]
    if pa.types.is_dictionary(typ):
        return _arrow.dictionary(data, cast(list, second))  # Strings: the codes' texts
    ok = cast(np.ndarray, second if rows is None else second[rows])  # Ints: the presence mask
    if typ != pa.int64():
        # Out-of-range values (a group size beyond int32) become null rather than failing the parse.
        info = np.iinfo(str(typ))  # "int32" ...
        in_range = (data >= info.min) & (data <= info.max)
        if not in_range.all():
            ok = ok & in_range
            data = np.where(in_range, data, 0)
    return _arrow.from_numpy(data, ok, typ)


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in EVENT_SCHEMA], schema=EVENT_SCHEMA)


def _strings(values: tuple | list) -> pa.Array:
    """A dictionary-encoded string column; non-string values are written as JSON text."""
    import pyarrow.compute as pc  # the msgspec path only (its import: benchmarks/import_costs.py)

    try:
        arr = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array([_as_text(v) for v in values], pa.string())
    return pc.dictionary_encode(arr)


def _plain_strings(values: tuple | list) -> pa.Array:
    if values.count(None) == len(values):
        return pa.nulls(len(values), pa.string())
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_as_text(v) for v in values], pa.string())


def _as_text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, msgspec.Raw):  # the value's JSON text as written (args.Input Dims)
        text = bytes(v).decode("utf-8")
        return None if text == "null" else text
    return _json_text(v)


@steady_recursion  # json.dumps counts its nesting from the stack depth too: the same cut for every caller
def _json_text(v: Any) -> str | None:
    try:
        return json.dumps(v, separators=(", ", ": "))
    except (TypeError, ValueError):
        return str(v)
    except RecursionError:  # nested almost as deep as msgspec takes (~1,000 levels): no text for it
        return None


# The record_function spans torch itself writes: the step (STEP_NAME), the DataLoader fetch, the
# optimizer's calls.
_TORCH_ANNOTATION = re.compile(r"enumerate\(DataLoader\)#|Optimizer\.(step|zero_grad)#")


def _is_torch_annotation(name: str | None) -> bool:
    return name is not None and (STEP_NAME.match(name) or _TORCH_ANNOTATION.match(name)) is not None


def _operator_steps(raw: Strings, cat: Strings, name: Strings) -> Strings:
    """torch 1.8/1.9 Kineto wrote torch's own record_function spans (ProfilerStep#N, the DataLoader
    fetch, Optimizer.step#…) as "Operator" (read as cpu_op): they are annotations (user_annotation), not
    ops around every op of the step."""
    codes, uniques = raw
    if "Operator" not in uniques:
        return cat
    ncodes, nuniques = name
    is_step = np.array([_is_torch_annotation(n) for n in nuniques] + [False])
    rows = (codes == uniques.index("Operator")) & np.take(is_step, ncodes)
    if not rows.any():
        return cat
    ccodes, cuniques = cat
    cuniques = list(cuniques)
    if CAT_USER_ANNOTATION not in cuniques:
        cuniques.append(CAT_USER_ANNOTATION)
    ccodes = np.where(rows, np.int32(cuniques.index(CAT_USER_ANNOTATION)), ccodes).astype(ccodes.dtype)
    return ccodes, cuniques


def _normalise_cats(cat: Strings) -> Strings:
    """Old Kineto category spellings → the current ones (CAT_ALIASES); codes re-pointed when two
    spellings of one category both occur."""
    codes, uniques = cat
    if not any(c in CAT_ALIASES for c in uniques):
        return cat
    renamed = [CAT_ALIASES.get(c, c) for c in uniques]
    new_uniques = list(dict.fromkeys(renamed))
    index = {c: i for i, c in enumerate(new_uniques)}
    remap = np.array([index[c] for c in renamed] + [-1], dtype=np.int32)
    return np.take(remap, codes), new_uniques


# An integer in a string: decimal or hex, after an optional word ("stream 7"); the whole string.
_INT_RE = re.compile(r"\s*(?:[A-Za-z][A-Za-z_]*\s+)?(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*$")


def _ints(values: tuple | list) -> pa.Array:
    """An int64 column from JSON ints, or from strings holding ints ("7", "0x0" as ROCm writes streams,
    "stream 7"); floats (which arrive as text) keep their integer part only if it is exact."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), pa.int64())
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
        m = _INT_RE.match(v)
        if m is None:  # a float's text ("7.0", "1e3"), or not a number
            try:
                d = decimal.Decimal(v)
                if d.is_finite() and d.copy_abs() < 2**63 and d == d.to_integral_value():
                    return int(d)
            except (decimal.DecimalException, ValueError):
                pass
            return None
        text = m.group(1)
        n = int(text, 16) if "x" in text.lower() else int(text)
        return n if -(2**63) <= n < 2**63 else None
    return None


def _times(values: tuple | list) -> tuple[pa.Array, np.ndarray]:
    """ts/dur values as decoded (JSON ints, or floats as their decimal text) → decimal128(38, 3), exactly
    (values with more than three decimals are rounded half to even), and each value's TIME_* state.
    Non-numbers become null: `time_value` is the rule per value; Arrow's casts are its fast cases."""
    try:
        arr = pa.array(values, pa.int64()).cast(US)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        # Arrow's string -> decimal128 cast misreads some texts without an error (pyarrow 26: "0.001"
        # followed by 39 zeros becomes 0.000, "3.401823669209385e+38" 99999999999963463374607431768211456):
        # texts of more than 38 characters or with an exponent take the per-value rule.
        if any(isinstance(v, str) and (len(v) > 38 or "e" in v or "E" in v) for v in values):
            return _times_slow(values)
        try:
            arr = pa.array(values, pa.string()).cast(US)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return _times_slow(values)
    # Both casts either take every value or fail: a null is a missing value.
    return arr, np.where(_arrow.valid(arr), TIME_OK, TIME_MISSING).astype(np.int8)


def to_int64_ns(value: pa.Array, unit: str) -> pa.Array:
    """decimal128(38, 3) times in `unit` ("us" or "ns") → int64 ns; out-of-range values become null."""
    import pyarrow.compute as pc  # the msgspec path only (its import: benchmarks/import_costs.py)

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


def _times_slow(values: tuple | list) -> tuple[pa.Array, np.ndarray]:
    out: list[decimal.Decimal | None] = []
    state = np.empty(len(values), np.int8)
    for i, v in enumerate(values):
        d, state[i] = time_value(v)
        out.append(d)
    return pa.array(out, US), state


_MILLI = decimal.Decimal("0.001")
_TIME_CONTEXT = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)
_TIME_LIMIT = decimal.Decimal(10) ** 35  # decimal128(38, 3) holds less than 10**35, as Arrow's cast takes


def time_value(v: Any) -> tuple[Optional[decimal.Decimal], int]:
    """One ts/dur value as decoded (an int; a str: a float's text, or a JSON string) → (its value rounded
    half to even to three decimals, TIME_OK), or (None, why not). A string holding a number is read as
    that number (as Perfetto does); any other string, true/false, an array or an object is not a number;
    NaN is not a number, Infinity and values of 10**35 or more (beyond decimal128(38, 3), where Arrow's
    cast on the msgspec path stops too) are out of range."""
    if v is None:
        return None, TIME_MISSING
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        return None, TIME_NOT_NUMBER
    try:
        d = _TIME_CONTEXT.create_decimal(v) if isinstance(v, str) else decimal.Decimal(v)
    except decimal.Overflow:  # an exponent beyond Decimal's (1e9999999999)
        return None, TIME_OUT_OF_RANGE
    except (decimal.DecimalException, ValueError):
        return None, TIME_NOT_NUMBER
    if d.is_nan():
        return None, TIME_NOT_NUMBER
    if not d.is_finite() or d.copy_abs() >= _TIME_LIMIT:
        return None, TIME_OUT_OF_RANGE
    return d.quantize(_MILLI, context=_TIME_CONTEXT), TIME_OK


def time_ns(d: decimal.Decimal, unit: str) -> Optional[int]:
    """A time_value in `unit` → int64 ns (as `to_int64_ns` converts a column), None beyond int64."""
    ns = (
        int(d.to_integral_value(decimal.ROUND_HALF_EVEN)) if unit == "ns" else int(d.scaleb(3, _TIME_CONTEXT))
    )
    return ns if -(2**63) <= ns < 2**63 else None
