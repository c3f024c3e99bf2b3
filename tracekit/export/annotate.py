"""The annotated trace: the original Chrome trace plus a track of idle gaps, each with its cause and evidence.

For every device the analysis found idle, one more thread appears in the device's process (next to its
streams), named ``tracekit idle gaps``. Each idle gap is an ``X`` slice named ``idle: <cause>`` (its
dominant cause) whose args hold the evidence: the sync call, its op and the user source line for a sync
drain, the DataLoader iterator for dataloader time, the kernel that ended the gap, and what the host thread
was doing during the gap (µs per state). A gap whose time splits over several causes holds one nested
slice per cause piece. The original events are copied byte for byte (the ``traceEvents`` array is spliced,
not re-encoded), so every viewer that opened the trace opens the annotated one: TensorBoard's trace view,
Perfetto, chrome://tracing.

The gaps and their causes come from `tracekit.api.annotate`, the analysis of `tracekit analyze` with all gaps
kept (not only the longest), so the track shows exactly what `tracekit analyze` reports.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

import msgspec
import numpy as np

from tracekit.analysis.causes import CAUSE_ROWS
from tracekit.analysis.model import IdleGap, Report
from tracekit.data.store import Capture, atomic_path, file_digest, source_digest
from tracekit.errors import InputNotFound, TraceFormatError, TracekitError

TRACK_NAME = "tracekit idle gaps"
CATEGORY = "tracekit_idle"
# Catapult's reserved colour names (Perfetto ignores `cname` and colours by name).
COLOURS = {c.name: c.trace_colour for c in CAUSE_ROWS}


@dataclass(frozen=True)
class Annotated:
    """What `annotate` wrote: the output, the trace it annotated and the number of gaps per cause."""

    output: Path
    source: Path
    gaps: int
    gaps_by_cause: dict[str, int]


def trace_of(capture_path: Path) -> Path:
    """The one trace file behind CAPTURE: a trace file, a run folder with one trace, or a capture (a
    .parquet file or a capture folder) whose source trace lies where `tracekit capture` put it (checked
    by its digest)."""
    from tracekit.data.store import is_capture_folder, read_meta
    from tracekit.parse.parser import PARQUET_MAGIC, find_trace_files

    path = Path(capture_path)
    if not path.exists():
        raise InputNotFound(f"{path}: no such file or folder")
    is_capture = is_capture_folder(path)
    if path.is_file():
        with open(path, "rb") as fh:
            is_capture = fh.read(4) == PARQUET_MAGIC
    if is_capture:
        sources = read_meta(path).get("sources") or []
        if len(sources) != 1:
            raise TracekitError(
                f"{path}: a capture of {len(sources)} trace files; annotate one trace file at a time "
                "(name it: tracekit annotate RUN/<file>.pt.trace.json.gz -o ...)"
            )
        src = sources[0]
        found = path.parent / src["path"]
        recorded = source_digest(src)
        if not found.is_file() or recorded is None or file_digest(found, recorded[0]) != recorded[1]:
            raise InputNotFound(
                f"{path}: its trace {src['path']} is not at {found} (or has changed); "
                "annotate the trace file itself: tracekit annotate TRACE -o ..."
            )
        return found
    files = find_trace_files([path])
    if len(files) != 1:
        names = ", ".join(Path(p).name for p, _ in files[:4])
        raise TracekitError(
            f"{path}: holds {len(files)} trace files ({names}...); annotate one at a time: "
            f"tracekit annotate {path}/<file> -o ..."
        )
    return Path(files[0][0])  # a local folder's file


def write_annotated(
    trace: Path, capture: Capture, report: Report, output: Path, *, replace: bool = True
) -> Annotated:
    """Write `output`: `trace` (parsed as `capture`, analysed as `report` with all its gaps kept) plus
    the idle-gap track (gzip when it ends .gz). `tracekit.api.annotate` composes it."""
    if report.cpu_only:
        raise TracekitError(
            f"{trace}: a CPU-only trace (no kernels, memcpys or memsets): there are no GPU idle gaps to "
            "annotate; `tracekit analyze` shows what the host did in each step"
        )
    unit = capture.traces[0].get("time_unit", "us")
    events = list(idle_events(report, capture, unit))
    data = splice(trace, events)
    with atomic_path(output, replace=replace) as tmp:
        if output.name.endswith(".gz"):
            with gzip.open(tmp, "wb", compresslevel=6) as fh:
                fh.write(data)
        else:
            tmp.write_bytes(data)
    by_cause: dict[str, int] = {}
    for g in report.top_gaps:
        by_cause[g.cause] = by_cause.get(g.cause, 0) + 1
    return Annotated(output=output, source=trace, gaps=len(report.top_gaps), gaps_by_cause=by_cause)


# -- the track -------------------------------------------------------------------------------------------


def _ts(ns: int, unit: str) -> msgspec.Raw:
    """A timestamp in the trace's own unit, as exact decimal text (µs with three decimals)."""
    text = str(ns) if unit == "ns" else str(Decimal(ns).scaleb(-3))
    return msgspec.Raw(text.encode())


def evidence(gap: IdleGap, report: Report) -> str:
    """One line saying why the device was idle in `gap`."""
    if gap.cause == "sync" and gap.sync is not None:
        s = gap.sync
        return f"sync drain: after {s.call} in {s.op or '-'} at {s.source or '-'}"
    if gap.cause == "dataloader":
        it = report.dataloader.iterator if report.dataloader else None
        return f"host thread in DataLoader {it or '?'}.__next__"
    if gap.cause == "queued":
        return f"work already queued: {gap.next_kernel or 'the next kernel'} was launched before the gap"
    states = ", ".join(
        f"{k} {v / 1e3:.1f} µs" for k, v in sorted(gap.slices_ns.items(), key=lambda kv: -kv[1])
    )
    return f"host thread: {states}" if states else gap.cause


def _gap_args(gap: IdleGap, report: Report) -> dict[str, Any]:
    args: dict[str, Any] = {
        "cause": gap.cause,
        "evidence": evidence(gap, report),
        "step": gap.step,
        "rank": gap.rank,
        "device": gap.device,
        "idle_us": gap.dur_ns / 1e3,
        "host_us": {k: v / 1e3 for k, v in gap.slices_ns.items()},
        "next_kernel": gap.next_kernel,
    }
    if gap.sync is not None:
        args.update(sync_call=gap.sync.call, sync_op=gap.sync.op, sync_source=gap.sync.source)
    if gap.cause == "dataloader" and report.dataloader is not None:
        args["dataloader_iterator"] = report.dataloader.iterator
    return args


def _device_tracks(capture: Capture, report: Report) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, device) → (pid, tid) of the idle track: the pid its kernels use, a tid no stream uses."""
    t = capture.table.select(["kind", "cat", "rank", "device", "pid", "tid"]).to_pandas()
    t = t[(t["kind"] == "event") & t["pid"].notna()]
    out = {}
    for d in report.devices:
        acts = t[(t["rank"] == d.rank) & (t["device"] == d.device) & (t["cat"] == "kernel")]
        pid = int(acts["pid"].mode().iloc[0]) if len(acts) else d.device
        tids = t.loc[t["pid"] == pid, "tid"].dropna()
        tid = int(tids.max()) + 1 if len(tids) else 1
        out[(d.rank, d.device)] = (pid, tid)
    return out


def idle_events(report: Report, capture: Capture, unit: str) -> Iterator[dict[str, Any]]:
    """The Chrome-trace events of the idle track: metadata, one slice per gap, nested cause pieces."""
    tracks = _device_tracks(capture, report)
    pieces = report.idle_intervals
    for (rank, device), (pid, tid) in sorted(tracks.items()):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": TRACK_NAME}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": -1}}
        gaps = sorted((g for g in report.top_gaps if (g.rank, g.device) == (rank, device)), key=_start)
        if pieces is not None and len(pieces):
            mine = pieces[(pieces["rank"] == rank) & (pieces["device"] == device)].sort_values("ts_ns")
            p_ts = mine["ts_ns"].to_numpy(np.int64)
            p_dur = mine["dur_ns"].to_numpy(np.int64)
            p_cause = mine["cause"].to_numpy(object)
        else:
            p_ts = p_dur = np.zeros(0, np.int64)
            p_cause = np.zeros(0, object)
        for g in gaps:
            yield {
                "ph": "X",
                "cat": CATEGORY,
                "name": f"idle: {g.cause}",
                "pid": pid,
                "tid": tid,
                "ts": _ts(g.start_ns, unit),
                "dur": _ts(g.dur_ns, unit),
                "cname": COLOURS.get(g.cause, "grey"),
                "args": _gap_args(g, report),
            }
            lo = np.searchsorted(p_ts, g.start_ns, side="left")
            hi = np.searchsorted(p_ts, g.start_ns + g.dur_ns, side="left")
            if hi - lo <= 1:
                continue  # one cause over the whole gap: the gap slice says it all
            for ts, dur, cause in zip(p_ts[lo:hi], p_dur[lo:hi], p_cause[lo:hi]):
                yield {
                    "ph": "X",
                    "cat": CATEGORY,
                    "name": str(cause),
                    "pid": pid,
                    "tid": tid,
                    "ts": _ts(int(ts), unit),
                    "dur": _ts(int(dur), unit),
                    "cname": COLOURS.get(str(cause), "grey"),
                    "args": {"cause": str(cause), "step": g.step, "idle_us": int(dur) / 1e3},
                }


def _start(g: IdleGap) -> int:
    return g.start_ns


# -- writing ---------------------------------------------------------------------------------------------


def splice(trace: Path, events: list[dict[str, Any]]) -> bytes:
    """The trace's JSON with `events` appended to its traceEvents array; original bytes kept as they are."""
    from tracekit.parse.decode import read_trace_bytes

    buf, gz_damage = read_trace_bytes(trace)
    if gz_damage:
        raise TraceFormatError(f"{trace}: {gz_damage}; annotate needs a complete trace")
    encoder = msgspec.json.Encoder()
    extra = b",".join(encoder.encode(e) for e in events)
    try:
        if bytes(memoryview(buf)[:64]).lstrip().startswith(b"["):  # the JSON Array Format
            return _append(bytes(buf), extra, trace)
        top = msgspec.json.decode(buf, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"{trace}: not valid JSON ({exc}); annotate needs a complete trace") from None
    if "traceEvents" not in top:
        raise TraceFormatError(f"{trace}: JSON, but not a Chrome trace (no 'traceEvents' key)")
    top["traceEvents"] = msgspec.Raw(_append(bytes(top["traceEvents"]), extra, trace))
    return encoder.encode(top)


def _append(array: bytes, extra: bytes, trace: Path) -> bytes:
    body = array.rstrip()
    if not body.endswith(b"]"):
        raise TraceFormatError(f"{trace}: 'traceEvents' is not a JSON array")
    body = body[:-1].rstrip()
    if not extra:
        return body + b"]"
    sep = b"" if body.endswith(b"[") else b","
    return body + sep + extra + b"]"
