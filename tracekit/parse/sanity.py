"""What a parsed trace says that no profiler writes: checked once per parse, on the rows the derived
rows are made from (`derive.needed_for_derive`: complete events of the step, `cpu_op` and device
categories, DERIVE_COLUMNS) and the derived steps. A trace whose figures would be wrong whatever
tracekit did is refused (TraceFormatError, one line naming what was seen); one whose figures stay right
but that holds something odd gets a warning, kept in its trace entry (`warnings`) so that every report
of the capture repeats it (docs/QUIRKS.md, the fault table).

    refused  the event list repeated (half the events or more are exact copies of another): every
             figure would count twice (two files of one rank that overlap are refused for this reason)
    refused  a step number repeated on the step thread (ProfilerStep#5 eight times): the profiler
             numbers each step once, and diff and whatif match steps by number
    refused  a step span with a negative or zero duration (or none): its step cannot be placed (zero-
             length steps beside 1,800 kernels were "0 steps ... CPU-only capture")
    warned   an event whose time is impossible (derive.impossible_rows: it ends long after, or starts long
             before, anything else the rank recorded): left out of every figure, and named
    refused  device activity more than MAX_DEVICE_DRIFT_NS after the host's last event (or before its
             first): the device clock is not the host's (one such kernel made whatif's observed step
             125,000,000 ms)
    warned   steps that overlap by more than STEP_OVERLAP_TOLERANCE_NS: time in both is counted in both
    warned   host ops (cpu_op) with a negative duration: read as empty
    warned   device activity without a device id (args.device beyond int32, or not a number): left out
             of the busy time
    warned   device activities that start more than STREAM_OVERLAP_TOLERANCE_NS before an earlier one on
             their (device, stream) ends: a stream runs its work one after another, so a merged or
             damaged trace. Busy and idle time are unions and stay right; the kernel statistics (time
             per kernel, per step) count the overlapped time twice. Not counted: activities of one
             CUDA graph launch (one correlation id: a graph's branches run at once, yet CUPTI puts them
             all on the stream it was launched on)
    warned   some events (DUPLICATE_WARN_FRACTION or more) exact copies of another
    warned   device activities of length 0 (ZERO_LENGTH_WARN_FRACTION or more): no busy time

All of it is vectorised: it runs on every parse, beside derive_steps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracekit.data import arrow as _arrow
from tracekit.data.schema import CAT_CPU_OP, CAT_USER_ANNOTATION, DEVICE_ACTIVITY_CATS, STEP_NAME
from tracekit.errors import TraceFormatError
from tracekit.parse.derive import Frame, impossible_rows, judged_rows

DUPLICATE_REFUSE_FRACTION = 0.5  # a repeated event list: every event twice
# Real traces hold a few identical events (HTA's control trace, integer µs: 6 of 50,245 nested
# `aten::zeros` with equal bounds): a warning only from 1 % up.
DUPLICATE_WARN_FRACTION = 0.01
ZERO_LENGTH_WARN_FRACTION = 0.01  # no trace under fixtures/ holds one
STEP_OVERLAP_TOLERANCE_NS = 1_000  # Kineto's µs rounding lets consecutive steps touch within a µs
MAX_DEVICE_DRIFT_NS = 3_600 * 10**9  # an hour: far beyond any queue of device work
# Same-stream overlaps in real traces (benchmarks/stream_overlaps.py over fixtures/ and the HTA traces):
# up to 6.75 µs between cuDNN kernels on the H200 (fixtures/h200_default/resnet_loader: an
# `init_device_workspace_kernel` launched by cudaLaunchKernelExC starts before the dgrad kernel ahead of
# it ends, programmatic dependent launch) and 2 µs in integer-µs traces (HTA rank0: a copy after a
# kernel); CUDA graph replays up to 13 µs (HTA test), exempt by their one correlation id.
STREAM_OVERLAP_TOLERANCE_NS = 10_000

_DUP_KEYS = ("cat", "name", "pid", "tid", "ts_ns", "dur_ns", "device")


def check(needed: pa.Table | Frame, steps: pa.Table, traces: list[dict]) -> None:
    """The checks above for each rank of a parse (`steps`: the derived step rows; `needed` may be the
    Frame the derived rows were made from, whose columns are then converted once for both). Raises
    TraceFormatError for a refusal; each rank's warnings go into its first trace entry."""
    frame = needed if isinstance(needed, Frame) else Frame(needed)
    if frame.num_rows == 0:
        return
    first: dict[int, dict] = {}
    for t in traces:
        first.setdefault(int(t.get("rank", 0)), t)
    rank = frame.ints("rank")
    step_rank = _arrow.values(steps.column("rank")) if steps.num_rows else np.zeros(0, np.int64)
    one_rank = rank.min() == rank.max()  # a parse's usual case: no grouping, no copy
    for r in rank[:1] if one_rank else _arrow.distinct(rank):
        entry = first.get(int(r))
        where = entry["source"] if entry else f"rank {int(r)}"
        mine = frame if one_rank else Frame(_arrow.filter_rows(frame.table, rank == r))
        warnings = check_rank(mine, _arrow.filter_rows(steps, step_rank == r), where)
        if warnings and entry is not None:
            entry["warnings"] = entry.get("warnings", []) + warnings


def check_rank(needed: pa.Table | Frame, steps: pa.Table, where: str) -> list[str]:
    """The checks for one rank's rows (`where` names its trace in messages); returns the warnings."""
    frame = needed if isinstance(needed, Frame) else Frame(needed)
    late = impossible_rows(frame)
    host = frame.mask("cat", lambda v: v in (CAT_CPU_OP, CAT_USER_ANNOTATION)) & ~late
    device = frame.mask("cat", lambda v: v in DEVICE_ACTIVITY_CATS) & ~late
    warnings = _impossible(frame, late)
    warnings += _duplicates(frame, host | device, where)
    warnings += _steps(steps, where)
    dur = frame.ints("dur_ns")
    negative = int((frame.mask("cat", lambda v: v == CAT_CPU_OP) & (dur < 0)).sum())
    if negative:
        warnings.append(f"{negative:,} host op(s) with a negative duration, read as empty")
    no_id = int((device & ~frame.present("device")).sum())
    if no_id:
        warnings.append(
            f"{no_id:,} device activit{'y' if no_id == 1 else 'ies'} without a usable device id "
            "(args.device beyond int32, or not a number): left out of the busy time"
        )
    warnings += _zero_length(frame, device)
    warnings += _stream_overlaps(frame, device)
    _device_drift(frame, host, device, where)
    return warnings


def _impossible(frame: Frame, late: np.ndarray) -> list[str]:
    """Events whose time is impossible (derive.impossible_rows): named, and left out of every figure."""
    n = int(late.sum())
    if not n:
        return []
    ts, dur = frame.ints("ts_ns"), np.maximum(frame.ints("dur_ns"), 0)
    rest = judged_rows(frame) & ~late
    first, last = (int(ts[rest].min()), int(ts[rest].max())) if rest.any() else (0, 0)
    away = np.maximum(first - ts, ts + dur - last)  # how far each lies outside the others' starts
    i = int(np.flatnonzero(late)[np.argmax(away[late])])
    name = frame.strings("name", np.array([i]))[0] or "?"
    name = name if len(name) <= 60 else name[:59] + "…"
    cat = frame.strings("cat", np.array([i]))[0]
    if ts[i] < first:
        where = f"starting {_human_ns(first - int(ts[i]))} before the rank's other events"
    elif ts[i] > last:
        where = f"starting {_human_ns(int(ts[i]) - last)} after the rank's other events start"
    else:
        where = f"{_human_ns(int(dur[i]))} long where the rank's other events start within "
        where += _human_ns(last - first)
    return [
        f"{n:,} event{'s' if n > 1 else ''} with an impossible time (most: {name} ({cat}), {where}): a "
        "damaged trace; left out of every figure"
    ]


def _human_ns(ns: int) -> str:
    for unit, size in (("h", 3_600 * 10**9), ("min", 60 * 10**9), ("s", 10**9)):
        if ns >= size:
            return f"{ns / size:,.1f} {unit}"
    return f"{ns / 1e6:.3f} ms"


def _duplicates(frame: Frame, rows: np.ndarray, where: str) -> list[str]:
    """Exact copies among the step, op and device rows: first by a key of their numbers, then, when the
    key says there may be enough to matter, exactly."""
    n = int(rows.sum())
    if n < 2:
        return []
    key = np.zeros(n, dtype=np.uint64)
    for i, col in enumerate(("pid", "tid", "ts_ns", "dur_ns", "device")):
        key = key * np.uint64(1_000_003 + 2 * i) + frame.ints(col)[rows].astype(np.uint64)
    key.sort()  # a sort, not a hash table: these keys hashed many times slower (numpy's unique, pyarrow's)
    copies = int((key[1:] == key[:-1]).sum())
    if copies < DUPLICATE_WARN_FRACTION * n:
        return []
    table = frame.table.filter(_arrow.bools(rows)).select(list(_DUP_KEYS))
    for i, f in enumerate(table.schema):  # chunks of one column may hold different dictionaries
        if pa.types.is_dictionary(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.string()))
    copies = n - table.group_by(list(_DUP_KEYS), use_threads=False).aggregate([]).num_rows
    if copies >= DUPLICATE_REFUSE_FRACTION * n:
        raise TraceFormatError(
            f"{where}: {copies:,} of its {n:,} events are exact copies of another (every field equal): "
            "the event list is repeated (a file merged with itself?) and every figure would count "
            "twice; remove the copies"
        )
    if copies >= DUPLICATE_WARN_FRACTION * n:
        return [f"{copies:,} of {n:,} events are exact copies of another (counted as they are)"]
    return []


def _steps(steps: pa.Table, where: str) -> list[str]:
    """A rank's ProfilerStep rows: numbers once each, durations not negative, no overlap."""
    if steps.num_rows == 0:
        return []
    names = steps.column("name").to_pylist()
    ts, dur = _arrow.values(steps.column("ts_ns")), _arrow.values(steps.column("dur_ns"))
    # by number: the steps found without ProfilerStep spans (parse.iterations) share their marker's name
    numbers = _arrow.values(steps.column("step")).tolist()
    counts: dict[int, int] = {}
    for number in numbers:
        counts[number] = counts.get(number, 0) + 1
    number, k = max(counts.items(), key=lambda x: x[1])
    name = names[numbers.index(number)]
    if k > 1:
        raise TraceFormatError(
            f"{where}: step {name} {k} times on the step thread (the profiler numbers each step once; "
            "analysis.steps says the same of a rank's files): its steps cannot be told apart, and diff "
            "and whatif match steps by number; fix the step names"
        )
    if (dur < 0).any():
        i = int(np.flatnonzero(dur < 0)[0])
        raise TraceFormatError(
            f"{where}: the step span {names[i]} has a negative duration ({dur[i] / 1e6:.3f} ms): a "
            "damaged trace, whose steps cannot be placed"
        )
    # the profiler's ProfilerStep spans: a missing `dur` reads as 0, and a real step lasts the profiler's
    # µs (not the one step of a trace without steps, nor the iterations parse.iterations found: those
    # are windows between events, and one of a zero-length event may last 0)
    spans = np.array([STEP_NAME.match(n) is not None for n in names])
    if (spans & (dur == 0)).any():
        zero = np.flatnonzero(spans & (dur == 0))
        raise TraceFormatError(
            f"{where}: {zero.size} of its {len(dur)} step spans ({names[int(zero[0])]} first) have no "
            "duration (0, or `dur` missing or unreadable): a damaged trace, whose steps cannot be placed"
        )
    order = np.argsort(ts, kind="stable")
    overlap = (ts + dur)[order][:-1] - ts[order][1:]
    bad = np.flatnonzero(overlap > STEP_OVERLAP_TOLERANCE_NS)
    if not bad.size:
        return []
    i = int(bad[np.argmax(overlap[bad])])
    return [
        f"{bad.size} step(s) overlap the next one (most: {names[order[i]]} and {names[order[i + 1]]}, "
        f"by {overlap[i] / 1e6:.3f} ms); time in both is counted in both"
    ]


def stream_overlaps(frame: Frame, device: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the device activities `device` (a mask) with a device, a stream and a duration, sorted by
    (device, stream, start): (their row indices, how far each starts before the latest end of the
    earlier ones on its stream in ns (0 where it does not; the first of a stream gets 0), whether the
    activity that ends latest is of the same CUDA graph launch: the same correlation id)."""
    # The stream is read as the tid: Kineto writes a device activity's stream as its tid (and as
    # args.stream, the `stream` column: equal in every trace of fixtures/ and the HTA traces), and the
    # tid is already among the rows kept for derive (one column less to carry through a parse).
    dur = frame.ints("dur_ns")
    rows = np.flatnonzero(device & frame.present("device") & frame.present("tid") & (dur > 0))
    overlap, same_launch = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
    if len(rows) < 2:
        return rows, overlap, same_launch
    dev, stream, ts = frame.ints("device")[rows], frame.ints("tid")[rows], frame.ints("ts_ns")[rows]
    order = np.lexsort((ts, stream, dev))
    rows, dev, stream, ts = rows[order], dev[order], stream[order], ts[order]
    end = ts + dur[rows]
    corr = np.where(frame.present("correlation")[rows], frame.ints("correlation")[rows], -1)
    first = np.flatnonzero(np.r_[True, (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])])
    for a, b in zip(first, np.r_[first[1:], len(rows)]):
        if b - a < 2:
            continue
        reach = np.maximum.accumulate(end[a:b])
        # the activity that set the reach: the latest one whose end is the running maximum (it rises there)
        who = a + np.maximum.accumulate(np.where(end[a:b] == reach, np.arange(b - a), 0))
        overlap[a + 1 : b] = np.maximum(reach[:-1] - ts[a + 1 : b], 0)
        same_launch[a + 1 : b] = (corr[a + 1 : b] >= 0) & (corr[a + 1 : b] == corr[who[:-1]])
    return rows, overlap, same_launch


def _zero_length(frame: Frame, device: np.ndarray) -> list[str]:
    """Device activities of length 0 (a trace in whole µs rounds a sub-µs kernel down to 0; a `dur`
    missing reads as 0): none of their time is busy time."""
    n = int(device.sum())
    zero = int((device & (frame.ints("dur_ns") == 0)).sum())
    if not zero or zero < ZERO_LENGTH_WARN_FRACTION * n:
        return []
    return [
        f"{zero:,} of {n:,} device activities last 0 µs (a trace in whole µs rounds sub-µs kernels "
        "down to 0): their time is not busy time, so the GPU utilization is understated"
    ]


def _stream_overlaps(frame: Frame, device: np.ndarray) -> list[str]:
    rows, overlap, same_launch = stream_overlaps(frame, device)
    bad = np.flatnonzero((overlap > STREAM_OVERLAP_TOLERANCE_NS) & ~same_launch)
    if not bad.size:
        return []
    i = int(bad[np.argmax(overlap[bad])])
    name = frame.strings("name", rows[i : i + 1])[0] or "?"
    name = name if len(name) <= 60 else name[:59] + "…"
    dev, stream = int(frame.ints("device")[rows[i]]), int(frame.ints("tid")[rows[i]])
    return [
        f"{bad.size:,} device activit{'y starts' if bad.size == 1 else 'ies start'} more than "
        f"{STREAM_OVERLAP_TOLERANCE_NS / 1e3:g} µs before an earlier one on its stream ends (most: "
        f"{name} on device {dev} stream {stream}, by {overlap[i] / 1e6:.3f} ms): a stream runs one at a "
        "time, so the trace is merged or damaged. Busy and idle time (unions) stay right; the kernel "
        "statistics count the overlapped time twice"
    ]


def _device_drift(frame: Frame, host: np.ndarray, device: np.ndarray, where: str) -> None:
    """Device activity hours away from every host event: not the host's clock."""
    if not host.any() or not device.any():
        return
    ts, end = frame.ints("ts_ns"), frame.ints("ts_ns") + np.maximum(frame.ints("dur_ns"), 0)
    first, last = int(ts[host].min()), int(end[host].max())
    late = int(ts[device].max()) - last
    early = first - int(end[device].min())
    if max(late, early) <= MAX_DEVICE_DRIFT_NS:
        return
    where_ = "after the host's last event" if late >= early else "before the host's first event"
    raise TraceFormatError(
        f"{where}: device activity {max(late, early) / 3.6e12:.1f} hours {where_}: the device clock is "
        "not the host's (a damaged or hand-edited trace)"
    )
