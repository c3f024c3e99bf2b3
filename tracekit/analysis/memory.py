"""Device memory per step, explained (issue 38): from the trace's [memory] instants
(`profile_memory=True`) and what the capture recorded (manifest `memory`), per device: allocated and
reserved bytes over each step, at each step's peak the allocated bytes split by category (summing
exactly to the allocator's own total), the phase and op at the peak, the largest blocks alive there.

Each [memory] instant is one allocation (+Bytes) or free (-Bytes) of the block at `Addr`, with the
allocator's totals after it (`Total Allocated`, `Total Reserved`). The caching allocator writes them
on the host thread that asked for the block, so times are host times: an allocation lies inside the
op that made it. Blocks are paired by address within a profiler cycle (`pair_blocks`); a block's
category follows from where it was allocated and when it was freed (`classify`, the table
`memory_model.CATEGORIES`):

    step thread  |-- forward --|--- backward (engine ops) ---|- Optimizer.step -|
    activation      [alloc......................free)
    temporary         [a..f)          [a..f)                    [a..f)
    gradient                          [alloc.................................... (past backward)
    optimizer state                                              [alloc......... (past Optimizer.step)
    inputs/outputs  [alloc.................................................... (past the step's end)

    predicate: phase(t) = optimizer inside Optimizer.step# / Optimizer.zero_grad# annotations,
    else backward inside an autograd::engine::evaluate_function op or a step thread's backward window
    (tracekit.analysis.dispatch.backward_windows), else forward inside a step window, else outside.

What the trace never saw allocated (held before it began and never freed in it: parameters, optimizer
state, buffers, workspaces) is the allocator's total minus the live blocks the trace knows; it is split
by the capture's record of the model on the device (parameters, gradients kept between steps,
optimizer state: tracekit.capture.memory), the rest `unattributed`. Events that do not add up are
counted (`MemoryCheck`) and never make memory negative: a free of a block the trace never saw allocated
was held before the trace (counted; beyond what the trace's start held, counted as unexplained), an
address allocated twice closes its first block, live blocks beyond the allocator's total are taken off.

The CPU allocator (device -1, a CPU-only capture) reports totals of what it allocated while the
profiler ran only: its figures start from zero and hold nothing older.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.memory_model import (
    CATEGORY_NAMES,
    PHASES,
    DeviceMemory,
    LiveBlock,
    MemoryCheck,
    MemoryStep,
)

FORWARD, BACKWARD, OPTIMIZER, OUTSIDE = (
    PHASES.index(p) for p in ("forward", "backward", "optimizer", "outside")
)
PARAM, GRAD, OPT, ACT, TMP, IO, UNATTR = range(len(CATEGORY_NAMES))
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
ENGINE_PREFIX = "autograd::engine::evaluate_function"
LARGEST = 10  # blocks listed at the peak
# The remainder the trace never saw allocated is named by the capture's record in this order; what
# the trace saw allocated of a kind is taken off that kind's record first.
_RECORDED = (("parameters", PARAM), ("optimizer_state", OPT), ("gradients", GRAD))
# Live blocks beyond the allocator's total (events missing) are taken off these categories first.
_TAKE_OFF = (TMP, IO, ACT, GRAD, OPT)


@dataclass
class DeviceTimeline:
    """One device's memory events (sorted by time, then trace order) and its blocks: everything the
    report and the memory what-ifs (tracekit.whatif.memory) read.

    A *state* is the memory just after event i (i >= 0), or at the start of cycle c before its first
    event (i = -1 - c)."""

    rank: int
    device: int
    ts: np.ndarray  # event times
    allocated: np.ndarray  # the allocator's totals after each event
    reserved: np.ndarray
    nbytes: np.ndarray
    tid: np.ndarray
    pid: np.ndarray
    phase: np.ndarray  # int8: PHASES index
    window: np.ndarray  # the step window (index into `steps`) holding each event, -1: none
    cycle: np.ndarray  # of each event, 0.. in time order
    cycle_first: np.ndarray  # per cycle: its first event's index
    baseline: np.ndarray  # per cycle: allocated before its first event
    steps: pd.DataFrame  # the rank's step windows: step, ts, end; `cyc`: the cycle index as above
    blocks: pd.DataFrame  # size, alloc, free (event indices), cycle, category (module docstring)
    check: MemoryCheck
    addresses: bool
    recorded: Mapping[str, int]  # the capture's parameters / gradients / optimizer_state bytes here
    marks: Marks  # the rank's phase intervals
    _windows: Optional[tuple] = field(default=None, repr=False)

    def cycle_end(self, c: int) -> int:
        """One past the last event index of cycle c."""
        return int(self.cycle_first[c + 1]) if c + 1 < self.cycle_first.size else int(self.ts.size)

    def allocated_at(self, i: int) -> int:
        return int(self.allocated[i]) if i >= 0 else int(self.baseline[-1 - i])

    def reserved_at(self, i: int) -> int:
        if i >= 0:
            return int(self.reserved[i])
        first = int(self.cycle_first[-1 - i])  # what the cycle's first event saw: a bound, not a reading
        return max(int(self.reserved[first]), self.allocated_at(i)) if first < self.ts.size else 0

    def position(self, i: int) -> int:
        """The position of state i on the axis of `positions`."""
        pos, start = self.positions()
        return int(pos[i]) if i >= 0 else int(start[-1 - i])

    def spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Each block's live positions [lo, hi): from its allocation's state (a block held before the
        trace: its cycle's start) to its free's (never freed: the next cycle's start)."""
        if "lo" not in self.blocks:
            pos, start = self.positions()
            b = self.blocks
            alloc, free, cyc = (b[c].to_numpy() for c in ("alloc", "free", "cycle"))
            last = max(self.ts.size - 1, 0)
            held = alloc < self.cycle_first[cyc]
            end = np.append(start[1:], len(pos) + len(start))  # a cycle's end: the next one's start
            never = free >= np.append(self.cycle_first[1:], self.ts.size)[cyc]
            b["lo"] = np.where(held, start[cyc], pos[np.clip(alloc, 0, last)])
            b["hi"] = np.where(never, end[cyc], pos[np.clip(free, 0, last)])
        return self.blocks["lo"].to_numpy(), self.blocks["hi"].to_numpy()

    def live(self, i: int) -> np.ndarray:
        """Mask of the blocks alive in state i."""
        lo, hi = self.spans()
        p = self.position(i)
        return (lo <= p) & (hi > p)

    def live_by_category(self, states: list[int]) -> np.ndarray:
        """The live blocks' bytes by category (columns CATEGORY_NAMES) in each of `states`: each block
        counted where lo <= p < hi, from cumulative sums over the sorted ends (no pass per state)."""
        lo, hi = self.spans()
        p = np.array([self.position(i) for i in states], dtype=np.int64)
        cat = self.blocks["category"].to_numpy()
        size = self.blocks["size"].to_numpy().astype(np.int64)
        out = np.zeros((p.size, len(CATEGORY_NAMES)), np.int64)
        for c in np.unique(cat):  # one pass per category
            m = cat == c
            out[:, c] = _covered(lo[m], size[m], p) - _covered(hi[m], size[m], p)
        return out

    def by_category(self, i: int) -> tuple[np.ndarray, int]:
        """Allocated bytes by category in state i (summing exactly to the allocator's total there), and
        the excess of live blocks over that total, taken off (events missing)."""
        return self.split(self.live_by_category([i])[0], self.allocated_at(i))

    def split(self, live: np.ndarray, total: int) -> tuple[np.ndarray, int]:
        """The live blocks' bytes by category completed to `total`: what no block explains named by the
        capture's record, the rest unattributed; live bytes beyond `total` taken off (returned)."""
        out = live.astype(np.int64).copy()
        rest = total - int(out.sum())
        excess = 0
        if rest < 0:
            excess = -rest
            for c in _TAKE_OFF:
                cut = min(int(out[c]), -rest)
                out[c] -= cut
                rest += cut
        for name, c in _RECORDED:
            take = min(rest, max(0, int(self.recorded.get(name, 0)) - int(out[c])))
            out[c] += take
            rest -= take
        out[UNATTR] += rest
        return out, excess

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Every state in time order on one axis: (the position of each event's state, of each cycle's
        start state); cycle c's start comes just before its first event."""
        pos = np.arange(self.ts.size, dtype=np.int64) + self.cycle + 1
        return pos, self.cycle_first + np.arange(self.cycle_first.size, dtype=np.int64)

    def windows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The steps' (cycle, start, end) as arrays (made once)."""
        if self._windows is None:
            self._windows = tuple(self.steps[c].to_numpy(np.int64) for c in ("cyc", "ts", "end"))
        return self._windows

    def step_states(self, w: int) -> Optional[tuple[int, np.ndarray]]:
        """(the state at the start of step window w, the events inside it), or None where nothing is
        known of the device at that step (its cycle has no events)."""
        cyc, ws, we = self.windows()
        c = int(cyc[w])
        if c >= self.cycle_first.size or self.cycle_first[c] >= self.cycle_end(c):
            return None
        start, end = int(ws[w]), int(we[w])
        lo, hi = int(self.cycle_first[c]), self.cycle_end(c)
        a, b = lo + np.searchsorted(self.ts[lo:hi], [start, end], side="left")
        inside = np.arange(a, b, dtype=np.int64)  # the window's events: contiguous, sorted by time
        return (int(a) - 1 if a > lo else -1 - c), inside


def _covered(ends: np.ndarray, weights: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Σ weights of the `ends` at or before each of `p`."""
    order = np.argsort(ends, kind="stable")
    cum = np.concatenate([[0], np.cumsum(weights[order])])
    return cum[np.searchsorted(ends[order], p, side="right")]


def device_timelines(frames: Any, threads: Any, manifest: Mapping[str, Any]) -> list[DeviceTimeline]:
    """A DeviceTimeline per (rank, device) with memory events: the devices, or the host's allocator
    (device -1) where a rank has none."""
    mem = frames.memory
    if mem is None or not len(mem):
        return []
    out = []
    recorded = _recorded(manifest)
    for rank, rows in mem.groupby("rank", sort=True):  # one loop per rank
        devices = sorted(int(d) for d in rows["device"].unique())
        if any(d >= 0 for d in devices):
            devices = [d for d in devices if d >= 0]
        steps = frames.steps[frames.steps["rank"] == rank]
        marks = _phase_marks(frames.host, threads, int(rank), steps)
        for device in devices:  # one loop per device
            ev = rows[rows["device"] == device]
            out.append(_timeline(int(rank), device, ev, steps, marks, recorded.get((int(rank), device), {})))
    return out


def device_memory(tl: DeviceTimeline, threads: Any, manifest: Mapping[str, Any]) -> DeviceMemory:
    """The report of one device's memory (`DeviceTimeline`)."""
    found = []
    _, starts, ends = tl.windows()
    numbers = tl.steps["step"].to_numpy(np.int64)
    for w in range(len(tl.steps)):  # one loop per step (each a few searches)
        states = tl.step_states(w)
        if states is None:
            continue
        start, inside = states
        k = start
        if inside.size:
            top = int(inside[np.argmax(tl.allocated[inside])])
            if tl.allocated[top] > tl.allocated_at(start):
                k = top
        found.append((w, start, inside, k))
    live = tl.live_by_category([k for _, _, _, k in found])
    at_peak = np.array([k for w, _, _, k in found if k >= 0 and tl.window[k] == w], dtype=np.int64)
    inner, _ = event_ops(tl, threads, at_peak)  # one lookup per thread for every step's peak
    op_at = dict(zip(at_peak.tolist(), inner))
    steps_out = []
    excess = 0
    for (w, start, inside, k), row in zip(found, live):  # one loop per step
        cats, x = tl.split(row, tl.allocated_at(k))
        excess = max(excess, x)
        ws = int(starts[w])
        at_event = k >= 0 and tl.window[k] == w
        steps_out.append(
            MemoryStep(
                step=int(numbers[w]),
                start_ns=ws,
                dur_ns=int(ends[w]) - ws,
                allocated_start=tl.allocated_at(start),
                allocated_end=tl.allocated_at(int(inside[-1]) if inside.size else start),
                peak_allocated=tl.allocated_at(k),
                peak_reserved=max(
                    tl.reserved_at(start), int(tl.reserved[inside].max()) if inside.size else 0
                ),
                peak_at_ns=int(tl.ts[k]) - ws if at_event else 0,
                peak_phase=PHASES[int(tl.phase[k])] if at_event else "forward",
                peak_op=op_at.get(k) if at_event else None,
                by_category={name: int(cats[j]) for j, name in enumerate(CATEGORY_NAMES)},
                reserve_at_peak=max(tl.reserved_at(k) - tl.allocated_at(k), 0),
            )
        )
    largest: tuple[LiveBlock, ...] = ()
    peak_step = None
    if steps_out:
        top = max(range(len(steps_out)), key=lambda j: steps_out[j].peak_allocated)
        largest = tuple(_largest(tl, found[top][3], threads))
        peak_step = steps_out[top].step
    check = tl.check if not excess else MemoryCheck(**{**tl.check.__dict__, "excess_bytes": excess})
    return DeviceMemory(
        rank=tl.rank,
        device=tl.device,
        steps=tuple(steps_out),
        largest=largest,
        check=check,
        trace_max_allocated=int(tl.allocated.max()) if tl.ts.size else 0,
        allocator_peak=_allocator_peak(manifest, tl.rank, peak_step),
        device_total=_device_total(manifest, tl.device),
        model=dict(tl.recorded),
        addresses=tl.addresses,
        host_allocator=tl.device < 0,
    )


# -- building a device's timeline ---------------------------------------------------------------------
# -- building a device's timeline ---------------------------------------------------------------------
@dataclass
class Marks:
    """A rank's phase intervals (disjoint, sorted): optimizer, zero_grad, backward."""

    opt_s: np.ndarray
    opt_e: np.ndarray
    zero_s: np.ndarray
    zero_e: np.ndarray
    bw_s: np.ndarray
    bw_e: np.ndarray


def names_matching(names: pd.Series, pred: Any) -> np.ndarray:
    """Mask of a categorical name column where `pred(name)` holds, evaluated once per distinct name (a
    string per row of a million-row frame was the memory analysis' peak)."""
    if not len(names):
        return np.zeros(0, bool)
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    hit = np.array([bool(pred(str(c))) for c in names.cat.categories] + [False], dtype=bool)
    codes = names.cat.codes.to_numpy()
    return hit[np.where(codes >= 0, codes, len(hit) - 1)]


def _phase_marks(host: pd.DataFrame, threads: Any, rank: int, steps: pd.DataFrame) -> Marks:
    h = host[(host["rank"] == rank).to_numpy()]
    ts, end = h["ts"].to_numpy(np.int64), h["end"].to_numpy(np.int64)
    opt = names_matching(h["name"], lambda n: n.startswith(OPTIMIZER_PREFIXES))
    zero = names_matching(h["name"], lambda n: n.startswith(ZERO_GRAD_PREFIX))
    engine = names_matching(h["name"], lambda n: n.startswith(ENGINE_PREFIX))
    bw = [(ts[engine], end[engine])]
    for r, p, t in steps[["rank", "pid", "tid"]].drop_duplicates().itertuples(index=False):  # step threads
        th = threads[(int(r), int(p), int(t))]
        bw.append((th.wait_s, th.wait_e))
    bw_s, bw_e = iv.union(np.concatenate([b[0] for b in bw]), np.concatenate([b[1] for b in bw]))
    opt_s, opt_e = iv.union(ts[opt], end[opt])
    zero_s, zero_e = iv.union(ts[zero], end[zero])
    return Marks(opt_s, opt_e, zero_s, zero_e, bw_s, bw_e)


def _containing(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the interval of the disjoint sorted family (s, e) holding each t, -1: none."""
    return iv.window_of(s, e, t)


def _timeline(
    rank: int, device: int, ev: pd.DataFrame, steps: pd.DataFrame, marks: Marks, recorded: Mapping[str, int]
) -> DeviceTimeline:
    ts = ev["ts"].to_numpy(np.int64)
    order = np.argsort(ts, kind="stable")  # trace order among equal times
    ev = ev.iloc[order]
    ts = ts[order]
    nbytes = ev["bytes"].to_numpy(np.int64)
    allocated = ev["allocated"].to_numpy(np.int64)
    addr = ev["addr"].to_numpy(np.int64)
    steps = steps.sort_values("ts").reset_index(drop=True)
    ws, we = steps["ts"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)
    starts = _cycle_starts(steps)
    steps["cyc"] = _cycle_index(starts, ws)
    window = iv.window_of(ws, we, ts)
    cycle = _cycle_index(starts, ts)
    phase = np.where(window >= 0, FORWARD, OUTSIDE).astype(np.int8)
    phase[_containing(marks.bw_s, marks.bw_e, ts) >= 0] = BACKWARD
    phase[_containing(marks.opt_s, marks.opt_e, ts) >= 0] = OPTIMIZER
    n_cycles = max(int(cycle.max()) + 1 if ts.size else 0, starts.size)
    cycle_first = np.searchsorted(cycle, np.arange(n_cycles), side="left")
    first = np.minimum(cycle_first, max(ts.size - 1, 0))
    baseline = np.maximum(allocated[first] - nbytes[first], 0) if ts.size else np.zeros(n_cycles, np.int64)
    addresses = bool(ts.size) and bool((addr >= 0).all())
    check = _check(ts, allocated, nbytes, cycle, window, steps, n_cycles)
    blocks, pairing = pair_blocks(addr, nbytes, cycle, cycle_first) if addresses else (_no_blocks(), {})
    tl = DeviceTimeline(
        rank=rank,
        device=device,
        ts=ts,
        allocated=allocated,
        reserved=ev["reserved"].to_numpy(np.int64),
        nbytes=nbytes,
        tid=ev["tid"].to_numpy(np.int64),
        pid=ev["pid"].to_numpy(np.int64),
        phase=phase,
        window=window,
        cycle=cycle,
        cycle_first=cycle_first,
        baseline=baseline,
        steps=steps,
        blocks=blocks,
        check=check,
        addresses=addresses,
        recorded=recorded,
        marks=marks,
    )
    if addresses:
        blocks["category"] = classify(tl, marks)
        cyc = blocks["cycle"].to_numpy()
        pre = blocks["alloc"].to_numpy() < cycle_first[cyc]
        size = blocks["size"].to_numpy()
        held = np.bincount(cyc[pre], weights=size[pre], minlength=n_cycles)
        tl.check = MemoryCheck(
            **{
                **check.__dict__,
                **pairing,
                "frees_before_trace": int(pre.sum()),
                "frees_before_trace_bytes": int(size[pre].sum()),
                "unexplained_free_bytes": int(np.maximum(held - baseline, 0).sum()),
            }
        )
    return tl


def _cycle_starts(steps: pd.DataFrame) -> np.ndarray:
    """The start of each profiler cycle of a rank's steps (tracekit.analysis.steps.cycles), in time order."""
    if not len(steps):
        return np.zeros(0, np.int64)
    if "cycle" not in steps:
        return steps["ts"].to_numpy(np.int64)[:1]
    return np.sort(steps.groupby("cycle")["ts"].min().to_numpy(np.int64))


def _cycle_index(starts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The cycle of each time: that of the last cycle start at or before it (the first before any)."""
    return np.maximum(np.searchsorted(starts, t, side="right") - 1, 0).astype(np.int64)


def _check(
    ts: np.ndarray,
    allocated: np.ndarray,
    nbytes: np.ndarray,
    cycle: np.ndarray,
    window: np.ndarray,
    steps: pd.DataFrame,
    n_cycles: int,
) -> MemoryCheck:
    """The counts that need no pairing: totals that do not follow, events outside steps."""
    follows = np.ones(ts.size, bool)
    if ts.size > 1:
        same = cycle[1:] == cycle[:-1]
        follows[1:] = ~same | (allocated[1:] == allocated[:-1] + nbytes[1:])
    outside = window < 0
    last_end = np.full(n_cycles, np.iinfo(np.int64).max)
    if len(steps):
        ends = steps.groupby("cyc")["end"].max()
        last_end[ends.index.to_numpy(np.int64)] = ends.to_numpy(np.int64)
    return MemoryCheck(
        events=int(ts.size),
        total_mismatches=int((~follows).sum()),
        outside_steps=int(outside.sum()),
        after_last_step=int((outside & (ts >= last_end[cycle])).sum()) if ts.size else 0,
    )


def pair_blocks(
    addr: np.ndarray, nbytes: np.ndarray, cycle: np.ndarray, cycle_first: np.ndarray
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Blocks from allocation and free events paired by address within a cycle (vectorised: the events
    of one address in trace order alternate allocation, free):

        addr A   +64 ... -64 ... +64 ...        → block [+64, -64), block [+64, end of cycle)
        addr B   -32 ...                        → block [held before the trace, -32)
        addr C   +16 ... +16 ... -16            → [+16, +16) closed by the second (double allocation)
        addr D   +8 ... -8 ... -8               → the second free freed nothing (double free, ignored)

    Returns (blocks: size, alloc, free event indices, and cycle; the counts of double allocations,
    double frees and size mismatches)."""
    n = addr.size
    idx = np.arange(n, dtype=np.int64)
    live = nbytes != 0
    sel = idx[live]
    order = sel[np.lexsort((sel, addr[sel], cycle[sel]))]
    a, c, b = addr[order], cycle[order], nbytes[order]
    nxt_same = np.zeros(order.size, bool)
    if order.size > 1:
        nxt_same[:-1] = (a[1:] == a[:-1]) & (c[1:] == c[:-1])
    prv_same = np.zeros(order.size, bool)
    prv_same[1:] = nxt_same[:-1]
    is_alloc = b > 0
    nxt_alloc = np.zeros(order.size, bool)
    nxt_alloc[:-1] = is_alloc[1:]
    prv_alloc = np.zeros(order.size, bool)
    prv_alloc[1:] = is_alloc[:-1]
    cycle_end = np.append(cycle_first[1:], n) if cycle_first.size else np.zeros(0, np.int64)
    # allocations: freed by the next event of the address (a free, or a second allocation), or never
    al = np.flatnonzero(is_alloc)
    closed = nxt_same[al]
    free_at = np.where(closed, order[np.minimum(al + 1, order.size - 1)], cycle_end[c[al]])
    double_alloc = closed & nxt_alloc[al]
    mismatch = closed & ~nxt_alloc[al] & (b[np.minimum(al + 1, order.size - 1)] != -b[al])
    # frees without an allocation before them: held before the trace, or a double free
    fr = np.flatnonzero(~is_alloc)
    first = ~prv_same[fr]
    double_free = prv_same[fr] & ~prv_alloc[fr]
    pre = fr[first]
    blocks = pd.DataFrame(
        {
            "size": np.concatenate([b[al], -b[pre]]),
            "alloc": np.concatenate([order[al], cycle_first[c[pre]] - 1]),
            "free": np.concatenate([free_at, order[pre]]),
            "cycle": np.concatenate([c[al], c[pre]]),
        }
    )
    counts = {
        "double_allocations": int(double_alloc.sum()),
        "double_frees": int(double_free.sum()),
        "size_mismatches": int(mismatch.sum()),
    }
    return blocks, counts


def _no_blocks() -> pd.DataFrame:
    z = np.zeros(0, np.int64)
    return pd.DataFrame({"size": z, "alloc": z, "free": z, "cycle": z, "category": z.astype(np.int8)})


def classify(tl: DeviceTimeline, marks: Marks) -> np.ndarray:
    """The category (CATEGORY_NAMES index) of each block of `tl` (module docstring, CATEGORIES)."""
    b = tl.blocks
    n = tl.ts.size
    alloc = b["alloc"].to_numpy()
    free = b["free"].to_numpy()
    before = alloc < tl.cycle_first[b["cycle"].to_numpy()]
    freed = free < np.append(tl.cycle_first[1:], n)[b["cycle"].to_numpy()]
    ai = np.clip(alloc, 0, max(n - 1, 0))
    fi = np.clip(free, 0, max(n - 1, 0))
    t_alloc, t_free = tl.ts[ai], np.where(freed, tl.ts[fi], np.iinfo(np.int64).max)
    pa = tl.phase[ai]
    pf = np.where(freed, tl.phase[fi], OUTSIDE)
    out = np.full(len(b), IO, np.int8)
    # optimizer: state if it outlives the Optimizer.step that made it
    k = _containing(marks.opt_s, marks.opt_e, t_alloc)
    opt_end = np.where(k >= 0, marks.opt_e[np.maximum(k, 0)] if marks.opt_e.size else 0, 0)
    m = (pa == OPTIMIZER) & ~before
    out[m] = np.where(t_free[m] <= opt_end[m], TMP, OPT)
    # backward: a gradient if it outlives the backward that made it
    k = _containing(marks.bw_s, marks.bw_e, t_alloc)
    bw_end = np.where(k >= 0, marks.bw_e[np.maximum(k, 0)] if marks.bw_e.size else 0, 0)
    m = (pa == BACKWARD) & ~before
    out[m] = np.where(t_free[m] <= bw_end[m], TMP, GRAD)
    # forward (and outside steps): saved for a backward, freed in its step, or carried past it
    m = ((pa == FORWARD) | (pa == OUTSIDE)) & ~before
    starts = tl.steps["ts"].to_numpy(np.int64)
    slot_alloc = np.searchsorted(starts, t_alloc, side="right")
    slot_free = np.searchsorted(starts, t_free, side="right")
    same_step = freed & (slot_alloc == slot_free)
    out[m & freed & (pf == BACKWARD)] = ACT
    out[m & same_step & (pf != BACKWARD)] = TMP
    # held before the trace and freed in it: a gradient set to None by zero_grad, else the previous step's
    in_zero = _containing(marks.zero_s, marks.zero_e, t_free) >= 0
    out[before] = np.where(in_zero[before], GRAD, IO)
    return out


def event_ops(tl: DeviceTimeline, threads: Any, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The innermost and the outermost cpu_op around each of `events` (indices) on its own thread
    (object arrays, None where no op covers it)."""
    inner = np.full(events.size, None, dtype=object)
    outer = np.full(events.size, None, dtype=object)
    keys = np.stack([tl.pid[events], tl.tid[events]], axis=1) if events.size else np.zeros((0, 2), np.int64)
    for pid, tid in {(int(p), int(t)) for p, t in keys}:  # one loop per thread
        th = threads[(tl.rank, pid, tid)]
        m = (tl.pid[events] == pid) & (tl.tid[events] == tid)
        if th.op_s.size == 0 or not m.any():
            continue
        t = tl.ts[events[m]]
        k = iv.innermost_containing(th.op_s, th.op_e, th.op_depth, t)
        inner[m] = np.where(k >= 0, th.op_name[np.maximum(k, 0)], None)
        k = iv.top_level_containing(th.op_s, th.op_e, th.op_depth, t)
        outer[m] = np.where(k >= 0, th.op_name[np.maximum(k, 0)], None)
    return inner, outer


# -- the report's details -------------------------------------------------------------------------
def _largest(tl: DeviceTimeline, i: int, threads: Any) -> list[LiveBlock]:
    live = np.flatnonzero(tl.live(i))
    if not live.size:
        return []
    b = tl.blocks
    size = b["size"].to_numpy()[live]
    top = live[np.argsort(-size, kind="stable")[:LARGEST]]
    starts = tl.steps["ts"].to_numpy(np.int64)
    numbers = tl.steps["step"].to_numpy(np.int64)
    alloc = b["alloc"].to_numpy()[top]
    inner, outer = event_ops(tl, threads, np.maximum(alloc, 0))

    def step_of(k: int) -> Optional[int]:
        return int(numbers[tl.window[k]]) if tl.window[k] >= 0 else None

    def at(k: int) -> Optional[int]:
        return int(tl.ts[k] - starts[tl.window[k]]) if tl.window[k] >= 0 else None

    out = []
    for n, j in enumerate(top):  # at most LARGEST
        a, f, c = int(b["alloc"].iat[j]), int(b["free"].iat[j]), int(b["cycle"].iat[j])
        held = a < tl.cycle_first[c]
        freed = f < tl.cycle_end(c)
        out.append(
            LiveBlock(
                bytes=int(b["size"].iat[j]),
                category=CATEGORY_NAMES[int(b["category"].iat[j])],
                op=None if held else inner[n],
                top_op=None if held else outer[n],
                phase="before" if held else PHASES[int(tl.phase[a])],
                alloc_step=None if held else step_of(a),
                alloc_at_ns=None if held else at(a),
                free_step=step_of(f) if freed else None,
                free_at_ns=at(f) if freed else None,
            )
        )
    return out


def _recorded(manifest: Mapping[str, Any]) -> dict[tuple[int, int], dict[str, int]]:
    """The capture's record of the model per (rank, device): {"parameters", "gradients",
    "optimizer_state"} bytes (tracekit.capture.memory; the host's under device -1)."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for rec in manifest.get("ranks") or []:
        model = ((rec.get("memory") or {}) if isinstance(rec, Mapping) else {}).get("model") or {}
        for dev, kinds in model.items():
            device = -1 if dev == "cpu" else int(dev)
            out[(int(rec.get("rank", 0)), device)] = {k: int(v) for k, v in kinds.items() if v is not None}
    return out


def _allocator_peak(manifest: Mapping[str, Any], rank: int, step: Optional[int]) -> Optional[int]:
    """max_memory_allocated of profiled step `step` (ProfilerStep#N) as the capture read it."""
    if step is None:
        return None
    for rec in manifest.get("ranks") or []:
        if not isinstance(rec, Mapping) or int(rec.get("rank", 0)) != rank:
            continue
        prof = rec.get("profiled") or {}
        numbers, peaks = prof.get("profiler_step") or [], prof.get("peak_memory_bytes") or []
        for n, p in zip(numbers, peaks):
            if n == step and p:
                return int(p)
    return None


def _device_total(manifest: Mapping[str, Any], device: int) -> Optional[int]:
    dev = manifest.get("device") or {}
    total = dev.get("total_memory_bytes") if isinstance(dev, Mapping) and device >= 0 else None
    return int(total) if total else None
