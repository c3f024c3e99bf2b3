"""The one definition of a step (DESIGN.md "Words": step), shared by analyze, whatif, diff and the exports.

A step is what a user measures with CUDA events at step boundaries: step N ends when its host window
(ProfilerStep#N) has ended *and* the device work launched in it is done; it starts where step N-1 ended.
On a host-bound loop that is the host window (plus the profiler's few µs between windows); on a host
that runs ahead it is the device's period, not the host's window:

    host    |--- step 1 ---|--- step 2 ---|--- step 3 ---|                   (windows: 4.5 ms)
    device  |==== work of 1 ====|==== work of 2 ====|==== work of 3 ====|    (periods: 5.3 ms)
            ^ start             ^ point 1           ^ point 2           ^ point 3

    point_N = max(point_(N-1), host window N's end, end of the device work launched in window N)

Profiler cycles (several trace files of one rank, e.g. the default schedule's repeat=2) are separate
timelines: a cycle's first step starts at its first window's start (or when the device work queued before
it is done, whichever is later), never at the previous cycle's last point: the gap between cycles (trace
export, profiler restart) belongs to no step. A new cycle starts where the step numbers jump (the
profiler's wait and warm-up steps lie between cycles) or where a trace file of the rank starts.

The functions work on arrays of times so that the what-if replay applies the very same definition to
replayed times (tracekit.whatif.replay.StepModel): `assign_work` once on the observed times, `bounds` on any.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.launch import launch_rows
from tracekit.errors import TraceFormatError
from tracekit.parse.iterations import file_starts

_MIN = np.iinfo(np.int64).min


def cycles(
    rank: np.ndarray, step: np.ndarray, ts: np.ndarray, cycle_starts: dict | None = None
) -> np.ndarray:
    """The profiler cycle of each step window (rows sorted by rank, ts), counted per rank from 0: a new
    cycle starts where the step number is not the previous one's + 1 (unknown numbers, -1, never split)
    or where a trace file of the rank starts (`cycle_starts`: rank -> start times of its files)."""
    n = rank.size
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    same = np.r_[False, rank[1:] == rank[:-1]]
    known = (step >= 0) & np.r_[False, step[:-1] >= 0]
    jump = same & known & (step != np.r_[0, step[:-1]] + 1)
    if cycle_starts:
        for r, starts in cycle_starts.items():  # one loop per rank with several files
            m = np.flatnonzero(rank == r)
            if m.size < 2:
                continue
            s = np.sort(np.asarray(list(starts), np.int64))
            # a file starts after window i-1 began and at or before window i began
            k = np.searchsorted(s, ts[m], side="right")
            jump[m[1:]] |= k[1:] != k[:-1]
    c = np.cumsum(jump)
    first = np.flatnonzero(~same)  # each rank's first row
    return (c - c[first][np.searchsorted(first, np.arange(n), side="right") - 1]).astype(np.int64)


def cycle_starts_of(meta: dict | None) -> dict:
    """rank -> the start times of its trace files, for the ranks with several (parse.iterations)."""
    return file_starts((meta or {}).get("traces"))


def check_step_numbers(steps: pd.DataFrame) -> None:
    """A step number that repeats on one rank means two runs (or a trace copied into a job twice):
    TraceFormatError, one line (exit 2)."""
    known = steps[steps["step"] >= 0]
    dup = known[known.duplicated(["rank", "step"], keep=False)]
    if len(dup):
        r, s = int(dup["rank"].iloc[0]), int(dup["step"].iloc[0])
        raise TraceFormatError(
            f"rank {r} has step ProfilerStep#{s} {int((dup['step'] == s).sum())} times: its trace files are "
            "not cycles of one run (a copy, or several runs?); parse each run on its own"
        )


@dataclass(frozen=True)
class Work:
    """Which step window each device activity of one (rank, device) belongs to, fixed on observed times:
    `step[i]` the index of the window its launch (else its start) lies in, -1 for none; `pre[i]` the index
    of the first window of the cycle it was queued before (work launched before the cycle's first window,
    e.g. in the warm-up step), -1 for none. `groups`: both grouped by window for `bounds`."""

    step: np.ndarray
    pre: np.ndarray
    groups: tuple = ()  # per kind (step, pre): (activity order, group starts, the groups' windows)


def _grouped(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the activities with k >= 0 in order of k, where each k's run starts, the k of each run)."""
    idx = np.flatnonzero(k >= 0)
    order = idx[np.argsort(k[idx], kind="stable")]
    kk = k[order]
    first = np.flatnonzero(np.r_[True, kk[1:] != kk[:-1]]) if kk.size else np.zeros(0, np.int64)
    return order, first, kk[first]


def assign_work(
    ws: np.ndarray, we: np.ndarray, cycle: np.ndarray, launch_ts: np.ndarray, ts: np.ndarray
) -> Work:
    """`ws`, `we`, `cycle`: one rank's disjoint sorted windows and their cycles; `launch_ts` the launch
    time of each activity (NaN: no launch record: its start `ts` is used)."""
    t = np.where(np.isnan(launch_ts), ts.astype(np.float64), launch_ts)
    k = np.searchsorted(ws, t, side="right") - 1
    inside = (k >= 0) & (t < we[np.maximum(k, 0)])
    step = np.where(inside, k, -1).astype(np.int64)
    j = k + 1  # the window after the gap the activity lies in
    jj = np.minimum(j, ws.size - 1)
    first_of_cycle = (j == 0) | ((j < ws.size) & (cycle[jj] != cycle[np.maximum(jj - 1, 0)]))
    pre = np.where(~inside & (j < ws.size) & first_of_cycle & (ts < we[jj]), jj, -1).astype(np.int64)
    return Work(step, pre, (_grouped(step), _grouped(pre)))


def bounds(
    ws: np.ndarray, we: np.ndarray, cycle: np.ndarray, work: Work | None, end: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each step (module docstring) from the windows' times `ws`, `we` and the device
    activities' end times `end` (None, or no work: the host windows alone, one after the other)."""
    n = ws.size
    dev_end = np.full(n, _MIN, np.int64)
    pre_end = np.full(n, _MIN, np.int64)
    if work is not None and end is not None and end.size:
        for out, (order, first, k) in zip((dev_end, pre_end), work.groups):
            if order.size:
                out[k] = np.maximum.reduceat(end[order], first)
    point = np.maximum(we, dev_end)
    new = np.r_[True, cycle[1:] != cycle[:-1]] if n else np.zeros(0, bool)
    # the running maximum restarts at each cycle
    first = np.flatnonzero(new)
    out = np.empty(n, np.int64)
    for a, z in zip(first, np.r_[first[1:], n]):  # one loop per profiler cycle
        out[a:z] = np.maximum.accumulate(point[a:z])
    start = np.r_[_MIN, out[:-1]] if n else out.copy()
    cstart = np.maximum(ws[first], pre_end[first])
    start[first] = np.minimum(cstart, out[first])
    return start, out


def step_windows(steps: pd.DataFrame, device: pd.DataFrame, launch_ts: np.ndarray) -> dict:
    """Per (rank, device) of `device` (the frames' activities, `launch_ts` aligned with them): the rank's
    steps (a copy of its rows of `steps`) with `ts`, `end` set to the step's bounds and the host window
    kept as `host_ts`, `host_end`. Ranks without device activity get the key (rank, -1)."""
    out = {}
    by_rank = {int(r): s.reset_index(drop=True) for r, s in steps.groupby("rank", sort=True)}
    ranks_with_dev = set()
    for (r, d), acts in device.groupby(["rank", "device"], sort=True):  # one loop per device
        r, d = int(r), int(d)
        st = by_rank.get(r)
        if st is None:
            continue
        ranks_with_dev.add(r)
        ws, we, cy = (st[c].to_numpy(np.int64) for c in ("ts", "end", "cycle"))
        idx = acts.index.to_numpy()
        work = assign_work(ws, we, cy, launch_ts[idx], acts["ts"].to_numpy(np.int64))
        s, e = bounds(ws, we, cy, work, acts["end"].to_numpy(np.int64))
        out[(r, d)] = st.assign(host_ts=ws, host_end=we, ts=s, end=e)
    for r, st in by_rank.items():
        if r not in ranks_with_dev:
            ws, we, cy = (st[c].to_numpy(np.int64) for c in ("ts", "end", "cycle"))
            s, e = bounds(ws, we, cy, None, None)
            out[(r, -1)] = st.assign(host_ts=ws, host_end=we, ts=s, end=e)
    return out


def launch_times(device: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """The launch record's start of each device activity (by rank and correlation), NaN without one."""
    if not len(device) or not len(launches):
        return np.full(len(device), np.nan)
    pos = launch_rows(launches, device["rank"].to_numpy(np.int64), device["correlation"].to_numpy(np.float64))
    return np.where(pos >= 0, launches["ts"].to_numpy(np.float64)[np.maximum(pos, 0)], np.nan)


# A step is an outlier when it lies further from the median than OUTLIER_MADS robust standard deviations
# (1.4826 × the median absolute deviation) and OUTLIER_MIN_FRACTION of the median (steps of one loop vary
# by ~0.5 % on the H200 captures; the first step of a cycle after the profiler restarts can take 2-5×).
OUTLIER_MADS = 3.0
OUTLIER_MIN_FRACTION = 0.05


def median_ns(ns) -> float:
    """The statistic every report gives as "the step": the median over steps (robust to one slow step)."""
    x = np.asarray(ns, np.float64)
    return float(np.median(x)) if x.size else 0.0


def spread_ns(ns) -> float:
    """The spread beside it: 1.4826 × the median absolute deviation (a standard deviation for normal data)."""
    x = np.asarray(ns, np.float64)
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if x.size > 1 else 0.0


def outliers(steps, ns) -> list[tuple[int, int]]:
    """(step number, ns) of the steps far from the median (OUTLIER_MADS, OUTLIER_MIN_FRACTION)."""
    x = np.asarray(ns, np.float64)
    if x.size < 3:
        return []
    med = float(np.median(x))
    limit = max(OUTLIER_MADS * spread_ns(x), OUTLIER_MIN_FRACTION * med)
    return [(int(s), int(v)) for s, v in zip(steps, ns) if abs(v - med) > limit]


__all__ = [
    "cycles",
    "cycle_starts_of",
    "check_step_numbers",
    "Work",
    "assign_work",
    "bounds",
    "step_windows",
    "launch_times",
    "median_ns",
    "spread_ns",
    "outliers",
    "OUTLIER_MADS",
    "OUTLIER_MIN_FRACTION",
]
