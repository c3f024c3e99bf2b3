"""Rows the parser derives from the raw events (DESIGN.md, "Words"), stored beside them in the capture.

- ``step``: one row per ``ProfilerStep#N`` span (cat ``user_annotation``) on the host thread that owns
  them. The ``gpu_user_annotation`` copies Kineto puts on the device timeline are never steps. A rank
  with no step span gets one step (step 0, name ``trace``) spanning that rank's events.
- ``busy``: per rank and device, the maximal intervals of the union of kernel / memcpy / memset activity
  over all streams::

      stream 7   [====)   [==)
      stream 9      [=====)       [=)
      busy       [========)   ... [=)     ← touching or overlapping intervals merge

- ``dispatch_gap``: per rank and host thread, the time between consecutive top-level ``cpu_op`` events
  (top-level = not starting inside another ``cpu_op`` of the same thread), clipped to the step windows
  of the rank; each piece carries the step it lies in, pieces outside every step are dropped::

      cpu_op     [aten::mm  )      [aten::add)
                   [nested)
      gap                   [-----)             ← one dispatch_gap row

All functions take the table of raw events (``kind == "event"``, schema.SCHEMA columns) and return a
table in schema.SCHEMA holding only derived rows.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pyarrow as pa

from tracekit.schema import (
    CAT_CPU_OP,
    CAT_USER_ANNOTATION,
    DEVICE_ACTIVITY_CATS,
    KIND_BUSY,
    KIND_DISPATCH_GAP,
    KIND_STEP,
    SCHEMA,
)

STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
TRACE_STEP_NAME = "trace"  # the name of the one step of a trace without ProfilerStep spans


# The columns the derive functions read.
DERIVE_COLUMNS = ("rank", "ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "device")
_DERIVE_CATS = (CAT_USER_ANNOTATION, CAT_CPU_OP, *DEVICE_ACTIVITY_CATS)


def needed_for_derive(events: pa.Table) -> pa.Table:
    """The rows and columns of `events` that derive_rows needs (so a streamed parse keeps only these).

    Complete events of the step / cpu_op / device categories, plus the rows holding each rank's
    earliest start and latest end (a trace without steps gets one step spanning exactly those)."""
    mask = _dict_mask(events, "ph", lambda v: v == "X") & _dict_mask(
        events, "cat", lambda v: v in _DERIVE_CATS
    )
    timed = ~_dict_mask(events, "ph", lambda v: v == "M")
    rank, ts = _np(events, "rank"), _np(events, "ts_ns")
    end = ts + np.maximum(_np(events, "dur_ns"), 0)
    for r in np.unique(rank[timed]) if timed.any() else []:
        idx = np.flatnonzero(timed & (rank == r))
        mask[idx[np.argmin(ts[idx])]] = True
        mask[idx[np.argmax(end[idx])]] = True
    return events.select(list(DERIVE_COLUMNS)).filter(pa.array(mask))


def derive_rows(events: pa.Table) -> pa.Table:
    """All derived rows (steps, busy intervals, dispatch gaps) of a table of raw events."""
    steps = derive_steps(events)
    return pa.concat_tables([steps, derive_busy(events), derive_dispatch_gaps(events, steps)])


# ---------------------------------------------------------------------------------------------------


def derive_steps(events: pa.Table) -> pa.Table:
    """Step windows: ProfilerStep#N spans on their owning thread; else one step spanning the rank."""
    rank = _np(events, "rank")
    is_x = _dict_mask(events, "ph", lambda v: v == "X")
    is_step = is_x & _dict_mask(events, "cat", lambda v: v == CAT_USER_ANNOTATION)
    is_step &= _dict_mask(events, "name", lambda v: STEP_NAME.match(v) is not None)
    rows: dict[str, list] = {k: [] for k in ("rank", "pid", "tid", "ts_ns", "dur_ns", "name", "step")}
    idx = np.flatnonzero(is_step)
    names = events.column("name").take(pa.array(idx)).to_pylist() if len(idx) else []
    pid, tid = _np(events, "pid"), _np(events, "tid")
    ts, dur = _np(events, "ts_ns"), _np(events, "dur_ns")
    ranks = np.unique(rank) if len(rank) else np.array([], dtype=np.int64)
    for r in ranks:
        mine = [(i, n) for i, n in zip(idx, names) if rank[i] == r]
        if mine:
            # The owning thread: the one with most step spans (earliest first span on a tie).
            by_thread: dict[tuple[int, int], list[tuple[int, str]]] = {}
            for i, n in mine:
                by_thread.setdefault((int(pid[i]), int(tid[i])), []).append((i, n))
            owner = max(by_thread, key=lambda k: (len(by_thread[k]), -min(ts[i] for i, _ in by_thread[k])))
            for i, n in sorted(by_thread[owner], key=lambda x: ts[x[0]]):
                rows["rank"].append(int(r))
                rows["pid"].append(owner[0])
                rows["tid"].append(owner[1])
                rows["ts_ns"].append(int(ts[i]))
                rows["dur_ns"].append(int(dur[i]))
                rows["name"].append(n)
                rows["step"].append(int(STEP_NAME.match(n).group(1)))
            continue
        # No step spans: one step over the rank's timed events (metadata rows excluded).
        in_rank = (rank == r) & ~_dict_mask(events, "ph", lambda v: v == "M")
        if not in_rank.any():
            in_rank = rank == r
        start = int(ts[in_rank].min())
        end = int((ts[in_rank] + np.maximum(dur[in_rank], 0)).max())
        host = _busiest_host_thread(events, rank == r)
        rows["rank"].append(int(r))
        rows["pid"].append(host[0] if host else None)
        rows["tid"].append(host[1] if host else None)
        rows["ts_ns"].append(start)
        rows["dur_ns"].append(end - start)
        rows["name"].append(TRACE_STEP_NAME)
        rows["step"].append(0)
    return _rows(KIND_STEP, rows)


def _busiest_host_thread(events: pa.Table, in_rank: np.ndarray) -> tuple[int, int] | None:
    ops = in_rank & _dict_mask(events, "cat", lambda v: v == CAT_CPU_OP)
    if not ops.any():
        return None
    pid, tid = _np(events, "pid")[ops], _np(events, "tid")[ops]
    pairs, counts = np.unique(np.stack([pid, tid], axis=1), axis=0, return_counts=True)
    best = pairs[int(np.argmax(counts))]
    return int(best[0]), int(best[1])


# ---------------------------------------------------------------------------------------------------


def derive_busy(events: pa.Table) -> pa.Table:
    """Per rank and device, the maximal intervals of the union of device activity over all streams."""
    mask = _dict_mask(events, "ph", lambda v: v == "X")
    mask &= _dict_mask(events, "cat", lambda v: v in DEVICE_ACTIVITY_CATS)
    device_col = events.column("device")
    has_device = ~_np_null(device_col)
    mask &= has_device
    ts, dur = _np(events, "ts_ns")[mask], _np(events, "dur_ns")[mask]
    rank, device = _np(events, "rank")[mask], _np(events, "device")[mask]
    positive = dur > 0
    ts, end, rank, device = ts[positive], ts[positive] + dur[positive], rank[positive], device[positive]
    rows: dict[str, list] = {"rank": [], "device": [], "ts_ns": [], "dur_ns": []}
    if len(ts):
        order = np.lexsort((ts, device, rank))
        ts, end, rank, device = ts[order], end[order], rank[order], device[order]
        group_start = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (device[1:] != device[:-1])])
        bounds = np.r_[group_start, len(ts)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            starts, ends = union_intervals(ts[a:b], end[a:b])
            rows["rank"].extend([int(rank[a])] * len(starts))
            rows["device"].extend([int(device[a])] * len(starts))
            rows["ts_ns"].extend(starts.tolist())
            rows["dur_ns"].extend((ends - starts).tolist())
    return _rows(KIND_BUSY, rows)


def union_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The maximal intervals of the union of [start, end) intervals; touching intervals merge.

    `starts` must be sorted ascending."""
    if len(starts) == 0:
        return starts, ends
    running_end = np.maximum.accumulate(ends)
    # A new interval starts where the start lies beyond everything seen so far.
    new = np.r_[True, starts[1:] > running_end[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], running_end[last]


# ---------------------------------------------------------------------------------------------------


def derive_dispatch_gaps(events: pa.Table, steps: pa.Table) -> pa.Table:
    """Per rank and host thread: gaps between consecutive top-level cpu_ops, clipped to step windows."""
    mask = _dict_mask(events, "ph", lambda v: v == "X") & _dict_mask(events, "cat", lambda v: v == CAT_CPU_OP)
    rank, pid, tid = _np(events, "rank")[mask], _np(events, "pid")[mask], _np(events, "tid")[mask]
    ts, dur = _np(events, "ts_ns")[mask], _np(events, "dur_ns")[mask]
    rows: dict[str, list] = {k: [] for k in ("rank", "pid", "tid", "ts_ns", "dur_ns", "step")}
    if len(ts) == 0:
        return _rows(KIND_DISPATCH_GAP, rows)
    end = ts + np.maximum(dur, 0)
    # Sort by thread, then start, longer first: an op starting with its parent sorts after it.
    order = np.lexsort((-dur, ts, tid, pid, rank))
    rank, pid, tid, ts, end = rank[order], pid[order], tid[order], ts[order], end[order]
    new_thread = np.r_[True, (rank[1:] != rank[:-1]) | (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]
    bounds = np.r_[np.flatnonzero(new_thread), len(ts)]
    step_rank, step_start = _np(steps, "rank"), _np(steps, "ts_ns")
    step_end, step_no = step_start + _np(steps, "dur_ns"), _np(steps, "step")
    for a, b in zip(bounds[:-1], bounds[1:]):
        t_start, t_end = ts[a:b], end[a:b]
        covered = np.maximum.accumulate(t_end)
        # Top-level: starts at or after the end of everything before it on this thread.
        top = np.r_[True, t_start[1:] >= covered[:-1]]
        top_idx = np.flatnonzero(top)[1:]
        gap_start, gap_end = covered[top_idx - 1], t_start[top_idx]
        keep = gap_end > gap_start
        gap_start, gap_end = gap_start[keep], gap_end[keep]
        r = rank[a]
        in_rank = step_rank == r
        pieces = clip_to_windows(gap_start, gap_end, step_start[in_rank], step_end[in_rank])
        for s, e, w in zip(*pieces):
            rows["rank"].append(int(r))
            rows["pid"].append(int(pid[a]))
            rows["tid"].append(int(tid[a]))
            rows["ts_ns"].append(int(s))
            rows["dur_ns"].append(int(e - s))
            rows["step"].append(int(step_no[in_rank][w]))
    return _rows(KIND_DISPATCH_GAP, rows)


def clip_to_windows(
    starts: np.ndarray, ends: np.ndarray, win_start: np.ndarray, win_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intersect intervals with windows: (piece starts, piece ends, window index), non-empty pieces only."""
    empty = np.array([], dtype=np.int64)
    if len(starts) == 0 or len(win_start) == 0:
        return empty, empty, empty
    out_s, out_e, out_w = [], [], []
    for w in range(len(win_start)):
        s = np.maximum(starts, win_start[w])
        e = np.minimum(ends, win_end[w])
        ok = e > s
        out_s.append(s[ok])
        out_e.append(e[ok])
        out_w.append(np.full(int(ok.sum()), w, dtype=np.int64))
    s, e, w = np.concatenate(out_s), np.concatenate(out_e), np.concatenate(out_w)
    order = np.lexsort((w, s))
    return s[order], e[order], w[order]


# ---------------------------------------------------------------------------------------------------
# Column helpers (work on chunked, dictionary-encoded columns without decoding them)


def _dict_mask(table: pa.Table, column: str, predicate: Callable[[str], bool]) -> np.ndarray:
    """Rows whose (dictionary-encoded string) value satisfies `predicate`; nulls never do."""
    parts = []
    for chunk in table.column(column).chunks:
        if pa.types.is_dictionary(chunk.type):
            dictionary = chunk.dictionary.to_pylist()
            hits = np.array([v is not None and predicate(v) for v in dictionary] + [False], dtype=bool)
            indices = chunk.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
            parts.append(hits[indices])
        else:
            values = chunk.to_pylist()
            parts.append(np.array([v is not None and predicate(v) for v in values], dtype=bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _np(table: pa.Table, column: str) -> np.ndarray:
    """An integer column as int64 numpy (nulls as 0; callers mask them with `_np_null` when it matters)."""
    col = table.column(column)
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64)
    return col.fill_null(0).to_numpy().astype(np.int64, copy=False)


def _np_null(col: pa.ChunkedArray) -> np.ndarray:
    if col.num_chunks == 0:
        return np.zeros(0, dtype=bool)
    return col.is_null().to_numpy()


def _rows(kind: str, columns: dict[str, list]) -> pa.Table:
    n = len(next(iter(columns.values())))
    arrays = []
    for field in SCHEMA:
        if field.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()).dictionary_encode().cast(field.type))
        elif field.name in columns:
            values = columns[field.name]
            if pa.types.is_dictionary(field.type):
                arrays.append(pa.array(values, pa.string()).dictionary_encode().cast(field.type))
            else:
                arrays.append(pa.array(values, field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
