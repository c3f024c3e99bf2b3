"""The rows the parser derives from the raw events (DESIGN.md, "Words"), stored beside them in the capture:

- ``step``: one row per ``ProfilerStep#N`` span (cat ``user_annotation``) on the host thread that owns
  them. The ``gpu_user_annotation`` copies Kineto puts on the device timeline are never steps. A rank
  with no step span gets the iterations `tracekit.parse.iterations` finds (steps 0, 1, …, named by the
  event that starts each), else one step (step 0, name ``trace``) spanning that rank's events.

Device busy intervals and host dispatch gaps are not stored: the analysis computes them from the event
rows (tracekit.analysis; the dispatch gaps' one definition is tracekit.analysis.dispatch), and storing
them cost every parse CPU for rows no command read (benchmarks/RESULTS.md, issue 22).
Captures written before hold ``busy`` and ``dispatch_gap`` rows; readers skip them.

The functions take the table of raw events (``kind == "event"``, schema.SCHEMA columns) or its Frame,
and return a table in schema.SCHEMA holding only derived rows.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pyarrow as pa

from tracekit.data import arrow as _arrow
from tracekit.data.schema import (
    CAT_CPU_OP,
    CAT_PYTHON_FUNCTION,
    CAT_USER_ANNOTATION,
    DEVICE_ACTIVITY_CATS,
    KIND_STEP,
    SCHEMA,
    STEP_NAME,
)
from tracekit.parse import iterations as _iterations

TRACE_STEP_NAME = "trace"  # the name of the one step of a trace without ProfilerStep spans


# The columns derive_steps and parse.sanity read.
# `correlation`: parse.sanity (activities overlapping on one stream: one CUDA graph launch or not).
DERIVE_COLUMNS = ("rank", "ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "device", "correlation")
_DERIVE_CATS = (CAT_USER_ANNOTATION, CAT_CPU_OP, *DEVICE_ACTIVITY_CATS)


def needed_for_derive(events: pa.Table) -> pa.Table:
    """The rows and columns of `events` that derive_steps and parse.sanity need (a streamed parse keeps
    only these).

    Complete events of the step / cpu_op / device categories, plus the rows holding each rank's
    earliest start and latest end (a trace without steps gets one step spanning exactly those)."""
    frame = _frame(events)
    mask = frame.mask("ph", lambda v: v == "X") & frame.mask("cat", lambda v: v in _DERIVE_CATS)
    # the modules' python_function events, which parse.iterations may find the iterations by
    mask |= frame.mask("cat", lambda v: v == CAT_PYTHON_FUNCTION) & frame.mask("name", _is_module)
    timed = ~frame.mask("ph", lambda v: v == "M")
    rank, ts = frame.ints("rank"), frame.ints("ts_ns")
    end = ts + np.maximum(frame.ints("dur_ns"), 0)
    if not timed.any():
        groups: list[np.ndarray] = []
    elif rank.min() == rank.max():  # one rank (a chunk of one file: the parse's case), no grouping
        groups = [np.flatnonzero(timed)]
    else:
        groups = [np.flatnonzero(timed & (rank == r)) for r in _arrow.distinct(rank[timed])]
    for idx in groups:
        mask[idx[np.argmin(ts[idx])]] = True
        mask[idx[np.argmax(end[idx])]] = True
    return _arrow.filter_rows(events.select(list(DERIVE_COLUMNS)), mask)


# ---------------------------------------------------------------------------------------------------
# An impossible time: one corrupted `dur` (a 1-hour ProfilerStep or kernel in a trace of milliseconds)
# made every figure of its step absurd ("interpreter 1,199,997 ms/step, 100 %"), one corrupted `ts` (an
# op at 0, 53 years before the rest) a step of 53 years. The rank's events of the step / cpu_op / device
# categories start within a body: their starts less the earliest and the latest IMPOSSIBLE_TRIM of them
# (a few strays). An event that starts more than max(IMPOSSIBLE_MARGIN_NS, IMPOSSIBLE_FACTOR × the
# body's span) before it, or ends that much after it, is an outlier: nothing the trace recorded
# happened there. The parse leaves it out of the steps and names it (parse.sanity's warning), and the
# analysis and the replay leave it out of every figure (analysis.events), by this one rule.
IMPOSSIBLE_MARGIN_NS = 600 * 10**9  # ten minutes of nothing recorded
IMPOSSIBLE_FACTOR = 10
IMPOSSIBLE_TRIM = 0.01  # at most this share of a rank's events (and at least one) are strays
_INT64_MAX = int(np.iinfo(np.int64).max)
_INT64_MIN = int(np.iinfo(np.int64).min)

Limits = dict  # rank -> (the earliest start, the latest end) an event of the rank may have


def time_limits(rank: np.ndarray, ts: np.ndarray) -> Limits:
    """rank -> (earliest start, latest end) of a possible event (see above), from the starts `ts` of
    the rank's complete events of the step / cpu_op / device categories."""
    if not rank.size:
        return {}
    if rank.min() == rank.max():  # one rank: the usual case, no grouping
        groups = [(int(rank[0]), ts)]
    else:
        groups = [(int(r), ts[rank == r]) for r in _arrow.distinct(rank)]
    limits = {}
    for r, starts in groups:
        n = starts.size
        k = max(1, int(n * IMPOSSIBLE_TRIM)) if n >= 3 else 0
        # the body's ends: the (k+1)-th earliest and latest starts (a partition: no sort of every start)
        lo = int(np.partition(starts, k)[k]) if k else int(starts.min())
        hi = int(np.partition(starts, n - 1 - k)[n - 1 - k]) if k else int(starts.max())
        margin = max(IMPOSSIBLE_MARGIN_NS, IMPOSSIBLE_FACTOR * (hi - lo))
        limits[r] = (max(lo - margin, _INT64_MIN), min(hi + margin, _INT64_MAX))
    return limits


def impossible(rank: np.ndarray, start: np.ndarray, end: np.ndarray, limits: Limits) -> np.ndarray:
    """Rows that start before or end after their rank's limits (`time_limits`); rows of a rank
    without limits never are."""
    if not rank.size or not limits:
        return np.zeros(rank.size, bool)
    if rank.min() == rank.max():
        lo, hi = limits.get(int(rank[0]), (_INT64_MIN, _INT64_MAX))
        return (start < lo) | (end > hi)
    lo_at = np.full(rank.size, _INT64_MIN, np.int64)
    hi_at = np.full(rank.size, _INT64_MAX, np.int64)
    for r, (lo, hi) in limits.items():
        mine = rank == r
        lo_at[mine], hi_at[mine] = lo, hi
    return (start < lo_at) | (end > hi_at)


def judged_rows(frame: Frame) -> np.ndarray:
    """The rows the rule of an impossible time looks at: complete events of the step / cpu_op / device
    categories."""
    return frame.mask("ph", lambda v: v == "X") & frame.mask("cat", lambda v: v in _DERIVE_CATS)


def impossible_rows(frame: Frame, *, any_event: bool = False) -> np.ndarray:
    """The complete events of the step / cpu_op / device categories of `frame` whose time is
    impossible (see above); with `any_event`, every row that lies out there."""
    timed = judged_rows(frame)
    rank, ts = frame.ints("rank"), frame.ints("ts_ns")
    end = ts + np.maximum(frame.ints("dur_ns"), 0)
    out = impossible(rank, ts, end, time_limits(rank[timed], ts[timed]))
    return out if any_event else timed & out


def _is_module(name: str) -> bool:
    return name.startswith(_iterations.MODULE_PREFIX)


def derive_steps(events: pa.Table | Frame, breaks: dict | None = None) -> pa.Table:
    """Step windows: ProfilerStep#N spans on their owning thread; else the iterations found
    (parse.iterations); else one step spanning the rank. `breaks`: rank -> its trace files' starts. An
    event of impossible time (`impossible_rows`) neither is a step, nor a unit of an iteration, nor
    stretches a step."""
    return derive_step_rows(events, breaks)[0]


def derive_step_rows(events: pa.Table | Frame, breaks: dict | None = None) -> tuple[pa.Table, dict]:
    """(derive_steps' rows, rank -> the rule that found them: parse.iterations.Iterations.to_json())."""
    frame = _frame(events)
    rules: dict = {}
    rank = frame.ints("rank")
    usable = ~impossible_rows(frame, any_event=True)
    is_x = frame.mask("ph", lambda v: v == "X")
    is_step = is_x & usable & frame.mask("cat", lambda v: v == CAT_USER_ANNOTATION)
    is_step &= frame.mask("name", lambda v: STEP_NAME.match(v) is not None)
    rows: dict[str, list] = {k: [] for k in ("rank", "pid", "tid", "ts_ns", "dur_ns", "name", "step")}
    idx = np.flatnonzero(is_step)
    names = frame.strings("name", idx)
    pid, tid = frame.ints("pid"), frame.ints("tid")
    ts, dur = frame.ints("ts_ns"), frame.ints("dur_ns")
    ranks = _arrow.distinct(rank) if len(rank) else np.array([], dtype=np.int64)
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
            rules[int(r)] = {
                **_iterations.Iterations("ProfilerStep").to_json(),
                "steps": len(by_thread[owner]),
            }
            continue
        found = _iterations.find(
            units_of_frame(frame, (rank == r) & usable), breaks=(breaks or {}).get(int(r), ())
        )
        rules[int(r)] = found.to_json()
        if found.steps:
            rows["rank"] += [int(r)] * found.steps
            rows["pid"] += [found.pid] * found.steps
            rows["tid"] += [found.tid] * found.steps
            rows["ts_ns"] += found.starts.tolist()
            rows["dur_ns"] += (found.ends - found.starts).tolist()
            rows["name"] += list(found.names)
            rows["step"] += list(range(found.steps))
            continue
        # Nothing found: one step over the rank's timed events (metadata rows excluded).
        in_rank = (rank == r) & ~frame.mask("ph", lambda v: v == "M") & usable
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
    return _rows(KIND_STEP, rows), rules


def record_rules(traces: list[dict], rules: dict) -> None:
    """Each rank's step rule (derive_step_rows) into its first trace entry's `step_rule`, where
    `tracekit info` reads it."""
    first: dict[int, dict] = {}
    for t in traces:
        first.setdefault(int(t.get("rank", 0)), t)
    for r, rule in rules.items():
        if r in first:
            first[r]["step_rule"] = rule


def units_of_frame(frame: Frame, rows: np.ndarray) -> _iterations.Units:
    """The units parse.iterations reads (annotations, modules, cpu_ops) among the `rows` (a mask)."""
    is_x = frame.mask("ph", lambda v: v == "X")
    kind = np.full(frame.num_rows, -1, np.int8)
    kind[frame.mask("cat", lambda v: v == CAT_USER_ANNOTATION)] = _iterations.ANNOTATION
    kind[frame.mask("cat", lambda v: v == CAT_PYTHON_FUNCTION) & frame.mask("name", _is_module)] = (
        _iterations.MODULE
    )
    kind[frame.mask("cat", lambda v: v == CAT_CPU_OP)] = _iterations.OP
    at = np.flatnonzero(rows & is_x & (kind >= 0))
    codes, names = frame.codes("name")
    code = codes[at].astype(np.int64)
    code[code < 0] = len(names)  # a null name reads as ""
    ts = frame.ints("ts_ns")[at]
    return _iterations.Units(
        pid=frame.ints("pid")[at],
        tid=frame.ints("tid")[at],
        ts=ts,
        end=ts + np.maximum(frame.ints("dur_ns")[at], 0),
        kind=kind[at],
        code=code,
        names=[*(n if n is not None else "" for n in names), ""],
    )


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
        chunk's dictionary was most of the masks' cost."""
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
        # Chunk by chunk through the dictionary codes: Array.take would import pyarrow.compute (start-up
        # time: tracekit.data.arrow.filter_rows) for the few step names a parse reads.
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
    chunk's Arrow table and the Frame's concatenation of them besides (the pages faulted in twice).
    The first piece reserves room for 64 like it (a 1.5 GB trace's 24 MiB chunks), then the room
    doubles: arrays reserved and not yet written cost no memory."""

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
