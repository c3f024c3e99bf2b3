"""Launch statistics per kernel name, split as Nsight Systems' cuda_kern_exec_sum does:

CPU T   |-- cudaLaunchKernel (API) --|
GPU                                  .... queue ....[===== kernel =====]
        api = L.dur                  queue = max(0, K.ts - L.end)       kernel = K.dur
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import pandas as pd

from tracekit.analysis.model import Dist, KernelStat
from tracekit.analysis.sketch import Sketch

# name → (api, queue, kernel, launched): the mergeable form of one part's statistics
KernelPartials = dict


def kernel_partials(acts: pd.DataFrame, launches: pd.DataFrame) -> KernelPartials:
    """acts: device activities (rank, name, ts, end, correlation); launches: (rank, correlation, ts,
    end), one per correlation. Per activity name: the api, queue and kernel durations (Sketches) and
    how many activities have a launch record."""
    if acts.empty:
        return {}
    a = acts[["rank", "name", "ts", "end", "correlation"]].copy()
    a["correlation"] = a["correlation"].astype("Int64")
    lau = launches[["rank", "correlation", "ts", "end"]].rename(columns={"ts": "l_ts", "end": "l_end"})
    lau = lau.assign(correlation=lau["correlation"].astype("Int64"))
    m = a.merge(lau, on=["rank", "correlation"], how="left")
    kernel = (m["end"] - m["ts"]).to_numpy(np.int64)
    launched = m["l_end"].notna().to_numpy()
    l_end = m["l_end"].fillna(0).to_numpy(np.int64)
    api = l_end - m["l_ts"].fillna(0).to_numpy(np.int64)
    queue = np.maximum(m["ts"].to_numpy(np.int64) - l_end, 0)
    names = m["name"].astype(str).to_numpy(object)
    uniq, inverse = np.unique(names, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(uniq.size + 1))
    out: KernelPartials = {}
    for k, name in enumerate(uniq.tolist()):  # one loop per activity name
        rows = order[bounds[k] : bounds[k + 1]]
        ok = rows[launched[rows]]
        out[name] = (Sketch.of(api[ok]), Sketch.of(queue[ok]), Sketch.of(kernel[rows]), int(ok.size))
    return out


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
        KernelStat(name=name, api=_dist(api), queue=_dist(queue), kernel=_dist(kern), launched=launched)
        for name, (api, queue, kern, launched) in ranked
    ]


def _dist(s: Sketch) -> Dist:
    if not s.count:
        return Dist()
    return Dist(
        count=s.count, total_ns=s.total, mean_ns=s.mean, median_ns=s.median, min_ns=s.min, max_ns=s.max
    )
