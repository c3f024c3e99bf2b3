"""Rule 5, collective wait (multi-rank): the part of a collective kernel that waits for peers.

    rank 0 GPU  ==fwd==][====== ncclAllReduce (long: waits) ======]
    rank 1 GPU  ========= fwd (slow) =========][= ncclAllReduce =]
                                               ^ rank 1 arrives last: the straggler

    predicate: the i-th collective of the same name in the same step on each rank is one collective;
    wait(rank) = dur(rank) - min over ranks of dur; the straggler is the rank that started it last.
A collective kernel counts as busy (it occupies the device); its wait is reported beside the idle causes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def collective_waits(
    coll: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[tuple[int, int], int | None]]:
    """coll: NCCL kernels inside step windows with columns rank, device, step, ts, end, name.

    Returns (wait ns per (rank, device, step) as a frame with column `wait`, straggler rank per
    (rank, device): the rank this device waited for most, None where it never waited)."""
    empty = pd.DataFrame(columns=["rank", "device", "step", "wait"])
    if coll.empty or coll["rank"].nunique() < 2:
        return empty, {}
    c = coll.sort_values(["rank", "device", "ts"]).copy()
    c["dur"] = c["end"] - c["ts"]
    c["occ"] = c.groupby(["rank", "device", "step", "name"]).cumcount()
    key = ["step", "name", "occ"]
    grp = c.groupby(key)
    c["nranks"] = grp["rank"].transform("nunique")
    c["fastest"] = grp["dur"].transform("min")
    c["wait"] = np.where(c["nranks"] > 1, c["dur"] - c["fastest"], 0)
    last = c.loc[grp["ts"].idxmax(), key + ["rank"]].rename(columns={"rank": "last_rank"})
    c = c.merge(last, on=key, how="left")
    waits = c.groupby(["rank", "device", "step"], as_index=False)["wait"].sum()
    w = c[(c["wait"] > 0) & (c["last_rank"] != c["rank"])]
    straggler: dict[tuple[int, int], int | None] = {}
    if len(w):
        by = w.groupby(["rank", "device", "last_rank"])["wait"].sum().reset_index()
        best = by.loc[by.groupby(["rank", "device"])["wait"].idxmax()]
        for r, d, s in zip(best["rank"], best["device"], best["last_rank"]):
            straggler[(int(r), int(d))] = int(s)
    return waits, straggler
