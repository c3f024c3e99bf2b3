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
  of the rank, minus the time the thread is blocked in ``backward()`` or fetching from a DataLoader
  (``dispatch_gap_pieces``, the one definition the analysis shares); each piece carries the step it
  lies in::

      cpu_op     [aten::mm  )      [aten::add)
                   [nested)
      gap                   [-----)             ← one dispatch_gap row

All functions take the table of raw events (``kind == "event"``, schema.SCHEMA columns) and return a
table in schema.SCHEMA holding only derived rows.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import numpy as np
import pyarrow as pa

from tracekit.data import arrow as _arrow
from tracekit.data.schema import (
    CAT_CPU_OP,
    CAT_USER_ANNOTATION,
    DEVICE_ACTIVITY_CATS,
    KIND_BUSY,
    KIND_DISPATCH_GAP,
    KIND_STEP,
    SCHEMA,
)

# At most 18 digits: a step number fits the int64 step column (a longer one is not a profiler's step
# span; 20 digits used to end in OverflowError).
STEP_NAME = re.compile(r"ProfilerStep#(\d{1,18})$")
TRACE_STEP_NAME = "trace"  # the name of the one step of a trace without ProfilerStep spans


# The columns the derive functions read.
# `correlation`: parse.sanity (activities overlapping on one stream: one CUDA graph launch or not).
DERIVE_COLUMNS = ("rank", "ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "device", "correlation")
_DERIVE_CATS = (CAT_USER_ANNOTATION, CAT_CPU_OP, *DEVICE_ACTIVITY_CATS)


def needed_for_derive(events: pa.Table) -> pa.Table:
    """The rows and columns of `events` that derive_rows needs (so a streamed parse keeps only these).

    Complete events of the step / cpu_op / device categories, plus the rows holding each rank's
    earliest start and latest end (a trace without steps gets one step spanning exactly those)."""
    frame = _frame(events)
    mask = frame.mask("ph", lambda v: v == "X") & frame.mask("cat", lambda v: v in _DERIVE_CATS)
    timed = ~frame.mask("ph", lambda v: v == "M")
    rank, ts = frame.ints("rank"), frame.ints("ts_ns")
    end = ts + np.maximum(frame.ints("dur_ns"), 0)
    if not timed.any():
        groups: list[np.ndarray] = []
    elif rank.min() == rank.max():  # one rank (a chunk of one file: the parse's case), no grouping
        groups = [np.flatnonzero(timed)]
    else:
        groups = [np.flatnonzero(timed & (rank == r)) for r in np.unique(rank[timed])]
    for idx in groups:
        mask[idx[np.argmin(ts[idx])]] = True
        mask[idx[np.argmax(end[idx])]] = True
    return _arrow.filter_rows(events.select(list(DERIVE_COLUMNS)), mask)


def derive_rows(events: pa.Table | Frame) -> pa.Table:
    """All derived rows (steps, busy intervals, dispatch gaps) of a table of raw events (or its Frame)."""
    frame = _frame(events)
    steps = derive_steps(frame)
    return pa.concat_tables([steps, derive_busy(frame), derive_dispatch_gaps(frame, steps)])


def write_derived_rows(
    events: pa.Table | Frame, write: Callable[[pa.Table], None], *, helper: bool = True
) -> pa.Table:
    """derive_rows(events), each part passed to `write` as soon as it is ready, in order (steps, busy,
    dispatch gaps); returns them all. With `helper`, the busy intervals are derived and written by a
    second thread while this one derives the dispatch gaps (numpy and the Parquet writer release the
    GIL), which shortens the last, single-core phase of a parse; a worker that is one of a pool of
    one per core (a job's files decoded a file per worker) gains nothing by it and does without."""
    frame = _frame(events)
    steps = derive_steps(frame)
    if not helper:
        write(steps)
        busy_rows = derive_busy(frame)
        write(busy_rows)
        gaps = derive_dispatch_gaps(frame, steps)
        write(gaps)
        return pa.concat_tables([steps, busy_rows, gaps])
    with ThreadPoolExecutor(1) as pool:

        def steps_and_busy() -> pa.Table:
            write(steps)
            busy = derive_busy(frame)
            write(busy)
            return busy

        busy = pool.submit(steps_and_busy)
        gaps = derive_dispatch_gaps(frame, steps)
        busy_rows = busy.result()
    write(gaps)
    return pa.concat_tables([steps, busy_rows, gaps])


# ---------------------------------------------------------------------------------------------------


def derive_steps(events: pa.Table | Frame) -> pa.Table:
    """Step windows: ProfilerStep#N spans on their owning thread; else one step spanning the rank."""
    frame = _frame(events)
    rank = frame.ints("rank")
    is_x = frame.mask("ph", lambda v: v == "X")
    is_step = is_x & frame.mask("cat", lambda v: v == CAT_USER_ANNOTATION)
    is_step &= frame.mask("name", lambda v: STEP_NAME.match(v) is not None)
    rows: dict[str, list] = {k: [] for k in ("rank", "pid", "tid", "ts_ns", "dur_ns", "name", "step")}
    idx = np.flatnonzero(is_step)
    names = frame.strings("name", idx)
    pid, tid = frame.ints("pid"), frame.ints("tid")
    ts, dur = frame.ints("ts_ns"), frame.ints("dur_ns")
    ranks = np.unique(rank) if len(rank) else np.array([], dtype=np.int64)
    for r in ranks:
        mine = [(int(i), n) for i, n in zip(idx, names) if rank[i] == r]
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
                rows["step"].append(_step_number(n))
            continue
        # No step spans: one step over the rank's timed events (metadata rows excluded).
        in_rank = (rank == r) & ~frame.mask("ph", lambda v: v == "M")
        if not in_rank.any():
            in_rank = rank == r
        start = int(ts[in_rank].min())
        end = int((ts[in_rank] + np.maximum(dur[in_rank], 0)).max())
        host = _busiest_host_thread(frame, rank == r)
        rows["rank"].append(int(r))
        rows["pid"].append(host[0] if host else None)
        rows["tid"].append(host[1] if host else None)
        rows["ts_ns"].append(start)
        rows["dur_ns"].append(end - start)
        rows["name"].append(TRACE_STEP_NAME)
        rows["step"].append(0)
    return _rows(KIND_STEP, rows)


def _step_number(name: str) -> int:
    """N of a step span's name `ProfilerStep#N` (derive_steps keeps only names that match)."""
    m = STEP_NAME.match(name)
    assert m is not None
    return int(m.group(1))


def _busiest_host_thread(frame: Frame, in_rank: np.ndarray) -> tuple[int, int] | None:
    ops = in_rank & frame.mask("cat", lambda v: v == CAT_CPU_OP)
    if not ops.any():
        return None
    pid, tid = frame.ints("pid")[ops], frame.ints("tid")[ops]
    pairs, counts = np.unique(np.stack([pid, tid], axis=1), axis=0, return_counts=True)
    best = pairs[int(np.argmax(counts))]
    return int(best[0]), int(best[1])


# ---------------------------------------------------------------------------------------------------


def derive_busy(events: pa.Table | Frame) -> pa.Table:
    """Per rank and device, the maximal intervals of the union of device activity over all streams."""
    frame = _frame(events)
    mask = frame.mask("ph", lambda v: v == "X")
    mask &= frame.mask("cat", lambda v: v in DEVICE_ACTIVITY_CATS)
    mask &= frame.present("device")
    ts, dur = frame.ints("ts_ns")[mask], frame.ints("dur_ns")[mask]
    rank, device = frame.ints("rank")[mask], frame.ints("device")[mask]
    positive = dur > 0
    ts, end, rank, device = ts[positive], ts[positive] + dur[positive], rank[positive], device[positive]
    out: dict[str, list[np.ndarray]] = {"rank": [], "device": [], "ts_ns": [], "dur_ns": []}
    if len(ts):
        order = start_order(ts, end, rank, device)
        ts, end, rank, device = ts[order], end[order], rank[order], device[order]
        group_start = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (device[1:] != device[:-1])])
        bounds = np.r_[group_start, len(ts)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            starts, ends = union_intervals(ts[a:b], end[a:b])
            out["rank"].append(np.full(len(starts), rank[a]))
            out["device"].append(np.full(len(starts), device[a]))
            out["ts_ns"].append(starts)
            out["dur_ns"].append(ends - starts)
    return _rows(KIND_BUSY, out)


def start_order(starts: np.ndarray, ends: np.ndarray, *groups: np.ndarray) -> np.ndarray:
    """The indices that sort intervals by `groups` (most significant first), then by start, longer
    first on equal starts, ties kept in input order: `np.lexsort((starts - ends, starts, *groups[::-1]))`.

    lexsort costs ~0.1 s per million rows and key even on sorted input; profiler events arrive nearly
    sorted by start, which a stable argsort (timsort) orders in ~2 ms per million. So: order by start,
    re-order only the runs of equal starts by length, then one stable pass per group key that is not
    constant (most traces have one rank, one process and few threads)."""
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    tied = np.flatnonzero(s[1:] == s[:-1])
    if len(tied):
        pos = np.unique(np.r_[tied, tied + 1])  # positions (in start order) inside a run of equal starts
        run = np.cumsum(np.r_[True, s[1:] != s[:-1]])[pos]
        sub = order[pos]
        order[pos] = sub[np.lexsort((starts[sub] - ends[sub], run))]
    for key in reversed(groups):
        if len(key) and key.min() != key.max():
            order = order[np.argsort(key[order], kind="stable")]
    return order


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


# The autograd engine runs each backward node inside a record_function of this name (torch ≥ 1.8).
ENGINE_OP_PREFIX = "autograd::engine::evaluate_function"
# The DataLoader iterator's fetch, a user_annotation such as
# `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (group 1: the iterator class).
DATALOADER_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__")


def derive_dispatch_gaps(events: pa.Table | Frame, steps: pa.Table) -> pa.Table:
    """Host dispatch gap rows (DESIGN.md "Host dispatch gaps"): per rank and host thread, the pieces
    `dispatch_gap_pieces` returns, each with the step it lies in. The analysis calls the same function,
    so its figures equal these rows. Threads that run autograd engine ops but own no step (the engine's
    device threads) run no Python between their ops and get no rows."""
    frame = _frame(events)
    is_x = frame.mask("ph", lambda v: v == "X")
    dl = is_x & frame.mask("cat", lambda v: v == CAT_USER_ANNOTATION)
    dl &= frame.mask("name", lambda v: DATALOADER_RE.match(v) is not None)
    dl_thread = np.stack([frame.ints(c)[dl] for c in ("rank", "pid", "tid")], axis=1)
    dl_start = frame.ints("ts_ns")[dl]
    dl_end = dl_start + np.maximum(frame.ints("dur_ns")[dl], 0)
    mask = is_x & frame.mask("cat", lambda v: v == CAT_CPU_OP)
    engine = frame.mask("name", lambda v: v.startswith(ENGINE_OP_PREFIX))[mask]
    rank, pid, tid = frame.ints("rank")[mask], frame.ints("pid")[mask], frame.ints("tid")[mask]
    ts, dur = frame.ints("ts_ns")[mask], frame.ints("dur_ns")[mask]
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "pid", "tid", "ts_ns", "dur_ns", "step")}
    if len(ts) == 0:
        return _rows(KIND_DISPATCH_GAP, out)
    end = ts + np.maximum(dur, 0)
    step_cols = Frame(steps)
    step_rank, step_start = step_cols.ints("rank"), step_cols.ints("ts_ns")
    step_end, step_no = step_start + step_cols.ints("dur_ns"), step_cols.ints("step")
    step_pid, step_tid = step_cols.ints("pid"), step_cols.ints("tid")
    step_threads = set(zip(step_rank.tolist(), step_pid.tolist(), step_tid.tolist()))
    # Sort by thread, then start, longer first: an op starting with its parent sorts after it.
    order = start_order(ts, end, rank, pid, tid)
    rank, pid, tid, ts, end, engine = (
        rank[order],
        pid[order],
        tid[order],
        ts[order],
        end[order],
        engine[order],
    )
    new_thread = np.r_[True, (rank[1:] != rank[:-1]) | (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]
    bounds = np.r_[np.flatnonzero(new_thread), len(ts)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        key = (int(rank[a]), int(pid[a]), int(tid[a]))
        is_step_thread = key in step_threads
        if engine[a:b].any() and not is_step_thread:
            continue
        in_rank = step_rank == key[0]
        ws, we, wstep = disjoint_windows(step_start[in_rank], step_end[in_rank], step_no[in_rank])
        bw_s, bw_e = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if is_step_thread:
            proc = (rank == key[0]) & (pid == key[1]) & engine
            split = ts[a:b][~engine[a:b] & top_level(ts[a:b], end[a:b])]
            bw_s, bw_e = backward_windows(ts[proc], end[proc], split)
        mine = np.all(dl_thread == np.array(key), axis=1) if len(dl_start) else np.zeros(0, bool)
        ex_s, ex_e = excluded_windows(bw_s, bw_e, dl_start[mine], dl_end[mine])
        w, s, e = dispatch_gap_pieces(ts[a:b], end[a:b], ws, we, ex_s, ex_e)
        out["rank"].append(np.full(len(s), key[0]))
        out["pid"].append(np.full(len(s), key[1]))
        out["tid"].append(np.full(len(s), key[2]))
        out["ts_ns"].append(s)
        out["dur_ns"].append(e - s)
        out["step"].append(wstep[w])
    return _rows(KIND_DISPATCH_GAP, out)


def disjoint_windows(
    starts: np.ndarray, ends: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step windows sorted by start, each cut at the next one's start, empty ones dropped (as the
    analysis makes them): (starts, ends, labels)."""
    order = np.argsort(starts, kind="stable")
    s, e, lab = starts[order], ends[order], labels[order]
    e = np.r_[np.minimum(e[:-1], s[1:]), e[-1:]]
    keep = e > s
    return s[keep], e[keep], lab[keep]


def top_level(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Mask of the ops of one thread, sorted by start, that start at or after the end of every op
    before them (not inside another op)."""
    if len(starts) == 0:
        return np.zeros(0, dtype=bool)
    covered = np.maximum.accumulate(ends)
    return np.r_[True, starts[1:] >= covered[:-1]]


def backward_windows(
    engine_starts: np.ndarray, engine_ends: np.ndarray, split_starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The intervals during which a thread is blocked in `backward()`: the autograd engine ops of its
    process (on the thread itself on CPU, on the engine's device threads on GPU), grouped into runs that
    no top-level non-engine op of the thread (`split_starts`) starts between; each run spans its first
    op's start to its last op's end::

        step thread   |- aten::sum -|  ...  backward() ...   |- aten::add_ -|
        engine ops                   |-ev-|  |-ev-| |--ev--|
        window                       [----------------------)

    Returns disjoint sorted (starts, ends)."""
    if len(engine_starts) == 0:
        z = np.zeros(0, np.int64)
        return z, z
    run = np.searchsorted(np.sort(split_starts), engine_starts, side="right")
    runs, inv = np.unique(run, return_inverse=True)
    lo = np.full(len(runs), np.iinfo(np.int64).max)
    hi = np.full(len(runs), np.iinfo(np.int64).min)
    np.minimum.at(lo, inv, engine_starts)
    np.maximum.at(hi, inv, engine_ends)
    return union_intervals(lo, hi)


def excluded_windows(
    bw_starts: np.ndarray, bw_ends: np.ndarray, dl_starts: np.ndarray, dl_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What a thread's dispatch gaps leave out: its backward windows and its DataLoader `__next__`
    spans (the fetch has its own figure, `dataloader`, and may sleep or wait for workers), as disjoint
    sorted intervals."""
    s = np.r_[bw_starts, dl_starts].astype(np.int64)
    e = np.r_[bw_ends, dl_ends].astype(np.int64)
    order = np.argsort(s, kind="stable")
    return union_intervals(s[order], e[order])


def dispatch_gap_pieces(
    op_starts: np.ndarray,
    op_ends: np.ndarray,
    win_starts: np.ndarray,
    win_ends: np.ndarray,
    excl_starts: np.ndarray,
    excl_ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE definition of host dispatch gaps on one thread (DESIGN.md), shared by the parser's derived
    rows and the analysis::

        cpu_op   |- aten::mm -|  gap  |- aten::add -|   ||  |- ev -| |- ev -|  gap  |- aten::relu -|
        step     [---------------------------------)   [---------------------------------------)
        pieces                 [-----)             [--)  [-)                 [-----)

    predicate: the intervals between consecutive top-level cpu_ops of the thread (`op_*`, any order),
    clipped to the disjoint sorted step windows (`win_*`; a gap crossing a step boundary keeps its
    pieces inside each window: Python before the step's first op and after its last is interpreter
    time of that step), minus `excl_*` (disjoint sorted; `excluded_windows`): the thread's backward
    windows (`backward_windows`: the autograd engine's time between its ops is framework, not Python)
    and its DataLoader fetches.
    Returns (window index, piece start, piece end), ordered by start."""
    z = np.zeros(0, np.int64)
    if len(op_starts) < 2 or len(win_starts) == 0:
        return z, z, z
    order = start_order(op_starts, op_ends)
    s, e = op_starts[order], op_ends[order]
    covered = np.maximum.accumulate(e)
    top = np.flatnonzero(top_level(s, e))[1:]
    gs, ge = covered[top - 1], s[top]
    keep = ge > gs
    gs, ge, _ = clip_to_windows(gs[keep], ge[keep], win_starts, win_ends)
    if len(excl_starts) and len(gs):
        free_s = np.r_[np.iinfo(np.int64).min, excl_ends]
        free_e = np.r_[excl_starts, np.iinfo(np.int64).max]
        gs, ge, _ = clip_to_windows(gs, ge, free_s, free_e)
    w = np.searchsorted(win_starts, gs, side="right") - 1
    return w, gs, ge


def clip_to_windows(
    starts: np.ndarray, ends: np.ndarray, win_start: np.ndarray, win_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intersect intervals with windows: (piece starts, piece ends, window index), non-empty pieces only,
    ordered by start."""
    empty = np.array([], dtype=np.int64)
    if len(starts) == 0 or len(win_start) == 0:
        return empty, empty, empty
    order = np.argsort(win_start, kind="stable")
    ws, we = win_start[order], win_end[order]
    if np.all(we[:-1] <= ws[1:]):
        # Disjoint windows (the usual ProfilerStep sequence): each interval meets a contiguous run.
        first = np.searchsorted(we, starts, side="right")  # first window ending after the start
        last = np.searchsorted(ws, ends, side="left")  # one past the last window starting before the end
        count = np.maximum(last - first, 0)
        if count.max() <= 1:  # the common case: no interval crosses a window boundary
            idx = np.flatnonzero(count)
            w = first[idx]
        else:
            idx = np.repeat(np.arange(len(starts)), count)
            offset = np.arange(len(idx)) - np.repeat(np.cumsum(count) - count, count)
            w = np.repeat(first, count) + offset
    else:
        # Overlapping windows: every pair.
        idx = np.repeat(np.arange(len(starts)), len(ws))
        w = np.tile(np.arange(len(ws)), len(starts))
    s = np.maximum(starts[idx], ws[w])
    e = np.minimum(ends[idx], we[w])
    ok = e > s
    s, e, w = s[ok], e[ok], order[w[ok]]
    if len(s) > 1 and not np.all((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (w[1:] >= w[:-1]))):
        by_start = np.lexsort((w, s))
        s, e, w = s[by_start], e[by_start], w[by_start]
    return s, e, w


# ---------------------------------------------------------------------------------------------------
# Column helpers (work on chunked, dictionary-encoded columns without decoding them; numpy only, so that
# parsing never imports pandas: see tracekit/data/arrow.py)


class Frame:
    """The columns of an event table as numpy, each converted once (the derive functions read the same
    columns many times). Made of a table, or of columns already converted (`of_columns`, a
    FrameBuilder's: its `table` is then made of its arrays when something asks for it)."""

    def __init__(self, table: pa.Table) -> None:
        self._table: pa.Table | None = table
        self._schema = table.schema
        self.num_rows = table.num_rows
        self._ints: dict[str, np.ndarray] = {}
        self._present: dict[str, np.ndarray] = {}
        self._codes: dict[str, tuple[np.ndarray, list]] = {}

    @classmethod
    def of_columns(
        cls,
        schema: pa.Schema,
        n: int,
        ints: dict[str, np.ndarray],
        present: dict[str, np.ndarray],
        codes: dict[str, tuple[np.ndarray, list]],
    ) -> Frame:
        """A Frame of `n` rows already converted (FrameBuilder): int columns (nulls 0), the presence of
        those that have nulls, string columns as (codes, dictionary); its table made when asked."""
        fr = cls.__new__(cls)
        fr._table, fr._schema, fr.num_rows = None, schema, n
        fr._ints, fr._present, fr._codes = dict(ints), dict(present), dict(codes)
        return fr

    @property
    def table(self) -> pa.Table:
        if self._table is None:  # Frame.of_columns: its columns as Arrow arrays, without a copy
            arrays = []
            for f in self._schema:
                if f.name in self._codes:
                    codes, dictionary = self._codes[f.name]
                    arrays.append(_arrow.dictionary(codes, dictionary))
                else:
                    ok = self._present.get(f.name)
                    arrays.append(_arrow.from_numpy(self._ints[f.name], ok, f.type))
            self._table = pa.Table.from_arrays(arrays, schema=self._schema)
        return self._table

    def ints(self, column: str) -> np.ndarray:
        """An integer column as int64 (nulls as 0; mask them with `present` where it matters)."""
        if column not in self._ints:
            self._ints[column] = _arrow.values(self.table.column(column))
        return self._ints[column]

    def present(self, column: str) -> np.ndarray:
        if column not in self._present:
            if self._table is None and column in self._ints:  # of_columns: a column without a null
                self._present[column] = np.ones(self.num_rows, bool)
            else:
                self._present[column] = _arrow.valid(self.table.column(column))
        return self._present[column]

    def mask(self, column: str, predicate: Callable[[str], bool]) -> np.ndarray:
        """Rows whose (dictionary-encoded string) value satisfies `predicate`; nulls never do."""
        codes, dictionary = self.codes(column)
        hits = np.array([v is not None and predicate(v) for v in dictionary] + [False], dtype=bool)
        return np.take(hits, codes)  # code -1 (null) reads the trailing False

    def codes(self, column: str) -> tuple[np.ndarray, list]:
        """(int32 codes, -1 for null; one dictionary of the distinct values) of a string column, its
        chunks' dictionaries merged once: a streamed parse's table holds a chunk per 24 MiB of trace,
        each with its own dictionary of mostly the same names, and a predicate per value of every
        chunk's dictionary (44 chunks at 1 GB) was most of the masks' cost."""
        if column not in self._codes:
            index: dict = {}
            out = np.empty(self.num_rows, np.int32)
            _merge_codes(self.table.column(column), index, out)
            self._codes[column] = (out, list(index))
        return self._codes[column]

    def strings(self, column: str, rows: np.ndarray) -> list:
        """The values of a dictionary-encoded string column at `rows`."""
        if len(rows) == 0:
            return []
        rows = np.asarray(rows, dtype=np.int64)
        if self._table is None or column in self._codes:  # through the merged codes
            codes, dictionary = self.codes(column)
            return [dictionary[c] if c >= 0 else None for c in codes[rows].tolist()]
        # Chunk by chunk through the dictionary codes: Array.take would import pyarrow.compute (~35 ms
        # of start-up) for the few step names a parse reads.
        out: list = [None] * len(rows)
        lo = 0
        for chunk in self.table.column(column).chunks:
            hi = lo + len(chunk)
            at = np.flatnonzero((rows >= lo) & (rows < hi))
            if len(at):
                if pa.types.is_dictionary(chunk.type):
                    codes, dictionary = _arrow.codes(chunk)
                    picked = [dictionary[c] if c >= 0 else None for c in codes[rows[at] - lo].tolist()]
                else:
                    items = chunk.to_pylist()
                    picked = [items[i] for i in (rows[at] - lo).tolist()]
                for i, v in zip(at.tolist(), picked):
                    out[i] = v
            lo = hi
        return out


def _merge_codes(column: pa.ChunkedArray, index: dict, out: np.ndarray) -> None:
    """A string column's codes (-1 null) in the merged dictionary `index` (value -> code, grown with each
    chunk's new values in its dictionary's order), written into `out` (the column's length)."""
    pos = 0
    for chunk in column.chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_encode()
        codes, dictionary = _arrow.codes(chunk)
        remap = np.array([index.setdefault(v, len(index)) for v in dictionary] + [-1], np.int32)
        np.take(remap, codes, out=out[pos : pos + len(chunk)])  # code -1 (null) reads the trailing -1
        pos += len(chunk)


class FrameBuilder:
    """A Frame of a table that arrives in pieces (a streamed parse's derive subsets, one per 24 MiB
    chunk): each piece's columns are written into growing numpy arrays as it comes, and the piece can
    go. The parse's parent then holds the subset once, as the Frame's columns, where it held every
    chunk's Arrow table and the Frame's concatenation of them besides (~90 MiB each at 1 GB, the
    pages faulted in twice). The first piece reserves room for 64 like it (a 1.5 GB trace's 24 MiB
    chunks), then the room doubles: arrays reserved and not yet written cost no memory."""

    def __init__(self) -> None:
        self._n = 0
        self._cap = 0
        self._schema: pa.Schema | None = None
        self._ints: dict[str, np.ndarray] = {}
        self._present: dict[str, Optional[np.ndarray]] = {}  # None while every value is present
        self._codes: dict[str, np.ndarray] = {}
        self._index: dict[str, dict] = {}

    def add(self, table: pa.Table) -> None:
        if self._schema is None:
            self._schema = table.schema
            for f in table.schema:
                if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type):
                    self._codes[f.name], self._index[f.name] = np.empty(0, np.int32), {}
                else:
                    self._ints[f.name], self._present[f.name] = np.empty(0, np.int64), None
        elif not table.schema.equals(self._schema):
            table = table.cast(self._schema)
        n = table.num_rows
        lo, hi = self._n, self._n + n
        if hi > self._cap:
            self._grow(max(hi, 2 * self._cap if self._cap else 64 * n, 1024))
        for name, out in self._codes.items():
            _merge_codes(table.column(name), self._index[name], out[lo:hi])
        for name, out in self._ints.items():
            col = table.column(name)
            _arrow.values(col, out=out[lo:hi])
            ok = self._present[name]
            if col.null_count and ok is None:
                ok = self._present[name] = np.empty(self._cap, bool)
                ok[:lo] = True
            if ok is not None:
                ok[lo:hi] = _arrow.valid(col) if col.null_count else True
        self._n = hi

    def _grow(self, cap: int) -> None:
        def grown(a: np.ndarray) -> np.ndarray:
            b = np.empty(cap, a.dtype)
            b[: self._n] = a[: self._n]
            return b

        self._ints = {k: grown(v) for k, v in self._ints.items()}
        self._codes = {k: grown(v) for k, v in self._codes.items()}
        self._present = {k: None if v is None else grown(v) for k, v in self._present.items()}
        self._cap = cap

    def frame(self) -> Frame:
        """The Frame of every piece added (of no rows, in the derive columns, when none was)."""
        n = self._n
        if self._schema is None:
            return Frame(pa.schema([SCHEMA.field(c) for c in DERIVE_COLUMNS]).empty_table())
        return Frame.of_columns(
            self._schema,
            n,
            {k: v[:n] for k, v in self._ints.items()},
            {k: v[:n] for k, v in self._present.items() if v is not None},
            {k: (v[:n], list(self._index[k])) for k, v in self._codes.items()},
        )


def _frame(events: pa.Table | Frame) -> Frame:
    return events if isinstance(events, Frame) else Frame(events)


def _rows(kind: str, columns: dict[str, list]) -> pa.Table:
    """A schema.SCHEMA table of derived rows; `columns` maps names to lists of values or numpy arrays."""
    values = {k: (np.concatenate(v) if v and isinstance(v[0], np.ndarray) else v) for k, v in columns.items()}
    n = len(next(iter(values.values())))
    zeros = _arrow.zero_buffer(n)  # shared by the null columns
    arrays = []
    for field in SCHEMA:
        v = values.get(field.name)
        if field.name == "kind":
            arrays.append(_arrow.dictionary(np.zeros(n, np.int32), [kind]))
        elif v is None:
            arrays.append(_arrow.nulls(n, field.type, zeros))
        elif pa.types.is_dictionary(field.type):
            uniques = [u for u in dict.fromkeys(v) if u is not None]
            index = {u: i for i, u in enumerate(uniques)}
            codes = np.array([-1 if x is None else index[x] for x in v], np.int32)
            arrays.append(_arrow.dictionary(codes, uniques))
        else:
            ok = None if isinstance(v, np.ndarray) else np.array([x is not None for x in v], bool)
            data = v if isinstance(v, np.ndarray) else np.array([0 if x is None else x for x in v], np.int64)
            arrays.append(_arrow.from_numpy(data, ok, field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
