"""Launch statistics per kernel name, split as Nsight Systems' cuda_kern_exec_sum does:

CPU T   |-- cudaLaunchKernel (API) --|
GPU                                  .... queue ....[===== kernel =====]
        api = L.dur                  queue = max(0, K.ts - L.end)       kernel = K.dur

A kernel run by a CUDA graph has the graph launch (cudaGraphLaunch) as its launch record, shared by every
kernel of the graph: its API time is the whole graph's launch and its "queue" its place in the graph, so
neither is counted per kernel; the kernel counts as `graph_launched` (and in `kernel`).
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import pandas as pd

from tracekit.analysis.model import Dist, KernelStat
from tracekit.analysis.sketch import Sketch

# name → (api, queue, kernel, launched, graph_launched): the mergeable form of one part's statistics
KernelPartials = dict


def kernel_partials(acts: pd.DataFrame, launches: pd.DataFrame) -> KernelPartials:
    """acts: device activities (rank, name, ts, end, correlation); launches: (rank, correlation, ts,
    end), one per correlation. Per activity name: the api, queue and kernel durations (Sketches) and
    how many activities have a launch record."""
    if acts.empty:
        return {}
    ts = acts["ts"].to_numpy(np.int64)
    kernel = acts["end"].to_numpy(np.int64) - ts
    l_ts, l_end, launched, graph = _launch_of(acts, launches)
    api = l_end - l_ts
    queue = np.maximum(ts - l_end, 0)
    names = acts["name"]
    codes = names.cat.codes.to_numpy().astype(np.int64)
    cats = names.cat.categories
    order = np.argsort(codes, kind="stable")
    used, starts = np.unique(codes[order], return_index=True)
    bounds = np.append(starts, order.size)
    out: KernelPartials = {}
    for k, code in enumerate(used.tolist()):  # one loop per activity name
        if code < 0:
            continue
        rows = order[bounds[k] : bounds[k + 1]]
        ok = rows[launched[rows] & ~graph[rows]]
        n_graph = int(graph[rows].sum())
        name = str(cats[code])
        out[name] = (
            Sketch.of(api[ok]),
            Sketch.of(queue[ok]),
            Sketch.of(kernel[rows]),
            int(ok.size) + n_graph,
            n_graph,
        )
    return out


def _launch_of(acts: pd.DataFrame, launches: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """(launch start, launch end, has a launch, launched by a graph) of each activity: the launch record
    of the same rank and correlation (launches hold one per (rank, correlation))."""
    n = len(acts)
    l_ts, l_end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if not len(launches) or not n:
        return l_ts, l_end, np.zeros(n, bool), np.zeros(n, bool)
    pos = launch_rows(launches, acts["rank"].to_numpy(np.int64), acts["correlation"].to_numpy(np.float64))
    rows = np.flatnonzero(pos >= 0)
    src = pos[rows]
    l_ts[rows] = launches["ts"].to_numpy(np.int64)[src]
    l_end[rows] = launches["end"].to_numpy(np.int64)[src]
    launched = pos >= 0
    graph = np.zeros(n, bool)
    if "graph" in launches:
        graph[rows] = launches["graph"].to_numpy(bool)[src]
    return l_ts, l_end, launched, graph


def launch_rows(launches: pd.DataFrame, rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """For each (rank, correlation) query (NaN: none), the row of `launches` with the same pair, else -1
    (launches hold one per (rank, correlation); of repeated ones the first)."""
    out = np.full(corr.size, -1, np.int64)
    ok = ~np.isnan(corr)
    if not len(launches) or not ok.any():
        return out
    key_a = _key(rank[ok], corr[ok].astype(np.int64))
    key_l = _key(launches["rank"].to_numpy(np.int64), launches["correlation"].to_numpy(np.int64))
    order = np.argsort(key_l, kind="stable")
    key_l = key_l[order]
    pos = np.minimum(np.searchsorted(key_l, key_a), key_l.size - 1)
    hit = key_l[pos] == key_a
    out[np.flatnonzero(ok)[hit]] = order[pos[hit]]
    return out


def _key(rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 per (rank, correlation): ranks below 2**23, correlation ids below 2**40 (both are
    far larger than any trace's)."""
    return (rank << 40) | (corr & ((1 << 40) - 1))


def merge_kernel_partials(parts: Iterable[KernelPartials]) -> KernelPartials:
    by_name: dict[str, list] = {}
    for part in parts:
        for name, stats in part.items():
            by_name.setdefault(name, []).append(stats)
    return {
        name: (
            Sketch.merge(s[0] for s in stats),
            Sketch.merge(s[1] for s in stats),
            Sketch.merge(s[2] for s in stats),
            sum(s[3] for s in stats),
            sum(s[4] if len(s) > 4 else 0 for s in stats),
        )
        for name, stats in by_name.items()
    }


def kernel_stats(partials: KernelPartials, limit: Optional[int] = None) -> list[KernelStat]:
    """Launch statistics per activity name, longest total kernel time first (ties: by name); the
    `limit` longest (None: all)."""
    ranked = sorted(partials.items(), key=lambda kv: (-kv[1][2].total, kv[0]))
    if limit is not None:
        ranked = ranked[:limit]
    return [
        KernelStat(
            name=name,
            api=_dist(st[0]),
            queue=_dist(st[1]),
            kernel=_dist(st[2]),
            launched=st[3],
            graph_launched=st[4] if len(st) > 4 else 0,
        )
        for name, st in ranked
    ]


def _dist(s: Sketch) -> Dist:
    if not s.count:
        return Dist()
    return Dist(
        count=s.count, total_ns=s.total, mean_ns=s.mean, median_ns=s.median, min_ns=s.min, max_ns=s.max
    )
