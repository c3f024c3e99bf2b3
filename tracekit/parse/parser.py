"""Parse PyTorch profiler (Kineto) Chrome traces into one capture: raw events plus derived rows.

    capture = parse_paths([Path("run/")])          # a run folder, or trace files (one per rank)
    write_capture(capture, Path("capture.parquet"))
    parse_to_file([Path("run/")], Path("capture.parquet"))  # the same, streamed: bounded memory
    capture = load_capture(Path("capture.parquet"))  # or a trace / folder, parsed on the fly

How a file is read (see decode.py): the traceEvents array is located from the text around it, cut into
chunks of whole events, and the chunks are decoded in parallel worker processes (forked, sharing the
file's pages; the C scanner when it is built, else msgspec; each worker also adds the rank and picks the
rows derive_steps and parse.sanity need). When the tables are written out as they come
(`parse_to_file`), a worker also encodes its event table as the capture file's row groups
(tracekit.data.store.encode_rows), which the parent appends to the file as they are
(tracekit.data.stitch; else tables come through the pipe as LZ4 Arrow IPC), and one worker computes the
file's digest beside the chunks; the parent only appends, derives the step rows and writes them. Any
surprise (a cut inside a string, a truncated or malformed file) falls back to one validating decode of
the whole file, which also produces the precise error message. Nothing on this path imports pandas
(tracekit/data/arrow.py).
Format quirks are handled once, here and in `decode.py`, and listed in docs/QUIRKS.md.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import decimal
import functools
import json
import mmap
import os
import re
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from tracekit.data import arrow as _arrow
from tracekit.data import files as _files
from tracekit.data import pool as _pool
from tracekit.data.describe import losses_line
from tracekit.data.files import Location
from tracekit.data.schema import CAT_CPU_OP, CAT_USER_ANNOTATION, KIND_EVENT, SCHEMA, device_properties
from tracekit.data.store import (
    DIGEST,
    FOLDER_META,
    PART_NAME,
    Capture,
    CaptureWriter,
    EncodedRows,
    check_output,
    encode_rows,
    file_digest,
    is_capture,
    read_capture,
)
from tracekit.errors import (
    CaptureFileError,
    InputNotFound,
    OutputExistsError,
    TraceFormatError,
    TracekitError,
    TraceWarning,
    WorkerError,
)
from tracekit.parse import begin_end as _begin_end
from tracekit.parse import decode as _decode
from tracekit.parse import fast as _fast
from tracekit.parse import sanity as _sanity
from tracekit.parse.derive import Frame, FrameBuilder, derive_step_rows, needed_for_derive, record_rules
from tracekit.parse.iterations import file_starts

TRACE_SUFFIXES = (".json", ".json.gz")
MANIFEST_NAME = "manifest.json"  # written by `tracekit capture` beside the traces; not a trace
PARQUET_MAGIC = b"PAR1"
CHUNK_BYTES = 24 << 20  # bytes of event JSON per decode task (memory per worker is a few × this)
MIN_CHUNK_BYTES = 1 << 20  # smaller chunks cost more in per-task overhead than they gain

# Receives each decoded event table (or its encoded row groups: _Job.encode) and the part of it that
# derive_steps and parse.sanity need.
Sink = Callable[["pa.Table | EncodedRows", pa.Table], None]
# Progress callback: (source name, bytes done, bytes total).
Progress = Callable[[str, int, int], None]

_HOST_SPAN_CATS = (CAT_CPU_OP, CAT_USER_ANNOTATION)

# A µs timestamp at or above this is after the year 5000: such a trace must be in ns.
_NS_MAGNITUDE = 10**17


def parse_paths(paths: list[Path], *, salvage: bool = False, progress: Optional[Progress] = None) -> Capture:
    """Parse trace files and/or run folders (one file per rank) into one in-memory Capture.

    Each file's rank comes from its ``distributedInfo.rank``, else from its name (``rank-3``,
    ``rank_3``, ``rank3``), else 0. With `salvage`, a truncated file keeps every complete event.
    Raises a TracekitError subclass for anything that is not a readable trace. Of several files, one
    that fails is left out and listed in the capture's `failed` metadata (the others are parsed);
    when all fail, the first error is raised."""
    files = find_trace_files(paths)
    tables: list[pa.Table] = []
    sources, traces, failed = _parse_files(
        files,
        salvage=salvage,
        progress=progress,
        sink=lambda table, _needed: tables.append(table),
        keep_going=len(files) > 1,
    )
    check_rank_files(traces)
    ranks_at_once(traces)
    events = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    _require_events(files, traces)
    frame = Frame(events)
    steps, rules = derive_step_rows(frame, file_starts(traces))
    record_rules(traces, rules)
    _sanity.check(frame, steps, traces)
    table = pa.concat_tables([events, steps])
    meta = {"sources": sources, "traces": traces, "manifest": find_manifest(paths)}
    if failed:
        meta["failed"] = failed
    warn_losses(traces)
    return Capture(table=table, meta=meta)


def parse_to_file(
    paths: list[Path],
    output: Path,
    *,
    force: bool = False,
    salvage: bool = False,
    progress: Optional[Progress] = None,
) -> Capture:
    """`tracekit parse`: parse `paths` and write the capture to `output` atomically, streaming.

    Event tables go to the Parquet file as they are decoded; only the columns the derived rows need are
    kept in memory. An existing `output` is kept unless `force` (checked before any parsing). Returns
    the Capture holding the derived rows only (its meta is the file's). Of several files, one that
    fails is left out and listed under the metadata's `failed` (see parse_paths)."""
    output = Path(output)
    check_output(output, force)
    files = find_trace_files(paths)
    for p, _ in files:
        if not _files.is_uri(p) and Path(p).resolve() == output.resolve():
            raise OutputExistsError(f"{output} is also an input; choose another output path")
    return parse_files_to(
        files,
        output,
        force=force,
        salvage=salvage,
        progress=progress,
        manifest=find_manifest(paths),
        keep_going=len(files) > 1,
    )


def parse_files_to(
    files: list[tuple[Location, str]],
    output: Location,
    *,
    force: bool = False,
    salvage: bool = False,
    progress: Optional[Progress] = None,
    manifest: Optional[dict] = None,
    keep_going: bool = False,
    part: bool = False,
    parallel: bool = True,
) -> Capture:
    """Parse `files` ((path, display name) pairs) into the capture file `output`, streaming.

    `keep_going`: a file that fails is listed in the metadata's `failed` instead of failing the parse
    (unless every file fails). `part`: write a part file of the folder form (one rank; no rank column;
    tracekit.data.store). `parallel`: decode each file in chunks over a pool of worker processes;
    without, decode in this process (a worker of a job that parses many files at once)."""
    if parallel:
        _prefer_jemalloc()
    plans: dict = {}  # survives a restart: which files need the slow path or the ns unit
    while True:
        try:
            capture = _stream_once(
                files,
                output,
                force=force,
                salvage=salvage,
                progress=progress,
                plans=plans,
                manifest=manifest,
                keep_going=keep_going,
                part=part,
                parallel=parallel,
            )
        except _Restart:
            continue  # a file needs its slow path or another unit: the output so far is discarded
        warn_losses(capture.traces)
        return capture


def _stream_once(
    files: list[tuple[Location, str]],
    output: Location,
    *,
    force: bool,
    salvage: bool,
    progress: Optional[Progress],
    plans: dict,
    manifest: Optional[dict],
    keep_going: bool,
    part: bool,
    parallel: bool,
) -> Capture:
    kept = FrameBuilder()  # the derive subsets' columns, each chunk's let go as it comes
    rows = 0
    # In parallel, the workers encode the event tables: the file is stitched from their row groups.
    with CaptureWriter(output, force=force, part=part, stitched=parallel) as writer:

        def sink(table: pa.Table | EncodedRows, needed: pa.Table) -> None:
            nonlocal rows
            writer.write(table)
            rows += table.num_rows
            kept.add(needed)

        sources, traces, failed = _parse_files(
            files,
            salvage=salvage,
            progress=progress,
            sink=sink,
            plans=plans,
            streaming=True,
            keep_going=keep_going,
            parallel=parallel,
            encode=part if parallel else None,
        )
        check_rank_files(traces)
        ranks_at_once(traces)
        _require_events(files, traces)
        needed = kept.frame()  # its columns converted once, for derive and sanity
        derived, rules = derive_step_rows(needed, file_starts(traces))
        record_rules(traces, rules)
        writer.write(derived)
        _sanity.check(needed, derived, traces)
        writer.meta = {"sources": sources, "traces": traces, "manifest": manifest}
        if failed:
            writer.meta["failed"] = failed
    return Capture(table=derived, meta=dict(writer.meta, event_rows=rows), path=output)


def load_capture(
    path: Path, columns: Sequence[str] | None = None, kinds: Sequence[str] | None = None
) -> Capture:
    """A capture from a .parquet capture file or a capture folder (read whole), or parsed on the fly
    from a trace file or run folder; `path` may be a URI (s3://…). `columns`: only these of the table
    (those the file has), for a caller that reads no others; `kinds`: of a capture, only the row groups
    that may hold these row kinds (tracekit.data.store.read_capture)."""
    path = path if _files.is_uri(path) else Path(path)
    if not _files.exists(path):
        raise _files.not_found(path)
    if is_capture(path):
        if columns is None:
            return read_capture(path, kinds=kinds)
        return read_capture(path, columns=[c for c in columns if c in SCHEMA.names], kinds=kinds)
    return _narrowed(parse_paths([path]), columns)


def load_paths(
    paths: Sequence[Location],
    *,
    salvage: bool = False,
    columns: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
) -> Capture:
    """One capture from a capture on disk (`load_capture`) or from trace files / run folders of one job
    parsed now; `salvage` parses even a single capture's worth of trace as a cut-off trace may need."""
    if len(paths) == 1 and not salvage:
        return load_capture(paths[0], columns=columns, kinds=kinds)  # type: ignore[arg-type]
    return _narrowed(parse_paths(list(paths), salvage=salvage), columns)  # type: ignore[arg-type]


def _narrowed(cap: Capture, columns: Sequence[str] | None) -> Capture:
    if columns is not None:
        cap.table = cap.table.select([c for c in columns if c in cap.table.column_names])
    return cap


# ---------------------------------------------------------------------------------------------------


def find_trace_files(paths: Sequence[Location]) -> list[tuple[Location, str]]:
    """(path, display name) of every trace file named or inside a named folder (not recursive)."""
    if not paths:
        raise InputNotFound("no trace given; name a trace file (*.pt.trace.json[.gz]) or a run folder")
    found: list[tuple[Location, str]] = []
    for p in paths:
        if _files.is_uri(p):
            found.extend(_trace_files_at(str(p)))
            continue
        p = Path(p)
        _files.check_input(p)
        if is_capture(p):
            raise InputNotFound(
                f"{p} is a capture (Parquet), not a trace: name a capture alone (tracekit analyze {p}), "
                f"or compare captures with tracekit diff {p} OTHER"
            )
        if p.is_dir():
            named = sorted(
                q for q in p.iterdir() if q.name.endswith(TRACE_SUFFIXES) and q.name != MANIFEST_NAME
            )
            for q in named:  # a rank's file that is a dangling link or a FIFO is not left out silently
                if not q.is_dir():
                    _files.check_input(q)
            inside = [q for q in named if q.is_file()]
            if not inside:
                _capture_folder_without_index(p)
                subdirs = sorted(q.name for q in p.iterdir() if q.is_dir())
                hint = f" (it has folders: {', '.join(subdirs[:5])}; name one run folder)" if subdirs else ""
                raise InputNotFound(f"{p}: no trace files (*.json, *.json.gz) in this folder{hint}")
            found.extend((q, f"{p.name}/{q.name}" if p.name else q.name) for q in inside)
        else:
            found.append((p, p.name))
    return found


def _capture_folder_without_index(folder: Path) -> None:
    """A folder of rank parts without its metadata file is a capture folder whose writing did not end
    (or whose `_tracekit.json` was removed): said, not "no trace files"."""
    parts = sorted(folder.glob(f"rank=*/{PART_NAME}"))
    if parts:
        raise CaptureFileError(
            f"{folder}: a capture folder without its {FOLDER_META} ({parts[0].relative_to(folder)} is "
            "there): its writing was interrupted, or the file was removed; parse the traces again"
        )


def _trace_files_at(uri: str) -> list[tuple[Location, str]]:
    """find_trace_files for a URI (an object, or a folder / key prefix of a store): one listing."""
    if _files.is_file(uri):
        return [(uri, _files.name_of(uri))]
    if not _files.is_dir(uri):
        raise InputNotFound(f"{uri}: no such file or folder")
    names = [n for n in _files.list_files(uri) if n.endswith(TRACE_SUFFIXES) and n != MANIFEST_NAME]
    if not names:
        raise InputNotFound(f"{uri}: no trace files (*.json, *.json.gz) in this folder")
    folder = _files.name_of(uri)
    return [(_files.join(uri, n), f"{folder}/{n}" if folder else n) for n in names]


def find_manifest(paths: list[Path]) -> Optional[dict]:
    """The capture manifest (manifest.json, written by `tracekit capture`) of the named run folders, or
    None. Folders whose manifests differ are two runs: refused (one run's manifest labelled the other's
    traces). A manifest that cannot be read (cut short, not an object) is named in a warning, and then
    none is taken: whose run it was cannot be told (the traces are still worth parsing)."""
    found: list[tuple[Location, dict]] = []
    unreadable = []
    for p in paths:
        candidate = _files.join(p, MANIFEST_NAME)
        try:
            if not (_files.is_dir(p) and _files.is_file(candidate)):
                continue
            doc = json.loads(_files.read_bytes(candidate))
        except (OSError, ValueError, TracekitError) as exc:
            unreadable.append(f"{candidate} ({_files.first_line(exc)[:80]})")
            continue
        if not isinstance(doc, dict):
            unreadable.append(f"{candidate} (not a JSON object)")
            continue
        found.append((p, doc))
    for (a, ma), (b, mb) in zip(found, found[1:]):
        if ma != mb:
            raise TraceFormatError(
                f"{a} and {b} are run folders of different runs (their manifests differ: "
                f"{ma.get('run') or ma.get('started_at')} and {mb.get('run') or mb.get('started_at')}); "
                "give each run its own capture (tracekit diff compares them)"
            )
    if unreadable:
        warnings.warn(
            f"cannot read {', '.join(unreadable)}: the capture has no manifest (no unprofiled step "
            "times, knobs or versions)",
            TraceWarning,
            stacklevel=2,
        )
        return None
    return found[0][1] if found else None


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


MAX_RANK = 2**31 - 1  # the capture's rank column is int32


def rank_of(metadata: dict, name: str) -> int:
    """distributedInfo.rank, else a rank in the file name (rank-3, rank_3, rank3), else 0. A rank
    beyond int32 is refused (it used to end in an Arrow overflow traceback)."""
    info = metadata.get("distributedInfo")
    rank, where = None, "distributedInfo.rank"
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            rank = r
        elif isinstance(r, str) and r.strip().isdigit():
            rank = int(r)
    if rank is None:
        m = _RANK_IN_NAME.search(Path(name).name)
        rank, where = (int(m.group(1)), "the rank in its name") if m else (0, "")
    if rank > MAX_RANK:
        raise TraceFormatError(
            f"{name}: {where} is {rank}, beyond the largest rank a capture holds ({MAX_RANK}); "
            "fix the trace's distributedInfo.rank (or its name)"
        )
    return rank


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


# ---------------------------------------------------------------------------------------------------
# Driving the decode of each file


class _Restart(Exception):
    """Internal: a streamed parse must start over (a file needs the slow path or another unit)."""


def _require_events(files: list[tuple[Location, str]], traces: list[dict]) -> None:
    """Refuse a parse that kept no usable event: only process/thread names (metadata), or nothing."""
    if sum(t["usable_events"] for t in traces) == 0:
        names = ", ".join(str(p) for p, _ in files)
        losses = [(t["source"], loss) for t in traces if (loss := losses_line(t))]
        if losses:
            said = losses[0][1] if len(traces) == 1 else "; ".join(f"{src}: {loss}" for src, loss in losses)
            raise TraceFormatError(f"{names}: no usable profiler events ({said})")
        if any(t.get("salvaged_dropped_bytes") or t.get("gzip_damage") for t in traces):
            raise TraceFormatError(f"{names}: no profiler events before the damage; nothing to salvage")
        raise TraceFormatError(f"{names}: no profiler events in the trace; nothing to parse")


def warn_losses(traces: list[dict]) -> None:
    """A TraceWarning per trace that lost events or values to bad input (the counts are in its entry).
    Parses run as tasks (tracekit.scale) keep theirs quiet and the driver calls this once for the job."""
    for t in traces:
        loss = losses_line(t)
        if loss:
            warnings.warn(f"{t['source']}: {loss}", TraceWarning, stacklevel=3)
        for odd in t.get("warnings") or []:  # what parse.sanity found odd
            warnings.warn(f"{t['source']}: {odd}", TraceWarning, stacklevel=3)


def _parse_files(
    files: list[tuple[Location, str]],
    *,
    salvage: bool,
    progress: Optional[Progress],
    sink: Sink,
    plans: Optional[dict] = None,
    streaming: bool = False,
    keep_going: bool = False,
    parallel: bool = True,
    encode: Optional[bool] = None,
) -> tuple[list[dict], list[dict], list[dict]]:
    """Decode every file, passing schema.SCHEMA event tables (and their `needed_for_derive` part) to
    `sink`; return (sources, traces, failed).

    Each file is tried on the fast path with the µs unit; a file whose decode says otherwise is redone
    (in memory: just that file; streaming: `_Restart`, and the caller starts over with the plan kept).
    With `keep_going`, a file that fails (a TracekitError) is left out and described in `failed`
    ({"path", "rank" (None when unknown), "error"}); a file fails before any of its tables reach the
    sink (its errors come from the validating decode, which runs before its events are emitted). When
    every file fails, the first error is raised. `encode` (with `streaming`): see _Job."""
    job = _Job({} if plans is None else plans, salvage, progress, sink, streaming, parallel, encode)
    sources, traces, failed = [], [], []
    first_error: Optional[TracekitError] = None
    for path, display in files:
        try:
            # A file in an object store is fetched to a local temporary file first (the decoder
            # memory-maps its input); messages name it as the user did.
            with _files.local_copy(path) as local, _named_as(path, local):
                digest = _Digest(local)
                info = _parse_file(local, display, str(path), digest, job)
                source = {"path": display, "rank": info["rank"], "bytes": os.path.getsize(local)}
                source[DIGEST] = digest.value()
        except (_Restart, WorkerError):
            raise
        except TracekitError as exc:
            if not keep_going:
                raise
            first_error = first_error or exc
            failed.append({"path": display, "rank": rank_hint(exc, display), "error": str(exc)})
            continue
        sources.append(source)
        traces.append(info)
    if failed and not traces:
        assert first_error is not None
        raise first_error
    return sources, traces, failed


@dataclass(frozen=True)
class _Job:
    """How every file of one parse is decoded: `plans` (each file's decode plan, kept across restarts),
    `salvage`, `progress`, the `sink` its tables go to, `streaming` (the sink writes as they come: a
    file whose plan changes restarts the whole parse), `parallel` (a file over all cores), `encode`
    (None: the sink takes tables; else the pool's workers encode them as a capture file's row groups,
    of the part form when True, and the sink takes those EncodedRows)."""

    plans: dict
    salvage: bool
    progress: Optional[Progress]
    sink: Sink
    streaming: bool
    parallel: bool
    encode: Optional[bool] = None


def _parse_file(path: Path, display: str, key: str, digest: _Digest, job: _Job) -> dict:
    """One file (local: `path`; as the user named it: `key`) into the job's sink; its trace entry."""
    plan_key = (key, os.path.getsize(path))  # `key`: the file as named (a download's local name changes)
    while True:
        plan = job.plans.setdefault(plan_key, {"fast": True, "unit": "us"})
        pending: list[tuple[pa.Table, pa.Table]] = []
        emit = job.sink if job.streaming else functools.partial(_collect, pending)
        try:
            info = _parse_one(
                path,
                display,
                plan,
                salvage=job.salvage,
                progress=job.progress,
                sink=emit,
                encode=job.encode if job.streaming else None,
                digest=digest,
                parallel=job.parallel,
            )
        except _Redo as redo:
            plan.update(redo.plan)
            if job.streaming:
                raise _Restart() from None
            continue
        for tables in pending:
            job.sink(*tables)
        return info


@contextlib.contextmanager
def _named_as(path, local: Path) -> Iterator[None]:
    """Errors raised inside name `path`, not the local copy `local` that was read in its place."""
    try:
        yield
    except TracekitError as exc:
        if Path(path) == local or str(local) not in str(exc):
            raise
        renamed = type(exc)(str(exc).replace(str(local), str(path)))
        renamed.__dict__.update(exc.__dict__)  # e.g. the rank a failed file was known to have
        raise renamed from None


def rank_hint(exc: Exception, display: str) -> Optional[int]:
    """The rank of a file that failed: known from its metadata when decoding got that far (the
    exception carries it), else from its name, else unknown."""
    rank = getattr(exc, "rank", None)
    if rank is not None:
        return int(rank)
    m = _RANK_IN_NAME.search(Path(display).name)
    return int(m.group(1)) if m else None


def check_rank_files(traces: list[dict]) -> None:
    """Two files of one rank are successive profiler cycles (legal: their events are merged) only if
    their host time spans do not overlap; overlapping ones are copies of one trace (or traces of
    different jobs), whose merge would double every step. Raises TraceFormatError naming both."""
    by_rank: dict[int, list[dict]] = collections.defaultdict(list)
    for t in traces:
        if t.get("host_span_ns"):
            by_rank[int(t["rank"])].append(t)
    for rank, ts in by_rank.items():
        ts = sorted(ts, key=lambda t: t["host_span_ns"][0])
        for a, b in zip(ts, ts[1:]):  # one loop per file of the rank: sorted, neighbours suffice
            if b["host_span_ns"][0] < a["host_span_ns"][1]:
                raise TraceFormatError(
                    f"{a['source']} and {b['source']} are both rank {rank} and their time ranges "
                    "overlap (copies of one trace, or traces of different runs?); successive profiler "
                    "cycles of one rank never overlap. Parse one of them, or give each run its own capture"
                )
        _one_process(rank, ts)


def _one_process(rank: int, traces: list[dict]) -> None:
    """The files of one rank come from one process (the successive profiler cycles of a run): files
    whose host events come from different processes are two runs, merged they gave one step of 38 s
    ("idle: interpreter 12714 ms/step") and a source the analysis never read."""
    pids = [(t, set(t.get("host_pids") or ())) for t in traces]
    known = [(t, p) for t, p in pids if p]
    for (a, pa_), (b, pb) in zip(known, known[1:]):
        if not pa_ & pb:
            raise TraceFormatError(
                f"{a['source']} and {b['source']} are both rank {rank} but come from different processes "
                f"(pid {min(pa_)} and pid {min(pb)}): traces of two runs, not two profiler cycles of one "
                "(those come from one process); give each run its own capture (tracekit diff compares them)"
            )


def ranks_at_once(traces: list[dict]) -> None:
    """The ranks of one job run at once: a rank whose host events all lie before another rank's first
    one is named in a warning in its trace entry (traces of different runs?); clocks of different hosts
    may disagree, so it is not refused. Called once on a job's final trace entries."""
    by_rank: dict[int, list[dict]] = collections.defaultdict(list)
    for t in traces:
        if t.get("host_span_ns"):
            by_rank[int(t["rank"])].append(t)
    spans = {
        r: (min(t["host_span_ns"][0] for t in ts), max(t["host_span_ns"][1] for t in ts))
        for r, ts in by_rank.items()
    }
    if len(spans) < 2:
        return
    last_start = max(spans, key=lambda r: spans[r][0])
    first_end = min(spans, key=lambda r: spans[r][1])
    apart = spans[last_start][0] - spans[first_end][1]
    if apart <= 0:
        return
    entry = by_rank[last_start][0]
    entry["warnings"] = entry.get("warnings", []) + [
        f"rank {last_start} starts {apart / 1e9:.3f} s after rank {first_end} ended: the ranks of one job "
        "run at once, so these may be traces of different runs (or of hosts whose clocks disagree); "
        "collective waits and the job's step time mix them"
    ]


class _Digest:
    """The digest of a source file (`sources[].xxh3_128`, tracekit.data.store.DIGEST), computed by a
    decode worker when the file is decoded in the pool (the parent is the busiest process: it writes
    the Parquet file), else here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._value: Optional[str] = None
        self._pending: Optional[Future[str]] = None

    def start_in(self, pool: _pool.ForkPool, name: str) -> None:
        if self._value is None:
            self._pending = pool.submit(file_digest, self.path, name=name)

    def collect(self) -> None:
        """Take the worker's result (before its pool closes)."""
        if self._pending is not None:
            self._value, self._pending = _pool.result(self._pending), None

    def value(self) -> str:
        if self._value is None:
            self._value = file_digest(self.path)
        return self._value


def _collect(into: list, table: pa.Table, needed: pa.Table) -> None:
    into.append((table, needed))


class _Redo(Exception):
    def __init__(self, plan: dict) -> None:
        super().__init__(plan)
        self.plan = plan


def _parse_one(
    path: Path,
    display: str,
    plan: dict,
    *,
    salvage: bool,
    progress: Optional[Progress],
    sink: Sink,
    encode: Optional[bool] = None,
    digest: Optional[_Digest] = None,
    parallel: bool = True,
) -> dict:
    """Decode one file into `sink`; return its trace entry. Raises _Redo to change the plan.

    With `encode` (see _Job), the sink may be given EncodedRows in place of an event table."""
    buf, gz_damage = _decode.read_trace_bytes(path)
    size = len(buf)
    if progress:
        progress(display, 0, size)
    stats_all = _decode._no_stats()
    where = _events_of(buf, path, plan["fast"] and not gz_damage, gz_damage, salvage, parallel, stats_all)
    metadata, source, ranges, dropped_bytes, fast = where
    rank = rank_of(metadata, display)
    rows = 0
    done = 0
    span = _HostSpan()
    pairing = plan.get("pair", False)  # B/E events: the file's tables are held, then paired (begin_end)
    held: list[pa.Table] = []
    try:
        for table, needed, stats in _decode_ranges(
            source,
            ranges,
            unit=plan["unit"],
            where=str(path),
            rank=rank,
            encode=None if pairing else encode,
            digest=digest,
            parallel=parallel,
            display=display,
        ):
            _merge_stats(stats_all, stats)
            done += stats.get("bytes", 0)
            if pairing:
                held.append(table)  # not encoded: encode is None
                continue
            rows += table.num_rows
            span.add(stats["host_span_ns"])
            sink(table, needed)
            if progress:
                progress(display, min(done, size), size)
    except TraceFormatError as exc:
        if not fast:
            exc.rank = rank  # for the message of a job's failed file (`rank_hint`)
            raise
        raise _Redo({"fast": False}) from None
    unit = time_unit(metadata, stats_all)
    if unit != plan["unit"]:
        raise _Redo({"unit": unit})
    if stats_all["begin_end"] and not pairing:
        raise _Redo({"pair": True})
    if pairing:
        rows = _sink_paired(held, stats_all, span, sink)
    if progress:
        progress(display, size, size)
    entry = _trace_entry(metadata, stats_all, rank=rank, source=display, unit=unit, rows=rows)
    entry.update(
        salvaged_dropped_bytes=dropped_bytes if salvage else None,
        host_span_ns=span.value(),
        host_pids=sorted(span.pids),
        gzip_damage=gz_damage,
    )
    return entry


DROP_DEVICE_PROPERTIES = "deviceProperties entries that are not objects"


def _events_of(
    buf: bytes | mmap.mmap,
    path: Path,
    fast: bool,
    gz_damage: Optional[str],
    salvage: bool,
    parallel: bool,
    stats: dict,
) -> tuple[dict, bytes | mmap.mmap | memoryview, list[tuple[int, int]], int, bool]:
    """(the file's metadata, the buffer its events are in, the ranges of whole events to decode, the
    bytes --salvage dropped, whether they were located in place): with `fast` the events located in
    place, else (or where they cannot be) one validating decode of the whole file (exact errors,
    truncation and --salvage)."""
    located = _decode.locate_events(buf) if fast else None
    if located is not None:
        metadata, start, end = located
        ranges = _decode.split_points(buf, start, end, chunk_bytes(end - start) if parallel else CHUNK_BYTES)
        return metadata, buf, ranges, 0, True
    doc = _decode.split_document(buf, path, salvage=salvage, gz_damage=gz_damage)
    if doc.deep_values:
        stats["values_dropped"][_decode.DROP_TOO_DEEP] = doc.deep_values
    return doc.metadata, doc.events, [(1, len(doc.events) - 1)], doc.dropped_bytes, False


def _sink_paired(tables: list[pa.Table], stats: dict, span: _HostSpan, sink: Sink) -> int:
    """A file's decoded tables with its B/E events paired into complete events (tracekit.parse.begin_end),
    into `sink` as one table; the B/E rows left out are counted in `stats`. Returns the rows sunk."""
    paired, skipped = _begin_end.pair(pa.concat_tables(tables))
    for reason, n in skipped.items():
        stats["skipped"][reason] = stats["skipped"].get(reason, 0) + n
    pairs = (stats["begin_end"] - sum(skipped.values())) // 2
    stats["usable_events"] -= stats["begin_end"] - pairs  # each pair is one event now
    needed = needed_for_derive(paired)
    span.add(_host_span(needed))
    sink(paired, needed)
    return paired.num_rows


def _trace_entry(metadata: dict, stats: dict, *, rank: int, source: str, unit: str, rows: int) -> dict:
    """A file's entry in the capture's `traces` metadata: what it is and what its decode kept, skipped
    (by reason) and dropped."""
    metadata = dict(metadata)
    if isinstance(metadata.get("traceName"), str):
        # Kineto writes the absolute temp path it traced to; keep only the file name.
        metadata["traceName"] = Path(metadata["traceName"]).name
    props = metadata.get("deviceProperties")
    if props is not None and device_properties(metadata) != props:
        # `"H100"` or `["H100"]` where Kineto writes a list of objects (id, name, ...): only the objects
        # are kept, the rest counted (readers used to fail on them: AttributeError)
        metadata["deviceProperties"] = device_properties(metadata)
        n = len(props) - len(metadata["deviceProperties"]) if isinstance(props, list) else 1
        dropped = stats["values_dropped"]
        dropped[DROP_DEVICE_PROPERTIES] = dropped.get(DROP_DEVICE_PROPERTIES, 0) + n
    untimed = (_decode.SKIP_TS_MISSING, _decode.SKIP_TS_NOT_NUMBER, _decode.SKIP_TS_OUT_OF_RANGE)
    return {
        "rank": rank,
        "source": source,
        "time_unit": unit,
        "events": rows,
        "events_in_file": stats["events_seen"],
        "usable_events": stats["usable_events"],
        "dropped_events_without_time": sum(stats["skipped"].get(r, 0) for r in untimed),
        "skipped_events": dict(sorted(stats["skipped"].items())),
        "dropped_values": dict(sorted(stats["values_dropped"].items())),
        "salvaged_dropped_bytes": None,
        "host_span_ns": None,
        "gzip_damage": None,
        "metadata": metadata,
    }


class _HostSpan:
    """[first start, last end] of a file's host events (complete cpu_op and annotation events): what
    `check_rank_files` compares. Device activity is left out: a GPU may finish a cycle's work after
    its host has stopped, and clocks of host and device differ slightly. Each chunk's is computed
    where it is decoded (`_host_span`, in the worker); the file's is their hull."""

    def __init__(self) -> None:
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.pids: set[int] = set()  # the processes of those events (check_rank_files: one run's)

    def add(self, chunk: Optional[tuple[int, int, list[int]]]) -> None:
        if chunk is None:
            return
        lo, hi, pids = chunk
        self.pids.update(pids)
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)

    def value(self) -> Optional[list[int]]:
        return None if self.lo is None or self.hi is None else [self.lo, self.hi]


def _host_span(needed: pa.Table) -> Optional[tuple[int, int, list[int]]]:
    """[first start, last end] of the host events of one chunk's derive rows (see _HostSpan) and their
    processes, or None."""
    frame = Frame(needed)
    host = frame.mask("ph", lambda v: v == "X") & frame.mask("cat", lambda v: v in _HOST_SPAN_CATS)
    if not host.any():
        return None
    ts = frame.ints("ts_ns")[host]
    end = ts + np.maximum(frame.ints("dur_ns")[host], 0)
    pids = frame.ints("pid")[host & frame.present("pid")]
    return int(ts.min()), int(end.max()), _arrow.distinct(pids).tolist()


def _merge_stats(into: dict, stats: dict) -> None:
    into["events_seen"] += stats["events_seen"]
    into["begin_end"] += stats.get("begin_end", 0)
    into["usable_events"] += stats["usable_events"]
    for key in ("skipped", "values_dropped"):
        for reason, n in stats[key].items():
            into[key][reason] = into[key].get(reason, 0) + n
    into["fractional"] = into["fractional"] or stats["fractional"]
    if decimal.Decimal(stats["max_abs_ts"]) > decimal.Decimal(into["max_abs_ts"]):
        into["max_abs_ts"] = stats["max_abs_ts"]


def chunk_bytes(size: int) -> int:
    """The chunk size for `size` bytes of events: CHUNK_BYTES, but small enough that a file of a few
    MB (one rank of a multi-rank job) still gives every worker a few chunks."""
    per_worker = -(-size // (4 * _pool.workers()))
    return max(min(MIN_CHUNK_BYTES, CHUNK_BYTES), min(CHUNK_BYTES, per_worker))


# The buffer the forked workers read (set before the pool forks; never pickled).
_SHARED: dict = {}


def _decode_range(job: tuple[int, int, str, str, int]) -> tuple[pa.Table, pa.Table, dict]:
    """Decode one range of whole events: (its schema.SCHEMA table, the part derive_steps and sanity
    need, stats).
    Runs in a worker process: everything per chunk is done here, the parent only writes and derives."""
    a, b, unit, where, rank = job
    buf = _SHARED["buf"]
    # The C scanner reads the range in place; msgspec (its fallback) needs it as one JSON array.
    decoded = _fast.decode(buf, unit, a, b, bare=True)
    if decoded is None:
        data = b"[" + bytes(buf[a:b]) + b"]"
    if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        # Drop the file pages this worker touched from its resident set (they stay in the page cache).
        page = mmap.PAGESIZE
        lo = a - a % page
        buf.madvise(mmap.MADV_DONTNEED, lo, b - lo)
    batch, stats = decoded if decoded is not None else _decode.decode_events(data, where=where, unit=unit)
    stats["bytes"] = b - a
    table = _with_rank(batch, rank)
    needed = needed_for_derive(table)
    stats["host_span_ns"] = _host_span(needed)
    return table, needed, stats


def _decode_range_for_parent(
    job: tuple[int, int, str, str, int], encode: Optional[bool]
) -> tuple[EncodedRows | bytes, bytes, dict]:
    """_decode_range in a worker process, its tables made ready to cross to the parent: the event table
    encoded as the capture file's row groups (`encode`: see _Job; what the parent appends to the file),
    else packed as LZ4 Arrow IPC (much smaller than a pickled table: most columns are mostly null).
    The part derive_steps and sanity need always travels packed (the parent keeps it)."""
    table, needed, stats = _decode_range(job)
    first = encode_rows(table, part=encode) if encode is not None else _pack(table)
    return first, _pack(needed), stats


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def _pack(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _unpack(packed: bytes) -> pa.Table:
    return pa.ipc.open_stream(packed).read_all()


def _decode_ranges(
    buf,
    ranges: list[tuple[int, int]],
    *,
    unit: str,
    where: str,
    rank: int,
    encode: Optional[bool] = None,
    digest: Optional[_Digest] = None,
    parallel: bool = True,
    display: str = "",
) -> Iterator[tuple[pa.Table | EncodedRows, pa.Table, dict]]:
    """Decode each range of whole events, in order; in worker processes when there are several.

    At most `pool.window(workers)` chunks are in flight (tracekit.data.pool): a decoded table waits (in
    the pipe, encoded or packed) only until the parent has taken it, so memory stays bounded by the
    chunk size. With
    `encode` (see _Job), the pool's workers yield each event table as EncodedRows. A `digest` is
    computed by the pool, when there is one, beside the chunks. Without `parallel`, or when the ranges
    hold less than half of CHUNK_BYTES, every range is decoded in this process (tables, not encoded).
    `display`: the file as the user named it (what a worker that dies was decoding)."""
    jobs = [(a, b, unit, where, rank) for a, b in ranges]
    # Events that fit in half a chunk are decoded here: forking and feeding a pool costs more CPU than
    # the second core gains (benchmarks/RESULTS.md).
    small = sum(b - a for a, b in ranges) < CHUNK_BYTES // 2
    n = min(_pool.workers(), len(jobs)) if parallel and not small else 1
    _SHARED["buf"] = buf
    try:
        if n <= 1 or not _pool.can_fork():
            for job in jobs:
                yield _decode_range(job)
            return
        _keep_heap_pages()
        yield from _decode_in_pool(jobs, n, encode=encode, digest=digest, name=display or Path(where).name)
    finally:
        _SHARED.clear()


def _decode_in_pool(
    jobs: list[tuple], n: int, encode: Optional[bool], digest: Optional[_Digest], name: str
) -> Iterator[tuple[pa.Table | EncodedRows, pa.Table, dict]]:
    """The ranges decoded by `n` workers of the pool (tracekit.data.pool), the digest beside them;
    `name`: the file's, for the message of a worker that dies."""
    with _pool.ForkPool(n) as pool:
        if digest is not None:
            digest.start_in(pool, name)
        chunks = pool.map(
            functools.partial(_decode_range_for_parent, encode=encode), jobs, name=lambda job: name
        )
        for first, needed, stats in chunks:
            yield first if isinstance(first, EncodedRows) else _unpack(first), _unpack(needed), stats
        if digest is not None:
            digest.collect()


# Arrow's memory pool: jemalloc (tracekit.data.arrow.prefer_jemalloc; the forked workers inherit it).
_prefer_jemalloc = _arrow.prefer_jemalloc


def _keep_heap_pages() -> None:
    """glibc: serve allocations up to 32 MiB from the heap and keep freed heap memory, so each chunk's
    lists reuse the previous chunk's pages instead of mapping fresh ones (fewer page faults in the
    workers, which inherit this at fork). A no-op without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _with_rank(batch: pa.RecordBatch, rank: int) -> pa.Table:
    """An EVENT_SCHEMA batch → a schema.SCHEMA table (kind=event, rank)."""
    n = batch.num_rows
    zeros = _arrow.zero_buffer(n)  # shared by the null columns
    arrays = []
    for field in SCHEMA:
        if field.name == "kind":
            arrays.append(_arrow.dictionary(np.zeros(n, np.int32), [KIND_EVENT]))
        elif field.name == "rank":
            arrays.append(_arrow.from_numpy(np.full(n, rank, np.int32)))
        elif field.name in batch.schema.names:
            arrays.append(batch.column(field.name))
        else:
            arrays.append(_arrow.nulls(n, field.type, zeros))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
