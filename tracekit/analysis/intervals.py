"""Vectorised interval algebra over int64 nanosecond arrays (numpy; no Python loop per interval).

Intervals are half-open [start, end). "Disjoint sorted" means sorted by start with end[i] <= start[i+1].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

I64 = np.int64
NEG_INF = np.iinfo(np.int64).min // 4
POS_INF = np.iinfo(np.int64).max // 4


def as_i64(x) -> np.ndarray:
    return np.asarray(x, dtype=I64)


def union(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals (any order, overlaps allowed) into disjoint sorted ones. Touching ones merge.
    Empty intervals (end <= start) are dropped."""
    s, e = as_i64(starts), as_i64(ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if s.size > 1 and not np.all(s[1:] >= s[:-1]):  # profiler events mostly arrive sorted
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new group starts where this start lies beyond everything before it; it ends at the reach of
    # its last interval
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], reach[last]


def intersect_windows(s, e, ws, we) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of disjoint sorted intervals (s, e) inside disjoint sorted windows (ws, we).

    Returns (window_index, interval_index, piece_start, piece_end), ordered by window then start;
    empty pieces are dropped.
    """
    s, e, ws, we = as_i64(s), as_i64(e), as_i64(ws), as_i64(we)
    # intervals overlapping window w: end > ws[w] and start < we[w]
    lo = np.searchsorted(e, ws, side="right")
    hi = np.searchsorted(s, we, side="left")
    counts = np.maximum(hi - lo, 0)
    win = np.repeat(np.arange(ws.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    idx = np.repeat(lo, counts) + offsets
    ps = np.maximum(s[idx], ws[win])
    pe = np.minimum(e[idx], we[win])
    keep = pe > ps
    return win[keep], idx[keep], ps[keep], pe[keep]


def complement(s, e, lo: int = NEG_INF, hi: int = POS_INF) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) minus disjoint sorted intervals (s, e): the gaps, disjoint sorted."""
    s, e = as_i64(s), as_i64(e)
    gs = np.concatenate([[lo], e]).astype(I64)
    ge = np.concatenate([s, [hi]]).astype(I64)
    keep = ge > gs
    return gs[keep], ge[keep]


def gaps_in_windows(busy_s, busy_e, ws, we) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal intervals of (window minus busy) for disjoint sorted busy and windows.

    Returns (window_index, gap_start, gap_end)."""
    gs, ge = complement(busy_s, busy_e)
    win, _, ps, pe = intersect_windows(gs, ge, ws, we)
    return win, ps, pe


def total_overlap(s, e, ws, we) -> np.ndarray:
    """Per window: the length of (window ∩ union of disjoint sorted intervals (s, e))."""
    win, _, ps, pe = intersect_windows(s, e, ws, we)
    return np.bincount(win, weights=(pe - ps), minlength=len(ws)).astype(I64)


def nesting_depth(starts, ends) -> np.ndarray:
    """Depth of each interval in a properly nested family (0 = top level), by counting.

    An interval's depth is the number of intervals that started before it (in (start asc, end desc)
    order, so a parent sharing its child's start comes first) minus those that ended at or before its
    start. Overlapping-but-not-nested intervals get a plausible depth; nothing breaks.
    """
    s, e = as_i64(starts), as_i64(ends)
    n = s.size
    if n == 0:
        return np.zeros(0, dtype=I64)
    order = np.lexsort((-e, s))
    pos = np.empty(n, dtype=I64)
    pos[order] = np.arange(n)
    ended = np.searchsorted(np.sort(e), s, side="right")
    # an interval of zero length that ends at its own start counted itself as ended
    ended = ended - (e <= s)
    return np.maximum(pos - ended, 0)


def cover(starts: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    """Per segment i of n (between boundaries i and i + 1), whether some interval [starts, ends), given
    as boundary indices (0 .. n; larger ones cover nothing), covers it: each interval +1 at its start and
    -1 at its end, the running sum > 0."""
    starts, ends = as_i64(starts), as_i64(ends)
    if (starts.size and starts.min() < 0) or (ends.size and ends.min() < 0):
        raise ValueError("cover: a negative boundary index")
    d = np.bincount(starts, minlength=n + 1)[: n + 1] - np.bincount(ends, minlength=n + 1)[: n + 1]
    return np.cumsum(d[:n]) > 0


def window_of(ws, we, t) -> np.ndarray:
    """For each time in t, the index of the window [ws[i], we[i]) containing it, or -1.

    The windows must be disjoint and sorted by start (step windows, one depth level of a nested family)."""
    ws, we, t = as_i64(ws), as_i64(we), as_i64(t)
    if ws.size == 0:
        return np.full(t.size, -1, dtype=I64)
    k = np.searchsorted(ws, t, side="right") - 1
    return np.where((k >= 0) & (we[np.maximum(k, 0)] > t), k, -1)


def _containing_at_level(s, e, d, level: int, t, out: np.ndarray) -> None:
    """Set out[j] to the interval of depth `level` containing t[j], where there is one."""
    idx = np.flatnonzero(d == level)
    order = idx[np.argsort(s[idx], kind="stable")]
    k = window_of(s[order], e[order], t)
    hit = k >= 0
    out[hit] = order[k[hit]]


def innermost_containing(starts, ends, depth, t) -> np.ndarray:
    """For each time in t, the index of the deepest interval with start <= t < end, or -1.

    Intervals of one depth are disjoint in a nested family, so each depth level is one searchsorted
    (the loop runs over depth levels, not intervals)."""
    s, e, d, t = as_i64(starts), as_i64(ends), as_i64(depth), as_i64(t)
    out = np.full(t.size, -1, dtype=I64)
    if s.size == 0 or t.size == 0:
        return out
    for level in range(int(d.max()) + 1):
        _containing_at_level(s, e, d, level, t, out)
    return out


def top_level_containing(starts, ends, depth, t) -> np.ndarray:
    """Index of the depth-0 interval containing each time in t, or -1."""
    s, e, d, t = as_i64(starts), as_i64(ends), as_i64(depth), as_i64(t)
    out = np.full(t.size, -1, dtype=I64)
    _containing_at_level(s, e, d, 0, t, out)
    return out


@dataclass(frozen=True)
class StateTimeline:
    """A piecewise-constant state function of time: state[i] holds on [bounds[i], bounds[i+1]).

    Built from prioritised interval families: at each instant the state is the highest priority
    among the families with an interval covering it, else `default`. bounds[0] is -inf, bounds[-1] +inf.
    """

    bounds: np.ndarray  # int64, len n+1
    state: np.ndarray  # int8 codes, len n

    @classmethod
    def build(cls, families: list[tuple[np.ndarray, np.ndarray]], default: int = 0) -> StateTimeline:
        """families[p] = (starts, ends) of priority p (a higher index wins); state code = p + 1,
        `default` (0) where none covers."""
        pts = [np.array([NEG_INF, POS_INF], dtype=I64)]
        for s, e in families:
            pts += [as_i64(s), as_i64(e)]
        bounds = np.sort(np.concatenate(pts))
        bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]
        mids = bounds[:-1]
        state = np.full(mids.size, default, dtype=np.int8)
        for p, (s, e) in enumerate(families):
            us, ue = union(s, e)
            if us.size == 0:
                continue
            # segments [bounds[i], bounds[i+1]) lie wholly inside or outside the union
            k = np.searchsorted(us, mids, side="right") - 1
            ok = k >= 0
            kk = np.where(ok, k, 0)
            covered = ok & (ue[kk] > mids)
            state[covered] = p + 1
        return cls.of(bounds, state)

    @classmethod
    def of(cls, bounds: np.ndarray, state: np.ndarray) -> StateTimeline:
        """The timeline with state[i] on [bounds[i], bounds[i+1]), runs of one state merged (bounds[0]
        -inf, bounds[-1] +inf)."""
        change = np.empty(state.size, dtype=bool)
        change[0] = True
        change[1:] = state[1:] != state[:-1]
        keep = np.flatnonzero(change)
        return cls(bounds=np.concatenate([bounds[keep], bounds[-1:]]), state=state[keep])

    def at(self, t) -> np.ndarray:
        """The state at each time in t."""
        return self.state[np.searchsorted(self.bounds, as_i64(t), side="right") - 1]

    def slice(self, a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Cut each query [a[i], b[i]) (any order, may overlap) at the state boundaries.

        Returns (query_index, piece_start, piece_end, state) ordered by query then time."""
        a, b = as_i64(a), as_i64(b)
        first = np.searchsorted(self.bounds, a, side="right") - 1
        last = np.searchsorted(self.bounds, b, side="left") - 1
        counts = np.maximum(last - first + 1, 0) * (b > a)
        q = np.repeat(np.arange(a.size), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        seg = np.repeat(first, counts) + offsets
        ps = np.maximum(self.bounds[seg], a[q])
        pe = np.minimum(self.bounds[seg + 1], b[q])
        keep = pe > ps
        return q[keep], ps[keep], pe[keep], self.state[seg[keep]]

    def totals(self, a, b, n_states: int) -> np.ndarray:
        """Time per state in each query window: array (len(a), n_states)."""
        q, ps, pe, st = self.slice(a, b)
        out = np.zeros((len(as_i64(a)), n_states), dtype=I64)
        np.add.at(out, (q, st.astype(I64)), pe - ps)
        return out
