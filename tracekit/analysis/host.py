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
from tracekit.analysis.events import (
    DATALOADER,
    DATALOADER_RE,
    FRAMEWORK,
    INTERPRETER,
    LAUNCH,
    STATE_NAMES,
    SYNC,
)
from tracekit.model import HOST_STATES, DataLoaderInfo, HostStep, OpStat


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
    wait_s: np.ndarray  # union of the intervals this thread waits on another thread (backward())
    wait_e: np.ndarray


ENGINE_OP_PREFIX = "autograd::engine::evaluate_function"


def build_thread(
    ev: pd.DataFrame, *, default: int = INTERPRETER, waits_on: tuple[np.ndarray, np.ndarray] | None = None
) -> Thread:
    """ev: the host events of one thread (events.Frames.host rows).

    `default`: the state where no event covers the thread (INTERPRETER; FRAMEWORK for an autograd
    engine thread, which runs no Python between its ops). `waits_on`: intervals during which this
    thread is blocked in framework code run by another thread (backward() waiting for the autograd
    engine): they count as `framework` where the thread has nothing innermost of its own."""
    st = ev["state"].to_numpy()
    s = ev["ts"].to_numpy(np.int64)
    e = ev["end"].to_numpy(np.int64)
    families = [(s[st == code], e[st == code]) for code in (FRAMEWORK, LAUNCH, SYNC, DATALOADER)]
    wait_s, wait_e = iv.union(*(waits_on or (np.zeros(0, np.int64), np.zeros(0, np.int64))))
    families[0] = (np.concatenate([families[0][0], wait_s]), np.concatenate([families[0][1], wait_e]))
    timeline = iv.StateTimeline.build(families, default=default)
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
        wait_s=wait_s,
        wait_e=wait_e,
    )


class Threads:
    """Host threads by (rank, pid, tid), built on first use.

    Autograd engine threads (those running `autograd::engine::evaluate_function` ops) default to
    `framework`; a step thread is `framework` (not `interpreter`) while an engine thread of its process
    runs ops, because it is blocked in backward() then:

        step thread  |- aten::sum -|........ backward() blocked .........|
        engine T'                   |- evaluate_function -|  |- eval... -|
        state        fw            fw (waits on T')        fw            ...
    """

    def __init__(self, host: pd.DataFrame, steps: pd.DataFrame) -> None:
        self.host_by_thread = {
            (int(k[0]), int(k[1]), int(k[2])): g for k, g in host.groupby(["rank", "pid", "tid"], sort=False)
        }
        ops = host[host["cat"] == "cpu_op"]
        eng = ops[ops["name"].astype(str).str.startswith(ENGINE_OP_PREFIX)]
        self.engine = {
            (int(r), int(p), int(t)) for r, p, t in eng[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
        }
        self.step_threads = {
            (int(r), int(p), int(t)) for r, p, t in steps[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
        }
        self._built: dict[tuple[int, int, int], Thread] = {}

    def __getitem__(self, key: tuple[int, int, int]) -> Thread:
        th = self._built.get(key)
        if th is None:
            ev = self.host_by_thread.get(key, _EMPTY_HOST)
            if key in self.engine:
                th = build_thread(ev, default=FRAMEWORK)
            elif key in self.step_threads:
                th = build_thread(ev, waits_on=self._engine_ops(key[0], key[1]))
            else:
                th = build_thread(ev)
            self._built[key] = th
        return th

    def _engine_ops(self, rank: int, pid: int) -> tuple[np.ndarray, np.ndarray] | None:
        parts = [self.host_by_thread[k] for k in sorted(self.engine) if k[0] == rank and k[1] == pid]
        if not parts:
            return None
        ops = pd.concat(parts)
        ops = ops[ops["cat"] == "cpu_op"]
        return ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)


_EMPTY_HOST = pd.DataFrame(
    {
        "ts": np.zeros(0, np.int64),
        "end": np.zeros(0, np.int64),
        "state": np.zeros(0, np.int8),
        "cat": np.zeros(0, object),
        "name": np.zeros(0, object),
    }
)


def host_steps(threads: Threads, steps: pd.DataFrame) -> list[HostStep]:
    """Per step, the breakdown of the step thread's time by state, and its dispatch gaps."""
    out: list[HostStep] = []
    for (rank, pid, tid), grp in steps.groupby(["rank", "pid", "tid"], sort=True):
        th = threads[(int(rank), int(pid), int(tid))]
        ws = grp["ts"].to_numpy(np.int64)
        we = grp["end"].to_numpy(np.int64)
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
                    breakdown_ns={name: int(totals[i, STATE_NAMES.index(name)]) for name in HOST_STATES},
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
    inside one step window (a gap across a step boundary holds profiler bookkeeping and is dropped),
    minus the time the thread is blocked in backward() while the autograd engine runs ops (that is
    framework time, not Python). Returns (window_index, start, end) of the remaining pieces."""
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
    gs, ge = gs[ok], ge[ok]
    if th.wait_s.size:
        fs, fe = iv.complement(th.wait_s, th.wait_e)
        _, _, gs, ge = iv.intersect_windows(fs, fe, gs, ge)
    wi = np.searchsorted(ws, gs, side="right") - 1
    return wi, gs, ge


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
