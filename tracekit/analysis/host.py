"""What each host thread was doing, as a piecewise-constant state function of time; the per-step host
breakdown; host dispatch gaps; framework op statistics; the DataLoader iterator kind.

Rule 3 of DESIGN.md, the slicing order. At each instant a host thread is in the innermost state first:

    CPU T  |--- DataLoader.__next__ ---------------------|   |--- aten::add ---|
           |     |- cudaStreamSync -|  |- aten::copy_ -|     |  |- cudaLaunch -|
    state   dl    dl                 dl  dl              int  fw  launch        fw

    predicate: state(t) = the highest-priority state among the events covering t (the cause table's
    order, tracekit.analysis.causes: dataloader > sync > launch > framework), else the thread's default
    (interpreter: nothing covers t).

`segment_states` is that rule, the one definition: the analysis' thread timelines and the what-if
replay's host segments (tracekit.whatif.graph) are both cut by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.causes import (
    DATALOADER_RE,
    DEFAULT_STATE,
    FAMILIES,
    FAMILY_REPLAY,
    HOST_STATES,
    STATE,
    STATE_NAMES,
)
from tracekit.analysis.dispatch import (
    ENGINE_OP_PREFIX,
    backward_windows,
    dispatch_gap_pieces,
    excluded_windows,
    top_level,
)
from tracekit.analysis.model import DataLoaderInfo, HostStep, OpStat
from tracekit.data import schema as S

FRAMEWORK, RUNTIME, SYNC, DATALOADER, COLLECTIVE = (
    STATE["framework"],
    STATE["runtime"],
    STATE["sync"],
    STATE["dataloader"],
    STATE["collective"],
)


@dataclass
class Thread:
    """One host thread: its state timeline and the raw intervals the evidence lookups need."""

    timeline: iv.StateTimeline
    sync_s: np.ndarray  # sync-state events (calls and ops), for the drain pointer
    sync_e: np.ndarray
    sync_depth: np.ndarray
    sync_name: np.ndarray
    sync_is_call: np.ndarray  # bool: a runtime/driver sync call (not a sync op such as aten::item)
    call_s: np.ndarray  # runtime calls in the `runtime` state (neither launch nor sync), for their names
    call_e: np.ndarray
    call_depth: np.ndarray
    call_name: np.ndarray
    op_s: np.ndarray  # cpu_ops
    op_e: np.ndarray
    op_depth: np.ndarray
    op_name: np.ndarray
    wait_s: np.ndarray  # the thread's backward windows (blocked in backward()), disjoint sorted
    wait_e: np.ndarray
    excl_s: (
        np.ndarray
    )  # what its dispatch gaps leave out: backward windows, DataLoader fetches, collective waits
    excl_e: np.ndarray


def segment_states(
    n: int,
    si: np.ndarray,
    ei: np.ndarray,
    family: np.ndarray,
    default: int,
    waits: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64)),
    cover: Callable[[np.ndarray, np.ndarray, int], np.ndarray] = iv.cover,
) -> tuple[np.ndarray, np.ndarray]:
    """Rule 3 on one thread's time cut into n segments (segment i between boundaries i and i + 1): each
    segment's state, and the state the what-if replay scales it as (causes.Events.replay_as), both the
    highest among the families of the events covering it, else `default`. `si`, `ei`: each event's start
    and end boundary index; `family`: its family (causes.FAMILIES; -1: none); `waits`: the thread's
    backward windows as boundary indices, `framework` in both (it is blocked in backward() meanwhile);
    `cover`: the segments an interval family covers (the replay passes its compiled one)."""
    best = np.full(n, -1, np.int8)
    replay = np.full(n, -1, np.int8)
    for f, fam in enumerate(FAMILIES):  # the lowest priority first
        m = family == f
        if not m.any():
            continue
        cov = cover(si[m], ei[m], n)
        best[cov] = np.maximum(best[cov], fam.state)
        replay[cov] = np.maximum(replay[cov], fam.replay)
    if waits[0].size:
        cov = cover(waits[0], waits[1], n)
        best[cov] = np.maximum(best[cov], FRAMEWORK)
        replay[cov] = np.maximum(replay[cov], FRAMEWORK)
    return np.where(best >= 0, best, default).astype(np.int8), np.where(replay >= 0, replay, default).astype(
        np.int8
    )


def build_thread(
    ev: pd.DataFrame, *, default: int = DEFAULT_STATE, waits_on: tuple[np.ndarray, np.ndarray] | None = None
) -> Thread:
    """ev: the host events of one thread (events.Frames.host rows).

    `default`: the state where no event covers the thread (interpreter; framework for an autograd
    engine device thread, which runs no Python between its ops). `waits_on`: the thread's backward
    windows (`tracekit.analysis.dispatch.backward_windows`), during which it is blocked in backward()
    while the engine runs, on this thread (CPU) or another (GPU): they count as `framework` where the
    thread has nothing innermost of its own."""
    st = ev["state"].to_numpy()
    fam = ev["family"].to_numpy()
    s = ev["ts"].to_numpy(np.int64)
    e = ev["end"].to_numpy(np.int64)
    wait_s, wait_e = iv.union(*(waits_on or (np.zeros(0, np.int64), np.zeros(0, np.int64))))
    timeline = _timeline(s, e, fam, wait_s, wait_e, default)
    # a fetch and a collective wait are not Python between framework calls
    dl = (st == DATALOADER) | (st == COLLECTIVE)
    excl_s, excl_e = excluded_windows(wait_s, wait_e, s[dl], e[dl])
    sm = st == SYNC
    rm = st == RUNTIME
    is_op = (ev["cat"] == "cpu_op").to_numpy()
    om = (st >= FRAMEWORK) & is_op
    names = ev["name"].array
    return Thread(
        timeline=timeline,
        sync_s=s[sm],
        sync_e=e[sm],
        sync_depth=iv.nesting_depth(s[sm], e[sm]),
        sync_name=np.asarray(names[sm], dtype=object),
        sync_is_call=FAMILY_REPLAY[fam[sm]] == SYNC,
        call_s=s[rm],
        call_e=e[rm],
        call_depth=iv.nesting_depth(s[rm], e[rm]),
        call_name=np.asarray(names[rm], dtype=object),
        op_s=s[om],
        op_e=e[om],
        op_depth=iv.nesting_depth(s[om], e[om]),
        op_name=np.asarray(names[om], dtype=object),
        wait_s=wait_s,
        wait_e=wait_e,
        excl_s=excl_s,
        excl_e=excl_e,
    )


def _timeline(
    s: np.ndarray, e: np.ndarray, fam: np.ndarray, wait_s: np.ndarray, wait_e: np.ndarray, default: int
) -> iv.StateTimeline:
    """The thread's states as a timeline (`segment_states` between the boundaries of its events that
    have a state and of its backward windows; runs of one state merged)."""
    k = np.flatnonzero((fam >= 0) & (e > s))
    pts = np.concatenate([s[k], e[k], wait_s, wait_e])
    bounds, index = np.unique(pts, return_inverse=True)
    n, m, w = bounds.size, k.size, wait_s.size
    # boundary j of the timeline is bounds[j - 1]: its first segment starts at -inf, its last ends at +inf
    state, _ = segment_states(
        n + 1,
        index[:m] + 1,
        index[m : 2 * m] + 1,
        fam[k],
        default,
        (index[2 * m : 2 * m + w] + 1, index[2 * m + w :] + 1),
    )
    return iv.StateTimeline.of(np.concatenate([[iv.NEG_INF], bounds, [iv.POS_INF]]), state)


class Threads:
    """Host threads by (rank, pid, tid), built on first use.

    The autograd engine runs backward nodes inside `autograd::engine::evaluate_function` ops. On GPU
    it runs them on its own device threads, which run no Python between their ops: such a thread
    (engine ops, no step) defaults to `framework`. The thread that called backward() is blocked
    meanwhile: its backward windows (`tracekit.analysis.dispatch.backward_windows`) are `framework`:

        GPU: step thread |- aten::sum -|....... blocked in backward() .......|- aten::add_ -|
             engine T'                  |- evaluate_function -| |- eval.. -|
             step state  fw            fw   (backward window, fw)          fw  ...

        CPU: step thread |- aten::sum -| py |- evaluate_function -| |- eval.. -| py |- aten::add_ -|
             step state  fw            int  fw   (backward window, fw)         int  fw

    On CPU the engine runs on the calling thread itself, so a step thread that runs engine ops keeps
    `interpreter` as its default: only its backward windows are framework.
    """

    def __init__(self, host: pd.DataFrame, steps: pd.DataFrame) -> None:
        self.host_by_thread = {
            (int(k[0]), int(k[1]), int(k[2])): g for k, g in host.groupby(["rank", "pid", "tid"], sort=False)
        }
        ops = host[host["cat"] == "cpu_op"]
        cats = ops["name"].cat.categories
        is_engine = np.array([str(c).startswith(ENGINE_OP_PREFIX) for c in cats] + [False], dtype=bool)
        codes = ops["name"].cat.codes.to_numpy()
        self.engine_ops = ops[is_engine[np.where(codes >= 0, codes, len(cats))]]
        self.engine = {
            (int(r), int(p), int(t))
            for r, p, t in self.engine_ops[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
        }
        self.step_threads = {
            (int(r), int(p), int(t)) for r, p, t in steps[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
        }
        self._built: dict[tuple[int, int, int], Thread] = {}
        self._windows: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __getitem__(self, key: tuple[int, int, int]) -> Thread:
        th = self._built.get(key)
        if th is None:
            ev = self.host_by_thread.get(key, _EMPTY_HOST)
            if key in self.step_threads:
                th = build_thread(ev, waits_on=self._backward_windows(key, ev))
            elif key in self.engine:
                th = build_thread(ev, default=FRAMEWORK)
            else:
                th = build_thread(ev)
            self._built[key] = th
        return th

    def _backward_windows(self, key: tuple[int, int, int], ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The backward windows of thread `key` (whose events are `ev`), computed once per thread (the
        what-if graph asks again for the threads the analysis built)."""
        if key not in self._windows:
            self._windows[key] = self._find_backward_windows(key, ev)
        return self._windows[key]

    def _find_backward_windows(
        self, key: tuple[int, int, int], ev: pd.DataFrame
    ) -> tuple[np.ndarray, np.ndarray]:
        rank, pid, _ = key
        eng = self.engine_ops[
            (self.engine_ops["rank"] == rank).to_numpy() & (self.engine_ops["pid"] == pid).to_numpy()
        ]
        s, e, engine = _thread_ops(ev)
        split = s[~engine & top_level(s, e)]
        return backward_windows(eng["ts"].to_numpy(np.int64), eng["end"].to_numpy(np.int64), split)


def _thread_ops(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cpu_ops of one thread sorted by start, longer first: (starts, ends, is-engine-op mask)."""
    ops = ev[(ev["cat"] == "cpu_op").to_numpy()]
    s = ops["ts"].to_numpy(np.int64)
    e = ops["end"].to_numpy(np.int64)
    order = np.lexsort((s - e, s))
    names = ops["name"].astype("category")
    is_engine = np.array([str(c).startswith(ENGINE_OP_PREFIX) for c in names.cat.categories] + [False])
    codes = names.cat.codes.to_numpy()
    engine = is_engine[np.where(codes >= 0, codes, len(is_engine) - 1)]
    return s[order], e[order], engine[order]


_EMPTY_HOST = pd.DataFrame(
    {
        "ts": np.zeros(0, np.int64),
        "end": np.zeros(0, np.int64),
        "state": np.zeros(0, np.int8),
        "family": np.zeros(0, np.int8),
        "cat": np.zeros(0, object),
        "name": np.zeros(0, object),
    }
)


def host_steps(threads: Threads, steps: pd.DataFrame, windows: dict | None = None) -> list[HostStep]:
    """Per step, the breakdown of the step thread's time by state, and its dispatch gaps. `windows`:
    the steps' bounds per (rank, device) (tracekit.analysis.steps.step_windows), for `step_ns`."""
    period = _step_periods(windows or {})
    out: list[HostStep] = []
    for (rank, pid, tid), grp in steps.groupby(["rank", "pid", "tid"], sort=True):
        th = threads[(int(rank), int(pid), int(tid))]
        ws = grp["ts"].to_numpy(np.int64)
        we = grp["end"].to_numpy(np.int64)
        totals = th.timeline.totals(ws, we, len(STATE_NAMES))
        gwin, gs, ge = dispatch_gaps(th, ws, we)
        order = np.lexsort((ge - gs, gwin))
        gwin, glen = gwin[order], (ge - gs)[order]
        bounds = np.searchsorted(gwin, np.arange(len(ws) + 1))
        for i, (step, a, b) in enumerate(zip(grp["step"], ws, we)):  # one loop per step
            g = glen[bounds[i] : bounds[i + 1]]
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
                    dispatch_gap_median_ns=_quantile_sorted(g, 0.5),
                    dispatch_gap_p95_ns=_quantile_sorted(g, 0.95),
                    step_ns=period.get((int(rank), int(step)), int(b - a)),
                )
            )
    return out


def _step_periods(windows: dict) -> dict:
    """(rank, step number) -> the step's length, the longest over the rank's devices."""
    out: dict = {}
    for (rank, _device), w in windows.items():  # one loop per device
        for step, dur in zip(w["step"].to_numpy(np.int64), (w["end"] - w["ts"]).to_numpy(np.int64)):
            k = (int(rank), int(step))
            out[k] = max(out.get(k, 0), int(dur))
    return out


def _quantile_sorted(g: np.ndarray, q: float) -> int:
    """np.percentile's linear interpolation on an already sorted array, as an int (ns)."""
    if g.size == 0:
        return 0
    pos = q * (g.size - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, g.size - 1)
    return int(g[lo] + (g[hi] - g[lo]) * (pos - lo))


def dispatch_gaps(th: Thread, ws: np.ndarray, we: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host dispatch gaps of a step thread in its disjoint sorted step windows (ws, we): exactly
    `tracekit.analysis.dispatch.dispatch_gap_pieces` (the one definition)
    over the thread's cpu_ops and backward windows. Returns (window_index, start, end)."""
    return dispatch_gap_pieces(th.op_s, th.op_e, ws, we, th.excl_s, th.excl_e)


def op_stats(host: pd.DataFrame, steps: pd.DataFrame, cat: str = "cpu_op") -> list[OpStat]:
    """Calls and inclusive CPU time per framework op name and step (ops starting inside a step window
    of their rank, on any host thread). Vectorised over name codes × steps. `cat="user_annotation"`:
    the same for `record_function` regions (`Optimizer.step#Adam.step`), the step markers left out."""
    ops = host[host["cat"] == cat]
    if cat != "cpu_op":
        ops = ops[~ops["name"].astype(str).str.match(S.STEP_NAME).to_numpy(bool)]
    if not len(ops) or not len(steps):
        return []
    all_steps = np.array(sorted(steps["step"].unique()), dtype=np.int64)
    cats = ops["name"].cat.categories
    codes_all = ops["name"].cat.codes.to_numpy().astype(np.int64)
    calls = np.zeros((len(cats), all_steps.size), dtype=np.int64)
    ns = np.zeros((len(cats), all_steps.size), dtype=np.int64)
    for rank, grp in steps.groupby("rank"):  # one loop per rank
        m = (ops["rank"] == rank).to_numpy() & (codes_all >= 0)
        t = ops["ts"].to_numpy(np.int64)[m]
        dur = ops["end"].to_numpy(np.int64)[m] - t
        wi = iv.window_of(grp["ts"], grp["end"], t)
        ok = wi >= 0
        col = np.searchsorted(all_steps, grp["step"].to_numpy(np.int64)[wi[ok]])
        np.add.at(calls, (codes_all[m][ok], col), 1)
        np.add.at(ns, (codes_all[m][ok], col), dur[ok])
    used = np.flatnonzero(calls.sum(axis=1))
    used = used[np.argsort(-ns[used].sum(axis=1), kind="stable")]
    steps_t = tuple(int(s) for s in all_steps)
    return [
        OpStat(
            name=str(cats[c]),
            steps=steps_t,
            calls_per_step=tuple(int(x) for x in calls[c]),
            ns_per_step=tuple(int(x) for x in ns[c]),
        )
        for c in used
    ]


def dataloader_kinds(host: pd.DataFrame) -> tuple[dict[str, int], int, int] | None:
    """The DataLoader __next__ annotations: (iterator kind → calls, calls, ns inside), None without."""
    ann = host[host["state"] == DATALOADER]
    if not len(ann):
        return None
    kinds = ann["name"].astype(str).str.extract(DATALOADER_RE)[0].dropna()
    counts = {str(k): int(v) for k, v in kinds.value_counts().items()}
    return counts, len(ann), int((ann["end"] - ann["ts"]).sum())


def dataloader_info(kinds: dict[str, int], calls: int, ns: int, n_steps: int) -> DataLoaderInfo:
    """The DataLoader iterator kind (the most frequent; ties: the first by name), single-process or
    multi-worker, and its time per step."""
    kind = min(kinds, key=lambda k: (-kinds[k], k)) if kinds else None
    multi = None if kind is None else ("MultiProcessing" in kind or "MultiProcess" in kind)
    return DataLoaderInfo(iterator=kind, multi_worker=multi, calls=calls, ns_per_step=ns / max(n_steps, 1))
