"""Sync sources: which synchronising call, inside which framework op, called from which user line,
cost how much device idle time (DESIGN.md rule 4's pointer, aggregated).

    CPU T   explore.py:57 sync_step → aten::item → aten::_local_scalar_dense → cudaStreamSynchronize
    GPU     ==K0==]        idle (sync drain)          [== K ==
    source = innermost user python frame around the call (frames in torch/, site-packages, the stdlib
    and built-ins are skipped); op = top-level cpu_op around the call; call = innermost sync event.

And the runtime calls that held the host: the `runtime` idle time by the call it was spent in.

    CPU T   |- aten::empty -[- cudaMalloc -]-|
    GPU     ==K0==]  idle: runtime  [== K ==
    call = the innermost `runtime`-state call around each idle piece of that cause.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.attribution import C_RUNTIME, C_SYNC, DeviceGaps
from tracekit.analysis.events import python_frames
from tracekit.analysis.host import Thread, Threads
from tracekit.analysis.model import RuntimeCall, SyncPointer, SyncSource

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
            source = np.asarray(np.where(frame >= 0, srcs[np.maximum(frame, 0)], None), dtype=object)
            funcs = py["function"].to_numpy(object)
            function = np.asarray(np.where(frame >= 0, funcs[np.maximum(frame, 0)], None), dtype=object)
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


def _enclosing_op(th: Thread, t: np.ndarray) -> np.ndarray:
    """The outermost `aten::` op around each time (what user code called, e.g. aten::item), else the
    top-level cpu_op (e.g. a module's `forward` record_function), else None."""
    out = np.full(t.size, None, dtype=object)
    if th.op_s.size == 0:
        return out
    is_aten = (str(n).startswith("aten::") for n in th.op_name)
    aten = np.fromiter(is_aten, dtype=np.bool_, count=th.op_name.size)
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


def pointer_index(pointers: pd.DataFrame) -> dict[tuple[str, int], SyncPointer]:
    """Every resolved pointer as a SyncPointer, by ("rank:pid:tid", sync event index)."""
    if pointers.empty:
        return {}
    cols = [pointers[c].tolist() for c in ("thread", "ptr", "call", "op", "source", "function")]
    starts, durs = pointers["start_ns"].tolist(), pointers["dur_ns"].tolist()
    return {
        (thread, int(ptr)): SyncPointer(
            call=str(call),
            op=_text(op),
            source=_text(source),
            function=_text(function),
            start_ns=int(start),
            dur_ns=int(dur),
        )
        for thread, ptr, call, op, source, function, start, dur in zip(*cols, starts, durs)
    }


def _text(value) -> str | None:
    """A string cell of the pointers frame; None for a missing one (None or NaN after a concat)."""
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


def pointer_of(index: dict, thread: tuple, ptr: int) -> SyncPointer | None:
    """The SyncPointer of one (thread, sync event index), or None (`index`: `pointer_index`)."""
    if ptr < 0:
        return None
    return index.get((_tkey(thread), int(ptr)))


def sync_sources(all_gaps: list[DeviceGaps], index: dict, n_steps: float) -> list[SyncSource]:
    """Sync-caused idle time grouped by (call, op, source, function), largest first (ties: in the
    order the sources first appear). `index`: `pointer_index`; `n_steps`: device-steps the per-step
    figures divide by. Loops run over the distinct (thread, sync event) pairs, not over pieces."""
    acc: dict[tuple, list] = {}
    for gi, g in enumerate(all_gaps):
        m = g.p_cause == C_SYNC
        if not m.any():
            continue
        thread = g.thread[g.p_gap[m]]
        ptr = g.p_pointer[m]
        gap = g.p_gap[m]
        ns = (g.p_end - g.p_start)[m]
        pairs, first, inverse = np.unique(
            np.stack([thread, ptr]), axis=1, return_index=True, return_inverse=True
        )
        inverse = inverse.ravel()
        totals = np.bincount(inverse, weights=ns, minlength=pairs.shape[1])
        for k in np.argsort(first, kind="stable"):  # one loop per (thread, sync event), in order
            t, p = int(pairs[0, k]), int(pairs[1, k])
            sp = index.get((_tkey(g.thread_keys[t]), p)) if p >= 0 else None
            key = (
                sp.call if sp else "(unknown)",
                sp.op if sp else None,
                sp.source if sp else None,
                sp.function if sp else None,
            )
            entry = acc.setdefault(key, [0, set()])
            entry[0] += int(totals[k])
            entry[1].update((gi, int(x)) for x in np.unique(gap[inverse == k]))
    ranked = sorted(acc.items(), key=lambda kv: -kv[1][0])
    return [
        SyncSource(
            call=call,
            op=op,
            source=source,
            function=function,
            idle_ns=ns,
            gaps=len(gaps),
            steps=max(int(round(n_steps)), 1),
        )
        for (call, op, source, function), (ns, gaps) in ranked
    ]


def runtime_calls(all_gaps: list[DeviceGaps], threads: Threads, n_steps: float) -> list[RuntimeCall]:
    """`runtime` idle time by the call that held the host (the innermost `runtime`-state call at each
    piece's start), largest first (ties: in the order the calls first appear). Loops run over threads
    and call names, not pieces."""
    acc: dict[str, list] = {}
    for gi, g in enumerate(all_gaps):
        m = g.p_cause == C_RUNTIME
        if not m.any():
            continue
        codes = g.thread[g.p_gap[m]]
        for code in sorted(set(codes.tolist())):  # one loop per thread
            th = threads[g.thread_keys[code]]
            sel = np.flatnonzero(m)[codes == code]
            k = iv.innermost_containing(th.call_s, th.call_e, th.call_depth, g.p_start[sel])
            known = th.call_name[np.maximum(k, 0)] if th.call_name.size else None
            names = np.asarray(np.where(k >= 0, known, None), dtype=object)
            ns = (g.p_end - g.p_start)[sel]
            for name in dict.fromkeys(names.tolist()):  # one loop per call name, in order
                here = names == name
                entry = acc.setdefault(str(name) if name is not None else "(unknown)", [0, set()])
                entry[0] += int(ns[here].sum())
                entry[1].update((gi, int(x)) for x in np.unique(g.p_gap[sel[here]]))
    ranked = sorted(acc.items(), key=lambda kv: -kv[1][0])
    return [
        RuntimeCall(call=call, idle_ns=ns, gaps=len(gaps), steps=max(int(round(n_steps)), 1))
        for call, (ns, gaps) in ranked
    ]
