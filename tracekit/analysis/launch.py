"""Launch statistics per kernel name, split as Nsight Systems' cuda_kern_exec_sum does:

CPU T   |-- cudaLaunchKernel (API) --|
GPU                                  .... queue ....[===== kernel =====]
        api = L.dur                  queue = max(0, K.ts - L.end)       kernel = K.dur
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.model import Dist, KernelStat


def _dist(values: np.ndarray) -> Dist:
    if values.size == 0:
        return Dist()
    return Dist(
        count=int(values.size),
        total_ns=int(values.sum()),
        mean_ns=float(values.mean()),
        median_ns=float(np.median(values)),
        min_ns=int(values.min()),
        max_ns=int(values.max()),
    )


def kernel_stats(acts: pd.DataFrame, launches: pd.DataFrame, limit: int | None = None) -> list[KernelStat]:
    """acts: device activities (rank, name, ts, end, correlation); launches: (rank, correlation, ts, end).
    Sorted by total kernel time, longest first."""
    if acts.empty:
        return []
    a = acts[["rank", "name", "ts", "end", "correlation"]].copy()
    a["correlation"] = a["correlation"].astype("Int64")
    lau = launches[["rank", "correlation", "ts", "end"]].rename(columns={"ts": "l_ts", "end": "l_end"})
    lau = lau.assign(correlation=lau["correlation"].astype("Int64"))
    m = a.merge(lau, on=["rank", "correlation"], how="left")
    m["kernel"] = m["end"] - m["ts"]
    m["api"] = m["l_end"] - m["l_ts"]
    m["queue"] = (m["ts"] - m["l_end"]).clip(lower=0)
    totals = m.groupby("name")["kernel"].sum().sort_values(ascending=False)
    names = totals.index if limit is None else totals.index[:limit]
    out = []
    for name, g in m[m["name"].isin(names)].groupby("name", sort=False):
        launched = g["l_end"].notna()
        out.append(
            KernelStat(
                name=str(name),
                api=_dist(g.loc[launched, "api"].to_numpy(np.int64)),
                queue=_dist(g.loc[launched, "queue"].to_numpy(np.int64)),
                kernel=_dist(g["kernel"].to_numpy(np.int64)),
                launched=int(launched.sum()),
            )
        )
    out.sort(key=lambda k: -k.kernel.total_ns)
    return out
