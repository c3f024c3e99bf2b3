"""What each host thread was doing, as a piecewise-constant state function of time; the per-step host
breakdown; host dispatch gaps; framework op statistics; the DataLoader iterator kind.

Rule 3 of DESIGN.md, the slicing order. At each instant a host thread is in the innermost state first:

    CPU T  |--- DataLoader.__next__ ---------------------|   |--- aten::add ---|
           |     |- cudaStreamSync -|  |- aten::copy_ -|     |  |- cudaLaunch -|
    state   dl    dl                 dl  dl              int  fw  launch        fw

    predicate: state(t) = max over intervals covering t of their code, with
    dataloader(4) > sync(3) > launch(2) > framework(1) > interpreter(0, nothing covers t).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.events import DATALOADER, DATALOADER_RE, FRAMEWORK, LAUNCH, STATE_NAMES, SYNC
from tracekit.model import DataLoaderInfo, HostStep, OpStat


@dataclass
class Thread:
    """One host thread: its state timeline and the raw intervals the evidence lookups need."""

    timeline: iv.StateTimeline
    sync_s: np.ndarray  # sync-state events (calls and ops), for the drain pointer
    sync_e: np.ndarray
    sync_depth: np.ndarray
    sync_name: np.ndarray
    sync_is_call: np.ndarray  # bool: a runtime/driver sync call (not a sync op such as aten::item)
    op_s: np.ndarray  # cpu_ops
    op_e: np.ndarray
    op_depth: np.ndarray
    op_name: np.ndarray


def build_thread(ev: pd.DataFrame) -> Thread:
    """ev: the host events of one thread (events.Frames.host rows)."""
    st = ev["state"].to_numpy()
    s = ev["ts"].to_numpy(np.int64)
    e = ev["end"].to_numpy(np.int64)
    families = [(s[st == code], e[st == code]) for code in (FRAMEWORK, LAUNCH, SYNC, DATALOADER)]
    timeline = iv.StateTimeline.build(families)
    sm = st == SYNC
    om = st >= FRAMEWORK
    om &= (ev["cat"] == "cpu_op").to_numpy()
    names = ev["name"].to_numpy(object)
    return Thread(
        timeline=timeline,
        sync_s=s[sm],
        sync_e=e[sm],
        sync_depth=iv.nesting_depth(s[sm], e[sm]),
        sync_name=names[sm],
        sync_is_call=(ev["cat"] != "cpu_op").to_numpy()[sm],
        op_s=s[om],
        op_e=e[om],
        op_depth=iv.nesting_depth(s[om], e[om]),
        op_name=names[om],
    )


def host_steps(
    threads: dict[tuple[int, int, int], Thread], host: pd.DataFrame, steps: pd.DataFrame
) -> list[HostStep]:
    """Per step, the breakdown of the step thread's time by state, and its dispatch gaps."""
    out: list[HostStep] = []
    for (rank, pid, tid), grp in steps.groupby(["rank", "pid", "tid"], sort=True):
        th = threads.get((rank, pid, tid))
        ws = grp["ts"].to_numpy(np.int64)
        we = grp["end"].to_numpy(np.int64)
        if th is None:
            th = build_thread(host.iloc[0:0])
        totals = th.timeline.totals(ws, we, len(STATE_NAMES))
        gwin, gs, ge = dispatch_gaps(th, ws, we)
        glen = ge - gs
        for i, (step, a, b) in enumerate(zip(grp["step"], ws, we)):
            g = glen[gwin == i]
            out.append(
                HostStep(
                    rank=int(rank),
                    pid=int(pid),
                    tid=int(tid),
                    step=int(step),
                    start_ns=int(a),
                    dur_ns=int(b - a),
                    breakdown_ns={name: int(totals[i, code]) for code, name in enumerate(STATE_NAMES)},
                    dispatch_gaps=int(g.size),
                    dispatch_gap_ns=int(g.sum()),
                    dispatch_gap_median_ns=int(np.median(g)) if g.size else 0,
                    dispatch_gap_p95_ns=int(np.percentile(g, 95)) if g.size else 0,
                )
            )
    return out


def dispatch_gaps(th: Thread, ws: np.ndarray, we: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host dispatch gaps (DESIGN.md "Words"): between consecutive top-level cpu_ops of the thread.

        CPU T  |- aten::mm -|  gap  |- aten::add -|  gap  |- aten::relu -|
                            ^^^^^^^               ^^^^^^^

    predicate: [end_i, start_{i+1}) for consecutive depth-0 ops i, i+1 with end_i < start_{i+1}, both
    inside one step window (a gap across a step boundary holds profiler bookkeeping and is dropped).
    Returns (window_index, start, end)."""
    top = th.op_depth == 0
    s = np.sort(th.op_s[top])
    e = np.sort(th.op_e[top])
    if s.size < 2:
        z = np.zeros(0, np.int64)
        return z, z, z
    gs, ge = e[:-1], s[1:]
    keep = ge > gs
    gs, ge = gs[keep], ge[keep]
    wi = np.searchsorted(ws, gs, side="right") - 1
    ok = wi >= 0
    wk = np.where(ok, wi, 0)
    ok &= (ge <= we[wk]) & (gs >= ws[wk])
    return wk[ok], gs[ok], ge[ok]


def op_stats(host: pd.DataFrame, steps: pd.DataFrame) -> list[OpStat]:
    """Calls and inclusive CPU time per framework op name and step (ops starting inside a step window
    of their rank, on any host thread)."""
    ops = host[host["cat"] == "cpu_op"]
    if not len(ops) or not len(steps):
        return []
    parts = []
    for rank, grp in steps.groupby("rank"):  # one loop per rank
        o = ops[ops["rank"] == rank]
        ws = grp["ts"].to_numpy(np.int64)
        we = grp["end"].to_numpy(np.int64)
        t = o["ts"].to_numpy(np.int64)
        wi = np.searchsorted(ws, t, side="right") - 1
        ok = wi >= 0
        wk = np.where(ok, wi, 0)
        ok &= t < we[wk]
        parts.append(
            pd.DataFrame(
                {
                    "name": o["name"].to_numpy(object)[ok],
                    "step": grp["step"].to_numpy(np.int64)[wk[ok]],
                    "dur": (o["end"] - o["ts"]).to_numpy(np.int64)[ok],
                }
            )
        )
    df = pd.concat(parts, ignore_index=True)
    if not len(df):
        return []
    agg = df.groupby(["name", "step"], sort=True)["dur"].agg(["size", "sum"]).reset_index()
    all_steps = tuple(int(s) for s in sorted(steps["step"].unique()))
    out = []
    for name, g in agg.groupby("name", sort=False):
        calls = dict(zip(g["step"], g["size"]))
        ns = dict(zip(g["step"], g["sum"]))
        out.append(
            OpStat(
                name=str(name),
                steps=all_steps,
                calls_per_step=tuple(int(calls.get(s, 0)) for s in all_steps),
                ns_per_step=tuple(int(ns.get(s, 0)) for s in all_steps),
            )
        )
    out.sort(key=lambda o: -sum(o.ns_per_step))
    return out


def dataloader_info(host: pd.DataFrame, n_steps: int) -> DataLoaderInfo | None:
    """The DataLoader iterator kind from its __next__ annotation (single-process vs multi-worker)."""
    ann = host[host["state"] == DATALOADER]
    if not len(ann):
        return None
    kinds = ann["name"].astype(str).str.extract(DATALOADER_RE)[0].dropna()
    kind = kinds.mode().iloc[0] if len(kinds) else None
    multi = None if kind is None else ("MultiProcessing" in kind or "MultiProcess" in kind)
    total = int((ann["end"] - ann["ts"]).sum())
    return DataLoaderInfo(
        iterator=kind, multi_worker=multi, calls=len(ann), ns_per_step=total / max(n_steps, 1)
    )
