"""Rule 5, collective wait (multi-rank): the part of a collective kernel that waits for peers.

    rank 0 GPU  ==fwd==][====== ncclAllReduce (long: waits) ======]
    rank 1 GPU  ========= fwd (slow) =========][= ncclAllReduce =]
                                               ^ rank 1 arrives last: the straggler
                                                                  ^ both end together

    predicate: NCCL issues the collectives of a communicator in the same order on every rank, so the
    kernels of one name form the same sequence on each rank, possibly cut differently at the trace's
    edges. Rank r's i-th kernel of a name is the reference rank's (i + k)-th, with the shift k that
    minimises the median |end difference| over the overlap (a collective ends at once on all ranks;
    the ranks' clocks are assumed comparable: one host, or hosts synchronised well below a step).
    wait(rank) = clip(last start over ranks - start(rank), 0, dur(rank)): the time before the last rank
    arrived (on NCCL, where a collective ends at once on every rank, dur(rank) - the last arrival's dur;
    a CPU backend's spans end rank by rank, so the arrival is what both share); the straggler is the
    rank that started it last.
A collective kernel counts as busy (it occupies the device); its wait is reported beside the idle causes,
in the step (of its own rank) in which the kernel starts.

Matching by sequence, not by step: a rank whose host runs ahead of its GPU (DDP: nothing blocks the
fast rank's host while its all-reduce waits) has the kernels of step N inside a later host step window,
so "the i-th collective of the same step" pairs different collectives.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def collective_waits(
    coll: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[tuple[int, int], int | None]]:
    """coll: NCCL kernels with columns rank, device, step (-1: outside every step window), ts, end, name.

    Returns (wait ns per (rank, device, step) as a frame with column `wait`, straggler rank per
    (rank, device): the rank this device waited for most, None where it never waited)."""
    empty = pd.DataFrame(columns=["rank", "device", "step", "wait"])
    if coll.empty or coll["rank"].nunique() < 2:
        return empty, {}
    c = match_collectives(coll)
    c["dur"] = c["end"] - c["ts"]
    key = ["name", "group"]
    m = c[c["group"] >= 0]
    grp = m.groupby(key)
    m = m.assign(nranks=grp["rank"].transform("nunique"), last_start=grp["ts"].transform("max"))
    wait = np.clip(m["last_start"] - m["ts"], 0, m["dur"])
    m = m.assign(wait=np.where(m["nranks"] > 1, wait, 0))
    last = m.loc[grp["ts"].idxmax(), key + ["rank"]].rename(columns={"rank": "last_rank"})
    m = m.merge(last, on=key, how="left")
    in_step = m[m["step"] >= 0]
    waits = in_step.groupby(["rank", "device", "step"], as_index=False)["wait"].sum()
    w = in_step[(in_step["wait"] > 0) & (in_step["last_rank"] != in_step["rank"])]
    straggler: dict[tuple[int, int], int | None] = {}
    if len(w):
        by = w.groupby(["rank", "device", "last_rank"])["wait"].sum().reset_index()
        best = by.loc[by.groupby(["rank", "device"])["wait"].idxmax()]
        for r, d, s in zip(best["rank"], best["device"], best["last_rank"]):
            straggler[(int(r), int(d))] = int(s)
    return waits, straggler


def match_collectives(coll: pd.DataFrame) -> pd.DataFrame:
    """coll (columns rank, device, ts, end, name, any others) sorted by rank, device, ts, with a column
    `group`: the same number for the same collective on every rank (with `name`), -1 where the
    reference rank has no match (the sequence matching of the module docstring)."""
    c = coll.sort_values(["rank", "device", "ts"]).reset_index(drop=True)
    c["occ"] = c.groupby(["rank", "device", "name"]).cumcount()
    c["group"] = -1
    for _name, by_name in c.groupby("name", sort=False):  # one loop per collective kernel name
        seqs = [g for _, g in by_name.groupby(["rank", "device"], sort=True)]
        ref_end = seqs[0]["end"].to_numpy(np.int64)
        c.loc[seqs[0].index, "group"] = seqs[0]["occ"].to_numpy()
        for g in seqs[1:]:  # one loop per other rank and device
            k = _best_shift(g["end"].to_numpy(np.int64), ref_end)
            idx = g["occ"].to_numpy() + k
            ok = (idx >= 0) & (idx < ref_end.size)
            c.loc[g.index[ok], "group"] = idx[ok]
    return c


def _best_shift(end: np.ndarray, ref_end: np.ndarray) -> int:
    """The k for which end[i] ↔ ref_end[i + k] ends closest (median |difference| over the overlap,
    which must hold at least half the shorter sequence); ties go to the smallest |k|. Candidates: the
    shifts that pair up to 64 sampled kernels with the reference kernel ending nearest them."""
    n, m = end.size, ref_end.size
    need = max(1, min(n, m) // 2)
    sample = np.unique(np.linspace(0, n - 1, min(n, 64)).astype(np.int64))
    pos = np.clip(np.searchsorted(ref_end, end[sample]), 1, max(m - 1, 1))
    nearer_left = np.abs(end[sample] - ref_end[pos - 1]) <= np.abs(
        end[sample] - ref_end[np.minimum(pos, m - 1)]
    )
    nearest = np.where(nearer_left, pos - 1, np.minimum(pos, m - 1))
    candidates = set((nearest - sample).tolist()) | {0}
    best, best_k = None, 0
    for k in sorted(candidates, key=lambda k: (abs(k), k)):  # at most 65 candidate shifts
        lo, hi = max(0, -k), min(n, m - k)
        if hi - lo < need:
            continue
        score = float(np.median(np.abs(end[lo:hi] - ref_end[lo + k : hi + k])))
        if best is None or score < best:
            best, best_k = score, k
    return best_k
