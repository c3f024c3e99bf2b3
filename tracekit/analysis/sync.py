"""Sync sources: which synchronising call, inside which framework op, called from which user line,
cost how much device idle time (DESIGN.md rule 4's pointer, aggregated).

    CPU T   explore.py:57 sync_step → aten::item → aten::_local_scalar_dense → cudaStreamSynchronize
    GPU     ==K0==]        idle (sync drain)          [== K ==
    source = innermost user python frame around the call (frames in torch/, site-packages, the stdlib
    and built-ins are skipped); op = top-level cpu_op around the call; call = innermost sync event.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.attribution import C_SYNC, DeviceGaps
from tracekit.analysis.events import python_frames
from tracekit.analysis.host import Threads
from tracekit.analysis.model import SyncPointer, SyncSource

Key = tuple  # ((rank, pid, tid), sync event index)


def resolve_pointers(all_gaps: list[DeviceGaps], threads: Threads) -> pd.DataFrame:
    """One row per sync event some gap or sync piece points at (vectorised per thread):
    thread ("rank:pid:tid"), ptr (index into the thread's sync events), call, op, source,
    start_ns, dur_ns."""
    wanted: dict[tuple, list[np.ndarray]] = defaultdict(list)
    for g in all_gaps:
        for arr_thread, arr_ptr in ((g.thread, g.pointer), (g.thread[g.p_gap], g.p_pointer)):
            m = arr_ptr >= 0
            for code in np.unique(arr_thread[m]).tolist():
                wanted[g.thread_keys[code]].append(arr_ptr[m & (arr_thread == code)])
    parts = []
    for key, arrays in wanted.items():  # one loop per thread
        th = threads[key]
        idx = np.unique(np.concatenate(arrays))
        starts = th.sync_s[idx]
        ops = _enclosing_op(th, starts)
        py = python_frames(threads.host_by_thread.get(key, _NO_HOST))
        if len(py):
            ps = py["ts"].to_numpy(np.int64)
            pe = py["end"].to_numpy(np.int64)
            frame = iv.innermost_containing(ps, pe, iv.nesting_depth(ps, pe), starts)
            srcs = py["source"].to_numpy(object)
            source = np.where(frame >= 0, srcs[np.maximum(frame, 0)], None)
            funcs = py["function"].to_numpy(object)
            function = np.where(frame >= 0, funcs[np.maximum(frame, 0)], None)
        else:
            source = np.full(idx.size, None, dtype=object)
            function = np.full(idx.size, None, dtype=object)
        parts.append(
            pd.DataFrame(
                {
                    "thread": np.full(idx.size, _tkey(key), dtype=object),
                    "ptr": idx,
                    "call": th.sync_name[idx],
                    "op": ops,
                    "source": source,
                    "function": function,
                    "start_ns": starts,
                    "dur_ns": th.sync_e[idx] - starts,
                }
            )
        )
    if not parts:
        return pd.DataFrame(
            columns=["thread", "ptr", "call", "op", "source", "function", "start_ns", "dur_ns"]
        )
    return pd.concat(parts, ignore_index=True)


def _enclosing_op(th: Threads, t: np.ndarray) -> np.ndarray:
    """The outermost `aten::` op around each time (what user code called, e.g. aten::item), else the
    top-level cpu_op (e.g. a module's `forward` record_function), else None."""
    out = np.full(t.size, None, dtype=object)
    if th.op_s.size == 0:
        return out
    aten = np.fromiter((str(n).startswith("aten::") for n in th.op_name), dtype=bool, count=th.op_name.size)
    for mask in (aten, np.ones_like(aten)):
        miss = np.flatnonzero(out == None)  # noqa: E711 (element-wise)
        if miss.size == 0 or not mask.any():
            continue
        s, e, names = th.op_s[mask], th.op_e[mask], th.op_name[mask]
        top = iv.top_level_containing(s, e, iv.nesting_depth(s, e), t[miss])
        out[miss] = np.where(top >= 0, names[np.maximum(top, 0)], None)
    return out


def _tkey(key: tuple) -> str:
    return ":".join(str(int(x)) for x in key)


_NO_HOST = pd.DataFrame({"cat": pd.Series(dtype=object), "name": pd.Series(dtype=object)})


def pointer_of(pointers: pd.DataFrame, thread: tuple, ptr: int) -> SyncPointer | None:
    """The SyncPointer of one (thread, sync event index), or None."""
    if ptr < 0 or pointers.empty:
        return None
    m = pointers[(pointers["ptr"] == ptr) & (pointers["thread"] == _tkey(thread))]
    if m.empty:
        return None
    r = m.iloc[0]
    return SyncPointer(
        call=str(r["call"]),
        op=None if r["op"] is None else str(r["op"]),
        source=None if r["source"] is None else str(r["source"]),
        function=None if r["function"] is None else str(r["function"]),
        start_ns=int(r["start_ns"]),
        dur_ns=int(r["dur_ns"]),
    )


def sync_sources(all_gaps: list[DeviceGaps], pointers: pd.DataFrame, n_steps: float) -> list[SyncSource]:
    """Sync-caused idle time grouped by (call, op, source), largest first. `n_steps`: device-steps the
    per-step figures divide by."""
    rows = []
    for gi, g in enumerate(all_gaps):
        m = g.p_cause == C_SYNC
        if not m.any():
            continue
        rows.append(
            pd.DataFrame(
                {
                    "thread": np.array([_tkey(k) for k in g.thread_keys], dtype=object)[g.thread[g.p_gap[m]]],
                    "ptr": g.p_pointer[m],
                    "gap": g.p_gap[m] + (gi << 40),
                    "ns": (g.p_end - g.p_start)[m],
                }
            )
        )
    if not rows:
        return []
    df = pd.concat(rows, ignore_index=True)
    df = df.merge(
        pointers[["thread", "ptr", "call", "op", "source", "function"]], on=["thread", "ptr"], how="left"
    )
    df = df.fillna({"call": "(unknown)"})
    df["op"] = df["op"].fillna("")
    df["source"] = df["source"].fillna("")
    df["function"] = df["function"].fillna("")
    agg = df.groupby(["call", "op", "source", "function"], sort=False).agg(
        ns=("ns", "sum"), gaps=("gap", "nunique")
    )
    agg = agg.sort_values("ns", ascending=False, kind="stable").reset_index()
    return [
        SyncSource(
            call=str(r.call),
            op=r.op or None,
            source=r.source or None,
            function=r.function or None,
            idle_ns=int(r.ns),
            gaps=int(r.gaps),
            steps=max(int(round(n_steps)), 1),
        )
        for r in agg.itertuples(index=False)
    ]
