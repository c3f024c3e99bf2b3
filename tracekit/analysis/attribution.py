"""Attribution of device idle time to causes (DESIGN.md, "Attribution of GPU idle time").

All rules run vectorised over every idle gap of one device at once; Python loops run only over ranks,
devices and host threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.calls import CallKind, call_kind
from tracekit.analysis.causes import CAUSES, STATE, STATE_NAMES, STATE_TO_CAUSE, cause_code, states_where
from tracekit.analysis.host import Thread, Threads

# Cause codes (indices into CAUSES) and state codes the rules name.
C_QUEUED, C_SYNC, C_RUNTIME = cause_code("queued"), cause_code("sync"), cause_code("runtime")
LAUNCH, SYNC = STATE["launch"], STATE["sync"]
# The states a sync drain (rule 4) leaves as they are: the others' time in a drained gap is `sync`.
UNDRAINED = np.array(states_where(lambda c: not c.drained), dtype=np.int64)

DEFAULT_SYNC_TOLERANCE_NS = 2_000


@dataclass
class DeviceGaps:
    """The idle gaps of one device and how they were attributed (arrays, one row per gap)."""

    rank: int
    device: int
    win: np.ndarray  # step window index (into the rank's steps)
    a: np.ndarray  # gap start
    b: np.ndarray  # gap end
    next_kernel: np.ndarray  # object: name of the activity that ends the gap, None for tail gaps
    thread: np.ndarray  # index into `thread_keys`
    queued: np.ndarray  # bool
    drain: np.ndarray  # bool
    pointer: np.ndarray  # int: index into the thread's sync events, -1 when none
    # pieces: the gap cut by host state; each piece has its final cause
    p_gap: np.ndarray
    p_start: np.ndarray
    p_end: np.ndarray
    p_state: np.ndarray  # host state code, or -1 for queued pieces, or LAUNCH for pending launch
    p_cause: np.ndarray
    p_pointer: np.ndarray  # for sync pieces: index into the thread's sync events, -1 otherwise
    thread_keys: list  # (rank, pid, tid)


def attribute_device(
    rank: int,
    device: int,
    acts: pd.DataFrame,
    steps: pd.DataFrame,
    launches: pd.DataFrame,
    threads: Threads,
    *,
    sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
) -> tuple[DeviceGaps, np.ndarray, np.ndarray]:
    """Attribute every idle gap of one device inside the rank's step windows.

    acts: the device's activities sorted by ts; steps: the rank's disjoint sorted windows;
    launches: the rank's launch records (one per correlation). Returns (gaps, busy_start, busy_end).
    `threads` builds the host threads the gaps point at on first use.
    """
    ws = steps["ts"].to_numpy(np.int64)
    we = steps["end"].to_numpy(np.int64)
    busy_s, busy_e = iv.union(acts["ts"].to_numpy(np.int64), acts["end"].to_numpy(np.int64))
    win, a, b = iv.gaps_in_windows(busy_s, busy_e, ws, we)
    nxt = _next_activity(rank, acts, steps, launches, win, b)  # rule 1

    # Rule 2, queued: L ended at or before a, so K was already queued when the device went idle.
    #
    #   CPU T   |- L -|....................
    #   GPU     ==K0=======]   idle   [=== K ===
    #                 L.end <= a      b
    #   predicate: L exists and L.end <= a
    queued = nxt.has_l & (nxt.l_end <= a)

    # Rule 3: slice [a, c) by T's state, c = min(max(L.end, a), b); [c, b) is `launch`: issued, not
    # yet started (the launch latency of K).
    #
    #   CPU T   ....interp....|-- fw --|- L -|.........
    #   GPU     ==K0==]         idle               [=== K ===
    #                 a  interp   fw    launch  pending-launch  b
    c = np.where(nxt.has_l, np.clip(nxt.l_end, a, b), b)
    host_b = np.where(queued, a, c)  # queued gaps are not sliced
    drain, pointer, pieces = _drains_and_slices(nxt, threads, a, host_b, queued, sync_tolerance_ns)

    # queued gaps: one piece; pending launch pieces [c, b) (but where T was blocked in a copy)
    qg = np.flatnonzero(queued)
    pend = _pending(nxt, threads, c, b, np.flatnonzero(~queued & (c < b)))
    p_gap = np.concatenate([pieces[0], qg, pend[0]])
    p_start = np.concatenate([pieces[1], a[qg], pend[1]])
    p_end = np.concatenate([pieces[2], b[qg], pend[2]])
    p_state = np.concatenate([pieces[3], np.full(qg.size, -1), pend[3]])
    order = np.lexsort((p_start, p_gap))
    p_gap, p_start, p_end, p_state = p_gap[order], p_start[order], p_end[order], p_state[order]

    p_cause = np.where(p_state < 0, C_QUEUED, STATE_TO_CAUSE[np.maximum(p_state, 0)])
    drained = drain[p_gap] & ~np.isin(p_state, UNDRAINED) & (p_state >= 0)
    p_cause = np.where(drained, C_SYNC, p_cause)
    p_pointer = _piece_pointers(nxt, threads, pointer, p_gap, p_start, p_state, drained)

    gaps = DeviceGaps(
        rank=rank,
        device=device,
        win=win,
        a=a,
        b=b,
        next_kernel=nxt.next_kernel,
        thread=nxt.thread_code,
        queued=queued,
        drain=drain,
        pointer=pointer,
        p_gap=p_gap,
        p_start=p_start,
        p_end=p_end,
        p_state=p_state,
        p_cause=p_cause,
        p_pointer=p_pointer,
        thread_keys=nxt.thread_keys,
    )
    return gaps, busy_s, busy_e


@dataclass
class _Next:
    """Rule 1's answer per gap: the activity that ends it, its launch record and the host thread."""

    next_kernel: np.ndarray  # object: name of K, None for tail gaps
    has_l: np.ndarray  # bool: K has a launch record L
    l_end: np.ndarray  # L's end (0 without L)
    thread_code: np.ndarray  # index into thread_keys
    thread_keys: list  # (rank, pid, tid)


def _next_activity(
    rank: int, acts: pd.DataFrame, steps: pd.DataFrame, launches: pd.DataFrame, win: np.ndarray, b: np.ndarray
) -> _Next:
    """Rule 1: the activity K that starts at b ends the gap (none for a tail gap); its launch record L
    (same correlation) names the host thread T. Without K or L, T is the thread that owns the step.

      CPU T   ...|- cudaLaunchKernel (L) -|.............
      GPU     ===K0===]        idle        [=== K ===
                      a                    b
    """
    k_ts = acts["ts"].to_numpy(np.int64)
    pos = np.searchsorted(k_ts, b, side="left")
    has_k = (pos < k_ts.size) & (k_ts[np.minimum(pos, max(k_ts.size - 1, 0))] == b) if k_ts.size else pos < 0
    kpos = np.where(has_k, pos, 0)
    names = acts["name"].to_numpy(object)
    next_kernel = np.asarray(np.where(has_k, names[kpos] if names.size else None, None), dtype=object)
    next_kernel[pd.isna(next_kernel)] = None  # an activity the trace left without a name
    corr = acts["correlation"].to_numpy(dtype=np.float64, na_value=np.nan) if len(acts) else np.zeros(0)
    k_corr = np.where(has_k, corr[kpos] if corr.size else np.nan, np.nan)
    lidx = np.full(b.size, -1, dtype=np.int64)
    ok = ~np.isnan(k_corr)
    if ok.any() and len(launches):
        index = pd.Index(launches["correlation"].to_numpy(np.int64))
        lidx[ok] = index.get_indexer(k_corr[ok].astype(np.int64))
    has_l = lidx >= 0
    li = np.where(has_l, lidx, 0)
    l_end = np.where(has_l, launches["end"].to_numpy(np.int64)[li] if len(launches) else 0, 0)
    step_pid = steps["pid"].to_numpy(np.int64)[win]
    step_tid = steps["tid"].to_numpy(np.int64)[win]
    pid = np.where(has_l, launches["pid"].to_numpy(np.int64)[li] if len(launches) else 0, step_pid)
    tid = np.where(has_l, launches["tid"].to_numpy(np.int64)[li] if len(launches) else 0, step_tid)
    pcode, puniq = pd.factorize(pid)
    tcode, tuniq = pd.factorize(tid)
    width = max(len(tuniq), 1)
    thread_code, combo = pd.factorize(pcode.astype(np.int64) * width + tcode)
    thread_keys = [(rank, int(puniq[c // width]), int(tuniq[c % width])) for c in combo]
    return _Next(next_kernel, has_l, l_end, thread_code.astype(np.int64), thread_keys)


def _drains_and_slices(
    nxt: _Next, threads: Threads, a: np.ndarray, host_b: np.ndarray, queued: np.ndarray, tol: int
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Rule 4 per gap (drain, pointer) and rule 3's slices of [a, host_b) by each thread's state.

    Rule 4, sync drain: T was blocked in a sync (call or sync op) at a, within the tolerance:

      CPU T   |- aten::item [- cudaStreamSynchronize -] -|..launch..|
      GPU     ==K0===]              idle                            [=== K ===
                     a
      predicate: some sync interval [s, e) on T has s - tol <= a <= e + tol
      (tol = sync_tolerance_ns absorbs the host/device clock offset: the sync returns just
      after the device finished, and the two clocks disagree by a few µs).
    The host queued nothing ahead because it waited: the gap's non-dataloader time is `sync`."""
    drain = np.zeros(a.size, dtype=bool)
    pointer = np.full(a.size, -1, dtype=np.int64)
    pieces = []
    for code, key in enumerate(nxt.thread_keys):
        th = threads[key]
        g = np.flatnonzero(nxt.thread_code == code)
        if th.sync_s.size:
            us, ue = iv.union(th.sync_s - tol, th.sync_e + tol)
            k = np.searchsorted(us, a[g], side="right") - 1
            hit = (k >= 0) & (ue[np.maximum(k, 0)] >= a[g])
            drain[g] = hit & ~queued[g]
            ptr = _sync_pointer(th, a[g], tol)
            pointer[g] = np.where(drain[g], ptr, -1)
        q, ps, pe, st = th.timeline.slice(a[g], host_b[g])
        pieces.append((g[q], ps, pe, st.astype(np.int64)))
    empty = [np.zeros(0, np.int64)]
    cat = tuple(np.concatenate([p[i] for p in pieces] + empty).astype(np.int64) for i in range(4))
    return drain, pointer, cat  # type: ignore[return-value]


def _pending(
    nxt: _Next, threads: Threads, c: np.ndarray, b: np.ndarray, gaps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rule 3's pending pieces [c, b) of `gaps`: K issued, not yet started, which is `launch` (its
    latency) except while T was blocked in a blocking copy call (calls.CallKind.COPY, or a copy from pageable
    memory that waited), which is `sync`:
    the runtime held K behind the copy (ROCm: a kernel launched before a blocking hipMemcpyWithStream
    started as the call returned, the device idle throughout: docs/QUIRKS.md).

      CPU T   |- L -|...|------------- hipMemcpyWithStream -------------|
      GPU     ==]                          idle                        [=== K ===
                a   c   launch  |               sync                   b"""
    out = []
    for code, key in enumerate(nxt.thread_keys):
        g = gaps[nxt.thread_code[gaps] == code]
        if not g.size:
            continue
        th = threads[key]
        q, ps, pe, st = th.timeline.slice(c[g], b[g])
        copy = st == SYNC
        copy[copy] = _in_copy(th, ps[copy])
        out.append((g[q], ps, pe, np.where(copy, SYNC, LAUNCH)))
    empty = np.zeros(0, np.int64)
    return tuple(np.concatenate([o[i] for o in out] + [empty]).astype(np.int64) for i in range(4))  # type: ignore[return-value]


def _in_copy(th: Thread, at: np.ndarray) -> np.ndarray:
    """Whether the innermost sync event on `th` at each time is a blocking copy call."""
    p = iv.innermost_containing(th.sync_s, th.sync_e, th.sync_depth, at)
    if not at.size or not th.sync_s.size:
        return np.zeros(at.size, bool)
    k = np.maximum(p, 0)
    names, codes = np.unique(th.sync_name[k].astype(str), return_inverse=True)
    # a blocking copy by name, or a queued one the frames found waiting for its pageable copy (the only
    # queueing calls in the sync state: tracekit.analysis.events._waited_copies)
    copies = np.array([call_kind(n) in (CallKind.COPY, CallKind.COPY_ASYNC) for n in names], dtype=bool)
    return (p >= 0) & th.sync_is_call[k] & copies[codes]


def _piece_pointers(
    nxt: _Next,
    threads: Threads,
    pointer: np.ndarray,
    p_gap: np.ndarray,
    p_start: np.ndarray,
    p_state: np.ndarray,
    drained: np.ndarray,
) -> np.ndarray:
    """The sync call behind each sync piece: the drain's call, or the sync event the piece lies in."""
    p_pointer = np.full(p_gap.size, -1, dtype=np.int64)
    p_pointer[drained] = pointer[p_gap[drained]]
    own = (p_state == SYNC) & ~drained
    if own.any():
        for code, key in enumerate(nxt.thread_keys):
            m = own & (nxt.thread_code[p_gap] == code)
            if m.any():
                th = threads[key]
                p_pointer[m] = iv.innermost_containing(th.sync_s, th.sync_e, th.sync_depth, p_start[m])
    return p_pointer


def _sync_pointer(th: Thread, a: np.ndarray, tol: int) -> np.ndarray:
    """The sync event behind a drain at a: the innermost sync event at a, else one ending within tol
    before a, else one starting within tol after a. When that is a sync op (aten::item), the runtime
    sync call inside it that starts at or after a - tol is preferred: the op's copy may have finished
    before its cudaStreamSynchronize began."""
    p = iv.innermost_containing(th.sync_s, th.sync_e, th.sync_depth, a)
    for t in (a - tol, a + tol):
        miss = p < 0
        if not miss.any():
            break
        p[miss] = iv.innermost_containing(th.sync_s, th.sync_e, th.sync_depth, t[miss])
    calls = np.flatnonzero(th.sync_is_call)
    op = (p >= 0) & ~th.sync_is_call[np.maximum(p, 0)] if th.sync_s.size else p < -1
    if calls.size and op.any():
        cs = th.sync_s[calls]
        order = np.argsort(cs, kind="stable")
        calls, cs = calls[order], cs[order]
        k = np.searchsorted(cs, a[op] - tol, side="left")
        ok = k < cs.size
        kk = np.minimum(k, cs.size - 1)
        ok &= cs[kk] < th.sync_e[p[op]]
        p[np.flatnonzero(op)[ok]] = calls[kk[ok]]
    return p


def cause_totals(gaps: DeviceGaps, n_windows: int) -> np.ndarray:
    """Idle ns per (window, cause): array (n_windows, len(CAUSES))."""
    out = np.zeros((n_windows, len(CAUSES)), dtype=np.int64)
    np.add.at(out, (gaps.win[gaps.p_gap], gaps.p_cause), gaps.p_end - gaps.p_start)
    return out


def gap_causes(gaps: DeviceGaps) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: ns by cause (n_gaps, len(CAUSES)) and ns by host state + queued (n_gaps, 6)."""
    n = gaps.a.size
    by_cause = np.zeros((n, len(CAUSES)), dtype=np.int64)
    np.add.at(by_cause, (gaps.p_gap, gaps.p_cause), gaps.p_end - gaps.p_start)
    by_state = np.zeros((n, len(STATE_NAMES) + 1), dtype=np.int64)  # last column: queued
    np.add.at(
        by_state,
        (gaps.p_gap, np.where(gaps.p_state < 0, len(STATE_NAMES), gaps.p_state)),
        gaps.p_end - gaps.p_start,
    )
    return by_cause, by_state


__all__ = ["attribute_device", "cause_totals", "gap_causes", "DEFAULT_SYNC_TOLERANCE_NS"]
