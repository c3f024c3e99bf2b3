"""The capture table, split into the frames the analysis works on (one pass, vectorised).

Host events are classified once here by the cause table's recognition rules (tracekit.analysis.causes:
which family of events, hence which host state of DESIGN.md rule 3, each one stands for), so the rules
downstream compare small integer codes, never strings.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis.calls import PAGEABLE_RE, WAITS, CallKind, call_kind
from tracekit.analysis.causes import CAT_COLLECTIVE_WAIT, FAMILIES, FAMILY_STATE, RUNTIME_CATS
from tracekit.analysis.comm import COLLECTIVE_WAIT_NAME, collective_wait_events
from tracekit.analysis.no_work import cut_windows
from tracekit.analysis.steps import check_step_numbers, cycles
from tracekit.data import schema as S
from tracekit.parse.derive import Limits, impossible, time_limits
from tracekit.parse.iterations import (
    ANNOTATION,
    MODULE,
    MODULE_PREFIX,
    OP,
    Iterations,
    Units,
    compile_marker,
    find,
)

NCCL_RE = re.compile(r"nccl", re.IGNORECASE)


@dataclass
class Frames:
    """The frames of one capture. Times are int64 ns; `end` = ts + dur."""

    host: pd.DataFrame  # rank, pid, tid, ts, end, state, family (causes.FAMILIES), cat, name, row
    device: pd.DataFrame  # rank, device, stream, ts, end, cat, name, correlation, nccl, bytes
    steps: pd.DataFrame  # rank, step, pid, tid, ts, end (disjoint per rank, sorted), cycle (steps.cycles)
    launches: pd.DataFrame  # rank, correlation, pid, tid, ts, end, row, graph (one per correlation)
    has_device: bool
    peak_memory: dict  # (rank, device) → max "Total Allocated" of [memory] instants, bytes
    # rank → parse.iterations.Iterations: how its steps were found
    step_rules: dict = field(default_factory=dict)
    # rank, ts, end of each stretch with no work between two steps (tracekit.analysis.no_work): in no step
    no_work: pd.DataFrame = field(default_factory=lambda: _no_stretches())
    # [memory] instants (profile_memory=True), in trace order: rank, pid, tid, ts, device, bytes (+
    # allocated, - freed), allocated, reserved (the allocator's totals after it), addr (-1: not given)
    memory: pd.DataFrame = field(default_factory=lambda: _memory_frame(None))
    # rank, pid, tid, ts, end, elements of the host ops that carry a collective's size (record_param_comms)
    comm_sizes: pd.DataFrame = field(default_factory=lambda: _no_sizes())


# The columns `load_frames` reads (`_Cols` and the step rows).
FRAME_COLUMNS = (
    "kind",
    "rank",
    "ph",
    "cat",
    "name",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "device",
    "stream",
    "correlation",
    "step",
    "bytes",
    "msg_nelems",
    "input_dims",
)
# The host events' categories (`_host_frame`); device activities are S.DEVICE_ACTIVITY_CATS.
_HOST_CATS = (S.CAT_CPU_OP, S.CAT_RUNTIME, S.CAT_DRIVER, S.CAT_USER_ANNOTATION, S.CAT_PYTHON_FUNCTION)
# The columns of the [memory] instants (`_memory_frame`) beside FRAME_COLUMNS: a block's address is
# stored in flow_id (tracekit.data.schema).
MEMORY_COLUMNS = ("bytes", "total_allocated", "total_reserved", "flow_id")
# Every column the analysis reads (load_frames, the memory events): a worker reads no other.
ANALYSIS_COLUMNS = tuple(dict.fromkeys((*FRAME_COLUMNS, *MEMORY_COLUMNS)))


# Kineto's category of the [memory] instants (the only instants the parser keeps).
MEMORY_CAT = "cpu_instant_event"


def analysis_columns(memory: bool) -> tuple[str, ...]:
    """ANALYSIS_COLUMNS, less the memory events' own where a capture has none (`memory`: its footers'
    summaries may hold MEMORY_CAT events, tracekit.data.summary.may_hold_category): three int64 columns
    of nulls cost 24 bytes a row beside the table (17 MiB on a 200 MB trace's capture)."""
    return ANALYSIS_COLUMNS if memory else tuple(dict.fromkeys((*FRAME_COLUMNS, "total_allocated")))


# The row kinds the analysis and the replay read: the raw events and the step rows (the busy and
# dispatch-gap rows earlier parsers derived are recomputed from the events: a reader skips their row
# groups, a large share of such a capture's rows; benchmarks/RESULTS.md).
ANALYSIS_KINDS = (S.KIND_EVENT, S.KIND_STEP)


def dict_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (int codes, -1 for null; categories as an object array), one dictionary."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return np.zeros(0, np.int64), np.zeros(0, object)
    cats = np.asarray(col.chunks[0].dictionary.to_pylist(), dtype=object)
    parts = []
    for c in col.chunks:
        idx = c.indices
        if idx.null_count:
            idx = idx.fill_null(-1)
        parts.append(idx.to_numpy(zero_copy_only=False))
    codes = np.concatenate(parts).astype(np.int64, copy=False)
    return codes, cats


def _classify(codes: np.ndarray, cats: np.ndarray, pred) -> np.ndarray:
    """Row mask of a predicate on category strings, evaluated once per category."""
    m = np.array([bool(pred(c)) for c in cats] + [False], dtype=bool)
    return m[np.where(codes >= 0, codes, len(cats))]


def _classify_among(codes: np.ndarray, cats: np.ndarray, pred, among: np.ndarray) -> np.ndarray:
    """`_classify` within the rows `among` (False elsewhere), evaluating the predicate only on the
    categories those rows use (a capture's names are mostly kernels and Python frames)."""
    n = len(cats)
    at = np.where(codes >= 0, codes, n)
    used = np.flatnonzero(np.bincount(at[among], minlength=n + 1)[:n])
    m = np.zeros(n + 1, dtype=bool)
    m[used] = [bool(pred(cats[u])) for u in used]
    return m[at] & among


def _ints(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    if not col.null_count:
        return col.to_numpy().astype(np.int64, copy=False)
    # not through float64: ns timestamps since the epoch need all 63 bits
    return col.fill_null(fill).to_numpy().astype(np.int64, copy=False)


def _floats(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column with nulls as float64 NaN (ids: exact below 2**53)."""
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def load_frames(
    table: pa.Table,
    cycle_starts: dict | None = None,
    release: Callable[[], None] | None = None,
    marker: str | None = None,
) -> Frames:
    """Split the capture table into host/device/step/launch frames (vectorised; strings stay
    categorical and are classified once per distinct value). `cycle_starts`: rank -> the start times
    of its trace files (`steps.cycle_starts_of(meta)`), where a rank has several. `marker`: --step's
    pattern, the steps' marker instead of ProfilerStep (tracekit.parse.iterations). `release`: called
    once the table's rows the frames take are cut out of it, for the caller to let the table go before
    they are converted (the frames' peak memory is then theirs alone, not the table's beside them)."""
    names = [c for c in FRAME_COLUMNS if c in table.column_names]
    t = table.select(names).unify_dictionaries()
    step_rows = _step_rows(t)
    memory = _memory_frame(table)
    del table
    if release is not None:
        release()
    row, ccodes, ccats = _framed(t)
    # a table without `bytes` (built by hand, or by another tool) has no copy sizes: all null
    columns = {
        name: t[name] if name in t.column_names else pa.chunked_array([pa.nulls(t.num_rows, pa.int64())])
        for name in _Cols.READ
    }
    # an op's input shapes (record_shapes=True; a capture parsed before the column has none)
    columns["input_dims"] = t["input_dims"] if "input_dims" in t.column_names else None
    del t  # each column goes once its framed rows are converted (when the caller let the table go)
    cols = _Cols.of(columns, row, ccodes, ccats)
    cols, limits = _without_impossible(cols)
    step_rows = _steps_before(step_rows, limits)
    if release is not None:
        # Arrow's jemalloc purges freed pages only as Arrow allocates again, which the analysis
        # hardly does: the let-go table's pages stayed resident until the attribution and set the
        # frames' peak (benchmarks/RESULTS.md, issue 17)
        pa.default_memory_pool().release_unused()
    dev = _device_frame(cols)
    host, runtime, hi = _host_frame(cols, has_device=bool(len(dev)))
    steps, rules, no_work = _steps(step_rows, host, dev, cycle_starts, marker)
    sizes = _comm_sizes(cols, hi)
    launches = _launch_frame(cols, runtime, hi)
    host = _waited_copies(cols, host, dev, launches)
    del cols
    waits = collective_wait_events(host, steps)
    if len(waits):
        host = with_derived(host, waits)
    return Frames(
        host=host,
        device=dev,
        steps=steps,
        launches=launches,
        has_device=bool(len(dev)),
        step_rules=rules,
        no_work=no_work,
        peak_memory=_peak_memory(memory),
        memory=memory,
        comm_sizes=sizes,
    )


def _no_sizes() -> pd.DataFrame:
    return pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "pid", "tid", "ts", "end", "elements")})


def _comm_sizes(c: _Cols, hi: np.ndarray) -> pd.DataFrame:
    """The host events with a collective's element count (record_param_comms ops: NCCL writes the size
    there, on the thread that launches the kernel)."""
    m = hi[~np.isnan(c.nelems[hi])]
    if not m.size:
        return _no_sizes()
    return pd.DataFrame(
        {
            "rank": c.rank[m],
            "pid": c.pid[m],
            "tid": c.tid[m],
            "ts": c.ts[m],
            "end": c.end[m],
            "elements": c.nelems[m].astype(np.int64),
        }
    )


def with_derived(host: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The host frame with the step threads' collective waits (tracekit.analysis.comm) appended as host
    events of the `collective` state; their `row` lies beyond the table's (no table row holds one)."""
    fam = next(i for i, f in enumerate(FAMILIES) if CAT_COLLECTIVE_WAIT in f.events.cats)
    n = len(waits)
    first = int(host["row"].max()) + 1 if len(host) else 0
    cats = host["cat"].cat.add_categories([CAT_COLLECTIVE_WAIT])
    names = host["name"]
    if COLLECTIVE_WAIT_NAME not in names.cat.categories:
        names = names.cat.add_categories([COLLECTIVE_WAIT_NAME])
    base = host.assign(cat=cats, name=names)
    extra = pd.DataFrame(
        {
            "rank": waits["rank"].to_numpy(host["rank"].dtype),
            "pid": waits["pid"].to_numpy(host["pid"].dtype),
            "tid": waits["tid"].to_numpy(host["tid"].dtype),
            "ts": waits["ts"].to_numpy(np.int64),
            "end": waits["end"].to_numpy(np.int64),
            "state": np.full(n, FAMILY_STATE[fam], host["state"].dtype),
            "family": np.full(n, fam, np.int8),
            "cat": pd.Categorical([CAT_COLLECTIVE_WAIT] * n, categories=cats.cat.categories),
            "name": pd.Categorical([COLLECTIVE_WAIT_NAME] * n, categories=names.cat.categories),
            "input_dims": pd.Categorical.from_codes(
                np.full(n, -1), categories=host["input_dims"].cat.categories, validate=False
            ),
            "row": np.arange(first, first + n, dtype=host["row"].dtype),
        }
    )
    return pd.concat([base, extra], ignore_index=True)


def _framed(t: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the indices of the rows a frame takes: the raw complete events (kind event, ph X) of a host or
    device category; their category codes; the categories)."""
    kcodes, kcats = dict_codes(t["kind"])
    pcodes, pcats = dict_codes(t["ph"])
    ccodes, ccats = dict_codes(t["cat"])
    keep = _classify(kcodes, kcats, lambda v: v == S.KIND_EVENT) & _classify(
        pcodes, pcats, lambda v: v == "X"
    )
    del kcodes, pcodes
    row = np.flatnonzero(
        keep & _classify(ccodes, ccats, lambda v: v in _HOST_CATS or v in S.DEVICE_ACTIVITY_CATS)
    )
    return row, ccodes[row], ccats


@dataclass
class _Cols:
    """The columns every frame is cut from, read once and only at the rows a frame takes (`_framed`: less
    than half of a capture's rows; converting every row held memory beside the table for rows no frame
    takes, benchmarks/RESULTS.md). `row`: each one's index in the capture table."""

    row: np.ndarray
    ccodes: np.ndarray
    ccats: np.ndarray
    ncodes: np.ndarray
    ncats: np.ndarray
    name: pd.Categorical
    ts: np.ndarray
    end: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    nbytes: np.ndarray  # bytes a copy or memset moved (NaN for the rest)
    nelems: np.ndarray  # a collective's input elements (NCCL kernels, record_param_comms; NaN elsewhere)
    shapes: pd.Categorical  # an op's input shapes as the trace wrote them (JSON text; null without)

    def without(self, drop: np.ndarray) -> _Cols:
        """These rows less those of `drop` (a mask); the dictionaries stay."""
        keep = ~drop
        return _Cols(
            **{
                f.name: value if f.name in ("ccats", "ncats") else value[keep]
                for f in fields(self)
                for value in [getattr(self, f.name)]
            }
        )

    # the table columns `of` reads at the framed rows
    READ = (
        "name",
        "ts_ns",
        "dur_ns",
        "rank",
        "pid",
        "tid",
        "correlation",
        "device",
        "stream",
        "bytes",
        "msg_nelems",
    )

    @classmethod
    def of(cls, columns: dict, row: np.ndarray, ccodes: np.ndarray, ccats: np.ndarray) -> _Cols:
        """`columns`: READ's columns (each popped as it is read), `row`: the framed rows (`_framed`)."""
        every = row.size == len(columns["ts_ns"])

        def take(name: str, convert: Callable[[Any], np.ndarray]) -> np.ndarray:
            # the framed rows picked chunk by chunk (numpy's take, ~2x Arrow's on chunked columns, and
            # no conversion of a whole column beside the table); the column goes once it is read
            col = columns.pop(name)
            if every or not col.num_chunks:
                return convert(col)
            bounds = np.zeros(col.num_chunks + 1, np.int64)
            np.cumsum([len(c) for c in col.chunks], out=bounds[1:])
            cut = np.searchsorted(row, bounds)
            return np.concatenate(
                [convert(c)[row[cut[i] : cut[i + 1]] - bounds[i]] for i, c in enumerate(col.chunks)]
            )

        sh = columns.pop("input_dims", None)
        if sh is None or sh.null_count == len(sh):
            scodes, scats = np.full(row.size, -1, np.int64), np.zeros(0, object)
        else:
            scodes, scats = dict_codes(sh)
            scodes = scodes if every else scodes[row]
        shapes = pd.Categorical.from_codes(scodes, categories=pd.Index(scats, dtype=object), validate=False)
        ncodes, ncats = dict_codes(columns["name"])
        del columns["name"]
        ncodes = ncodes if every else ncodes[row]
        name = pd.Categorical.from_codes(ncodes, categories=pd.Index(ncats, dtype=object), validate=False)
        ts = take("ts_ns", _ints)
        end = ts + np.maximum(take("dur_ns", _ints), 0)
        return cls(
            row=row,
            ccodes=ccodes,
            ccats=ccats,
            ncodes=ncodes,
            ncats=ncats,
            name=name,
            ts=ts,
            end=end,
            rank=take("rank", _ints),
            pid=take("pid", _ints),
            tid=take("tid", _ints),
            correlation=take("correlation", _floats),
            device=take("device", _floats),
            stream=take("stream", _floats),
            nbytes=take("bytes", _floats),
            # most traces have no collective: an all-null column is not converted
            nelems=take("msg_nelems", _floats)
            if columns["msg_nelems"].null_count < len(columns["msg_nelems"])
            else _nans(columns.pop("msg_nelems"), row, every),
            shapes=shapes,
        )


# The categories of the events the rule of an impossible duration looks at (parse.derive).
_LATE_CATS = (S.CAT_USER_ANNOTATION, S.CAT_CPU_OP, *S.DEVICE_ACTIVITY_CATS)


def _without_impossible(c: _Cols) -> tuple[_Cols, Limits]:
    """The framed rows less the events of impossible time (parse.derive.impossible_rows: the parse
    named them), and each rank's limits."""
    judged = _classify(c.ccodes, c.ccats, lambda v: v in _LATE_CATS)
    limits = time_limits(c.rank[judged], c.ts[judged])
    late = judged & impossible(c.rank, c.ts, c.end, limits)
    if not late.any():
        return c, limits
    return c.without(late), limits


def _steps_before(rows: pa.Table, limits: Limits) -> pa.Table:
    """The parser's step rows less those of impossible time (a capture parsed before the rule)."""
    if not rows.num_rows or not limits:
        return rows
    ts = _ints(rows["ts_ns"])
    late = impossible(_ints(rows["rank"]), ts, ts + np.maximum(_ints(rows["dur_ns"]), 0), limits)
    return rows.filter(pa.array(~late)) if late.any() else rows


def _nans(col: pa.ChunkedArray, row: np.ndarray, every: bool) -> np.ndarray:
    return np.full(len(col) if every else row.size, np.nan)


def _device_frame(c: _Cols) -> pd.DataFrame:
    """Device activities sorted by (rank, device, ts, end); device / stream fall back to pid / tid."""
    di = np.flatnonzero(_classify(c.ccodes, c.ccats, lambda v: v in S.DEVICE_ACTIVITY_CATS))
    device, stream = c.device[di], c.stream[di]
    dev = pd.DataFrame(
        {
            "rank": c.rank[di],
            "ts": c.ts[di],
            "end": c.end[di],
            "name": c.name[di],
            "correlation": c.correlation[di],
            "device": np.where(np.isnan(device), c.pid[di], np.nan_to_num(device)).astype(np.int64),
            "stream": np.where(np.isnan(stream), c.tid[di], np.nan_to_num(stream)).astype(np.int64),
            "nccl": _classify(c.ncodes, c.ncats, NCCL_RE.search)[di],
            "bytes": c.nbytes[di],
            "elements": c.nelems[di],
            "row": c.row[di],  # index in the capture table
        },
        copy=False,  # (see _host_frame)
    )
    order = np.lexsort(
        (dev["end"].to_numpy(), dev["ts"].to_numpy(), dev["device"].to_numpy(), dev["rank"].to_numpy())
    )
    return dev.iloc[order].reset_index(drop=True)


def _host_frame(c: _Cols, *, has_device: bool) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Host events with their family (tracekit.analysis.causes.FAMILIES: the highest priority one that
    recognises the event; -1 for python_function and other annotations) and its state. Also returns
    the runtime-call mask and the host rows' table indices."""
    hi = np.flatnonzero(_classify(c.ccodes, c.ccats, lambda v: v in _HOST_CATS))
    hc = c.ccodes[hi]
    hn = c.ncodes[hi]
    family = np.full(hi.size, -1, dtype=np.int8)
    for f, fam in enumerate(FAMILIES):  # the lowest priority first: a later match wins
        ev = fam.events
        if ev.with_device and not has_device:
            continue
        m = _classify(hc, c.ccats, lambda v, ev=ev: v in ev.cats)
        if ev.calls:
            m = _classify_among(hn, c.ncats, lambda v, ev=ev: call_kind(v) in ev.calls, m)
        if ev.name is not None:
            m = _classify_among(hn, c.ncats, ev.name, m)
        family[m] = f
    host = pd.DataFrame(
        {
            "rank": c.rank[hi],
            "pid": c.pid[hi],
            "tid": c.tid[hi],
            "ts": c.ts[hi],
            "end": c.end[hi],
            "state": FAMILY_STATE[family],
            "family": family,
            "cat": pd.Categorical.from_codes(hc, categories=pd.Index(c.ccats, dtype=object), validate=False),
            "name": c.name[hi],
            "input_dims": c.shapes[hi],  # an op's input shapes (JSON text; null without record_shapes)
            "row": c.row[hi],  # index in the capture table
        },
        # the columns are fresh arrays: taken as they are, not stacked into a block of each dtype (a
        # copy of them all beside them would be the frames' peak)
        copy=False,
    )
    runtime = _classify(hc, c.ccats, lambda v: v in RUNTIME_CATS)
    return host, runtime, hi


def _launch_frame(c: _Cols, runtime: np.ndarray, hi: np.ndarray) -> pd.DataFrame:
    """Launch records: runtime/driver calls with a correlation, one per (rank, correlation)."""
    lm = runtime & ~np.isnan(c.correlation[hi])
    rows = hi[lm]
    launches = pd.DataFrame(
        {
            "rank": c.rank[rows],
            "correlation": c.correlation[rows].astype(np.int64),
            "pid": c.pid[rows],
            "tid": c.tid[rows],
            "ts": c.ts[rows],
            "end": c.end[rows],
            "row": c.row[rows],  # index in the capture table
            # a CUDA graph launch: every activity of the graph carries its correlation (CUPTI; torch
            # 2.11 on the H200: 313 kernels under one cudaGraphLaunch, no per-kernel launch record)
            "graph": _classify(c.ncodes[rows], c.ncats, lambda v: call_kind(v) == CallKind.GRAPH_LAUNCH),
        },
        copy=False,  # (see _host_frame)
    )
    # cuLaunchKernel inside cudaLaunchKernelExC may repeat a correlation: keep the outermost call.
    order = np.lexsort(
        (launches["ts"].to_numpy(), launches["correlation"].to_numpy(), launches["rank"].to_numpy())
    )
    launches = launches.iloc[order]
    return launches[~launches.duplicated(["rank", "correlation"])].reset_index(drop=True)


# The family of the runtime calls that wait for the device (the `sync` state's, tracekit.analysis.causes)
_WAIT_FAMILY = next(i for i, f in enumerate(FAMILIES) if f.events.calls == WAITS)
_PAGEABLE = re.compile(PAGEABLE_RE)


def _waited_copies(c: _Cols, host: pd.DataFrame, dev: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """The host frame with each asynchronous copy call (`cudaMemcpyAsync`) that waited for its copy from
    or to pageable memory in the `sync` state, as a blocking copy (tracekit.analysis.calls: such a call
    waits for its stream, then for the copy): the calls whose copy began before they returned. A copy
    that began after its call returned was staged and queued: its call stays a launch."""
    if not len(dev) or not len(launches):
        return host
    pos = np.searchsorted(c.row, dev["row"].to_numpy(np.int64))
    corr = dev["correlation"].to_numpy(np.float64)
    pg = _classify(c.ncodes, c.ncats, _PAGEABLE.search)[pos] & ~np.isnan(corr)
    if not pg.any():
        return host
    copies = pd.DataFrame(
        {
            "rank": dev["rank"].to_numpy()[pg],
            "correlation": corr[pg].astype(np.int64),
            "start": dev["ts"].to_numpy()[pg],
        }
    )
    m = copies.merge(launches[["rank", "correlation", "row", "end"]], on=["rank", "correlation"])
    m = m[m["start"].to_numpy(np.int64) < m["end"].to_numpy(np.int64)]
    hp = np.searchsorted(host["row"].to_numpy(np.int64), m["row"].to_numpy(np.int64))
    names = host["name"].to_numpy()[hp]
    hp = hp[np.array([call_kind(str(n)) == CallKind.COPY_ASYNC for n in names], dtype=bool)]
    if not hp.size:
        return host
    family = host["family"].to_numpy().copy()
    family[hp] = _WAIT_FAMILY
    host["family"] = family  # in place: a copy of the frame would be the frames' peak
    host["state"] = FAMILY_STATE[family]
    return host


_MEMORY_FRAME = ("rank", "pid", "tid", "ts", "device", "bytes", "allocated", "reserved", "addr")


def _memory_frame(table: pa.Table | None) -> pd.DataFrame:
    """The [memory] instants of the table (events with a Total Allocated), in the table's order (the
    trace's), as int64 columns `_MEMORY_FRAME`; reserved 0 and addr -1 where the trace has none."""
    empty = pd.DataFrame({c: np.zeros(0, np.int64) for c in _MEMORY_FRAME})
    if table is None or "total_allocated" not in table.column_names:
        return empty
    valid = pc.is_valid(table["total_allocated"])
    if not pc.any(valid).as_py():
        return empty
    names = ("kind", "name", "rank", "pid", "tid", "ts_ns", "device", *MEMORY_COLUMNS)
    t = table.select([c for c in names if c in table.column_names]).filter(valid)
    keep = pc.equal(pc.cast(t["name"], pa.string()), "[memory]")
    if "kind" in t.column_names:
        keep = pc.and_(keep, pc.equal(pc.cast(t["kind"], pa.string()), S.KIND_EVENT))
    t = t.filter(keep)

    def col(name: str, fill: int) -> np.ndarray:
        return _ints(t[name], fill) if name in t.column_names else np.full(t.num_rows, fill, np.int64)

    return pd.DataFrame(
        {
            "rank": col("rank", 0),
            "pid": col("pid", 0),
            "tid": col("tid", 0),
            "ts": col("ts_ns", 0),
            "device": col("device", -1),
            "bytes": col("bytes", 0),
            "allocated": col("total_allocated", 0),
            "reserved": col("total_reserved", 0),
            "addr": col("flow_id", -1),
        }
    )


def _peak_memory(memory: pd.DataFrame) -> dict[tuple[int, int], int]:
    """Peak allocated bytes per (rank, device) of a device (not the host: device -1)."""
    df = memory[memory["device"] >= 0]
    peaks = df.groupby(["rank", "device"])["allocated"].max()
    return {(int(r), int(d)): int(v) for (r, d), v in peaks.items()}


def _step_rows(t: pa.Table) -> pa.Table:
    """The parser's step rows (kind step) of the table."""
    kcodes, kcats = dict_codes(t["kind"])
    return t.filter(pa.array(_classify(kcodes, kcats, lambda v: v == S.KIND_STEP)))


def _steps(
    rows: pa.Table,
    host: pd.DataFrame,
    dev: pd.DataFrame,
    cycle_starts: dict | None,
    marker: str | None = None,
) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(step windows per rank, rank -> the parse.iterations.Iterations that says how they were found,
    the stretches with no work between steps: tracekit.analysis.no_work, each ending a cycle):
    the parser's ProfilerStep rows (`_step_rows`), else ProfilerStep#N annotations; where a rank has
    none, or `marker` (--step) is given, the iterations found (tracekit.parse.iterations: the parser
    found the same ones, but for a capture written before it did); else one step spanning the rank's
    events (DESIGN.md "Words"). Windows of one rank are made disjoint (cut at the next one's start)."""
    pattern = compile_marker(marker) if marker is not None else None
    steps = _profiler_steps(rows, host) if pattern is None else _NO_STEPS.copy()
    rules = {
        int(r): Iterations("ProfilerStep", starts=g["ts"].to_numpy(np.int64))
        for r, g in steps.groupby("rank")
    }
    ranks = set(host["rank"].unique()) | set(dev["rank"].unique())
    extra = []
    breaks = {int(r): list(v) for r, v in (cycle_starts or {}).items()}
    stretches = [_no_stretches()]
    for r in sorted(ranks - set(rules)):  # one loop per rank without ProfilerStep spans
        h = host[host["rank"] == r]
        found = find(units_of_host(h), pattern, (cycle_starts or {}).get(int(r), ()))
        rules[int(r)] = found
        if found.steps:
            ends = found.ends
            thread = h[(h["pid"] == found.pid) & (h["tid"] == found.tid)]
            cut = cut_windows(found.starts, found.ends, thread, found.rule)
            if cut is not None:  # a server's requests: the stretches with no work between them
                ends = cut.ends
                after = found.starts[1:][cut.cut[:-1]].tolist()
                breaks[int(r)] = sorted({*breaks.get(int(r), [int(found.starts[0])]), *after})
                stretches.append(pd.DataFrame({"rank": int(r), "ts": cut.stretch_ts, "end": cut.stretch_end}))
            extra.append(
                pd.DataFrame(
                    {
                        "rank": r,
                        "step": np.arange(found.steps),
                        "pid": found.pid,
                        "tid": found.tid,
                        "ts": found.starts,
                        "end": ends,
                    }
                )
            )
            continue
        d = dev[dev["rank"] == r]
        lo = min([x["ts"].min() for x in (h, d) if len(x)])
        hi = max([x["end"].max() for x in (h, d) if len(x)])
        top = h.groupby(["pid", "tid"]).size().idxmax() if len(h) else (0, 0)
        extra.append(
            pd.DataFrame([{"rank": r, "step": 0, "pid": top[0], "tid": top[1], "ts": lo, "end": hi}])
        )
    if extra:
        steps = pd.concat([steps, *extra], ignore_index=True)
    steps = steps.astype(np.int64).sort_values(["rank", "ts"]).reset_index(drop=True)
    # a window ends by the next one's start (in int64: a shifted column of floats rounds ns since the epoch)
    rank_of, ts_of, end_of = (steps[c].to_numpy(np.int64) for c in ("rank", "ts", "end"))
    followed = np.r_[rank_of[1:] == rank_of[:-1], False]
    steps["end"] = np.where(followed, np.minimum(end_of, np.r_[ts_of[1:], 0]), end_of)
    steps = steps[steps["end"] > steps["ts"]].reset_index(drop=True)
    check_step_numbers(steps)
    rank, step, ts = (steps[c].to_numpy(np.int64) for c in ("rank", "step", "ts"))
    steps["cycle"] = cycles(rank, step, ts, breaks)
    return steps, rules, pd.concat(stretches, ignore_index=True).astype(np.int64)


_NO_STEPS = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ("rank", "step", "pid", "tid", "ts", "end")})


def _no_stretches() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ("rank", "ts", "end")})


def _profiler_steps(rows: pa.Table, host: pd.DataFrame) -> pd.DataFrame:
    """The ProfilerStep windows: the parser's step rows of that name, else the annotations."""
    if rows.num_rows:
        names = pd.Series(rows["name"].to_pylist(), dtype=object).astype(str)
        rows = rows.filter(pa.array(names.str.match(S.STEP_NAME).to_numpy(bool)))  # not the steps found
    if rows.num_rows:
        if "step" in rows.column_names and not rows["step"].null_count:
            step = _ints(rows["step"])
        else:
            names = pd.Series(rows["name"].to_pylist(), dtype=object).astype(str)
            step = names.str.extract(S.STEP_NAME)[0].fillna(-1).astype(np.int64).to_numpy()
        ts = _ints(rows["ts_ns"])
        steps = pd.DataFrame(
            {
                "rank": _ints(rows["rank"]),
                "step": step,
                "pid": _ints(rows["pid"]),
                "tid": _ints(rows["tid"]),
                "ts": ts,
                "end": ts + _ints(rows["dur_ns"]),
            }
        )
    else:
        ann = host[host["cat"] == S.CAT_USER_ANNOTATION]
        ann = ann[ann["name"].astype(str).str.match(S.STEP_NAME)]
        steps = pd.DataFrame(
            {
                "rank": ann["rank"],
                "step": ann["name"].astype(str).str.extract(S.STEP_NAME)[0].astype(np.int64),
                "pid": ann["pid"],
                "tid": ann["tid"],
                "ts": ann["ts"],
                "end": ann["end"],
            }
        )
    return steps[steps["step"] >= 0] if len(steps) else _NO_STEPS.copy()


def units_of_host(host: pd.DataFrame) -> Units:
    """The units tracekit.parse.iterations reads (annotations, modules, cpu_ops) of a host frame."""
    names = host["name"].astype("category")
    cats = [str(c) for c in names.cat.categories]
    is_module = np.array([c.startswith(MODULE_PREFIX) for c in cats] + [False], bool)
    codes = names.cat.codes.to_numpy().astype(np.int64)
    codes[codes < 0] = len(cats)
    cat = host["cat"].astype(object).to_numpy()
    kind = np.full(len(host), -1, np.int8)
    kind[cat == S.CAT_USER_ANNOTATION] = ANNOTATION
    kind[(cat == S.CAT_PYTHON_FUNCTION) & is_module[codes]] = MODULE
    kind[cat == S.CAT_CPU_OP] = OP
    at = np.flatnonzero(kind >= 0)
    return Units(
        pid=host["pid"].to_numpy(np.int64)[at],
        tid=host["tid"].to_numpy(np.int64)[at],
        ts=host["ts"].to_numpy(np.int64)[at],
        end=host["end"].to_numpy(np.int64)[at],
        kind=kind[at],
        code=codes[at],
        names=[*cats, ""],
    )


def python_frames(host: pd.DataFrame) -> pd.DataFrame:
    """python_function events that are user code: not torch/, site-packages, built-ins or stdlib."""
    py = host[host["cat"] == S.CAT_PYTHON_FUNCTION]
    if not len(py):
        return py.assign(source=pd.Series(dtype=object), function=pd.Series(dtype=object))
    names = py["name"].astype("category")
    cats = names.cat.categories.astype(str)
    src = np.array([_user_source(n) for n in cats], dtype=object)
    func = np.array([_user_function(n) for n in cats], dtype=object)
    codes = names.cat.codes.to_numpy()
    py = py.assign(source=src[codes], function=func[codes])
    return py[py["source"].notna()]


_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _user_source(name: str) -> str | None:
    """'train.py(57): main' → 'train.py:57'; None for library frames.

    The line is where the function starts (torch's python tracer records function entries with the
    code object's first line, not the line being run), so reports name the function beside it
    (`_user_function`): on the H200 sync_heavy capture the `.item()` inside `forward` is at
    `_train.py:48`, and line 48 is `def forward`."""
    m = _FRAME_RE.match(name)
    if not m:
        return None
    file = m.group("file")
    norm = file.replace("\\", "/")
    if file.startswith("<") or "site-packages/" in norm or "dist-packages/" in norm:
        return None
    parts = norm.split("/")
    if "torch" in parts[:-1] or norm.startswith("torch/"):
        return None
    if len(parts) == 1 and parts[0].removesuffix(".py") in _STDLIB:
        return None
    if "/lib/python3" in norm:
        return None
    return f"{parts[-1]}:{m.group('line')}"


def _user_function(name: str) -> str | None:
    """'train.py(57): main' → 'main'."""
    m = _FRAME_RE.match(name)
    return m.group("func") if m else None
