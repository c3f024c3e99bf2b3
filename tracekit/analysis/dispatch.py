"""THE definition of host dispatch gaps (DESIGN.md "Host dispatch gaps"), and the interval helpers it
rests on (with tracekit.analysis.intervals): numpy only. The analysis (tracekit.analysis.host) and the
replay graph (tracekit.whatif) call it; nothing stores its pieces (captures written by earlier tracekit
versions hold `dispatch_gap` rows, which no command reads)::

    cpu_op     [aten::mm  )      [aten::add)
                 [nested)
    gap                   [-----)             ← one piece: between consecutive top-level cpu_ops

A piece is cut at step boundaries and leaves out the thread's backward windows and DataLoader fetches
(`dispatch_gap_pieces`).
"""

from __future__ import annotations

import numpy as np

from tracekit.analysis.intervals import union

# The autograd engine runs each backward node inside a record_function of this name (torch ≥ 1.8).
ENGINE_OP_PREFIX = "autograd::engine::evaluate_function"


def start_order(starts: np.ndarray, ends: np.ndarray, *groups: np.ndarray) -> np.ndarray:
    """The indices that sort intervals by `groups` (most significant first), then by start, longer
    first on equal starts, ties kept in input order: `np.lexsort((starts - ends, starts, *groups[::-1]))`.

    lexsort costs as much on sorted input as on any; profiler events arrive nearly sorted by start,
    which a stable argsort (timsort) orders far faster. So: order by start,
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
    return union(lo, hi)


def excluded_windows(
    bw_starts: np.ndarray, bw_ends: np.ndarray, dl_starts: np.ndarray, dl_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What a thread's dispatch gaps leave out: its backward windows and its DataLoader `__next__`
    spans (the fetch has its own figure, `dataloader`, and may sleep or wait for workers), as disjoint
    sorted intervals."""
    return union(np.r_[bw_starts, dl_starts], np.r_[bw_ends, dl_ends])


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
