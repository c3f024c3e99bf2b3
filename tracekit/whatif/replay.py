"""The replay: a scenario's edge weights, the longest path over the graph, and the step times.

    rep[v] = max over incoming edges (u, v) of rep[u] + w      (nodes without one keep obs[v])

computed in one pass over the nodes in topological order (`loops.longest_paths`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

from tracekit.analysis.calls import PAGEABLE_RE
from tracekit.analysis.causes import BY_NAME, STATE, STATE_NAMES
from tracekit.analysis.steps import Work, assign_work
from tracekit.analysis.steps import bounds as step_bounds
from tracekit.data import schema as S
from tracekit.whatif.cudagraph import graph_regions
from tracekit.whatif.graph import DROPPED, MEET, Graph
from tracekit.whatif.knobs import autocast_factors, layout_factors
from tracekit.whatif.loops import HOST_CLASS, WAIT_CLASS, ReplayGraph, longest_paths
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions


def activity_factors(g: Graph, kernels: dict) -> np.ndarray:
    """Per device activity, the product of the factors of the --kernels patterns its name matches.
    A pattern that matches nothing is a mistake (ScenarioError)."""
    f = np.ones(len(g.device), np.float64)
    if not kernels:
        return f
    names = g.device["name"].astype("category").cat.remove_unused_categories()
    cats = np.asarray(names.cat.categories.astype(str), dtype=object)
    codes = names.cat.codes.to_numpy()
    for pattern, factor in kernels.items():
        rx = re.compile(pattern)
        hit = np.array([bool(rx.search(c)) for c in cats], dtype=bool)
        if not hit.any():
            sample = ", ".join(sorted(cats, key=len)[:3])
            raise ScenarioError(
                f"--kernels {pattern}={factor:g}: no device activity name matches {pattern!r} "
                f"(names look like: {sample})"
            )
        f[hit[codes]] *= factor
    return f


def op_factors(g: Graph, host, ops: dict) -> tuple[np.ndarray, np.ndarray]:
    """`--ops REGEX=F`: (per edge, per device activity) factors. A framework op (cpu_op, any depth) or a
    `record_function` region (user annotation: `Optimizer.step#Adam.step`) whose name matches: every host
    segment inside it (its dispatch, the launch and sync calls it makes) and the device work launched
    from inside it take F x their time, and with F = 0 its syncs no longer wait. `host`: the frames'
    host events the graph was built from (`host_start_node` order). A pattern that matches no op is a
    mistake (ScenarioError)."""
    edge_f = np.ones(g.src.size, np.float64)
    act_f = np.ones(len(g.device), np.float64)
    names = host["name"].astype("category")
    cats = np.asarray(names.cat.categories.astype(str), dtype=object)
    codes = names.cat.codes.to_numpy()
    is_op = host["cat"].isin((S.CAT_CPU_OP, S.CAT_USER_ANNOTATION)).to_numpy()
    launch = g.device["launch_node"].to_numpy(np.int64)
    for pattern, factor in ops.items():
        rx = re.compile(pattern)
        hit = np.array([bool(rx.search(c)) for c in cats] + [False], dtype=bool)
        m = is_op & hit[np.where(codes >= 0, codes, len(cats))]
        if not m.any():
            raise ScenarioError(
                f"--ops {pattern}={factor:g}: no framework op (cpu_op) or record_function region "
                f"matches {pattern!r}"
            )
        covered = g.covered(m)
        edge_f[(g.ecls == HOST_CLASS) & covered[g.src]] *= factor
        waits = g.ecls == WAIT_CLASS
        edge_f[waits & covered[np.maximum(g.dst - 1, 0)]] *= factor  # the wait of a sync call inside it
        act_f[(launch > 0) & covered[np.maximum(launch - 1, 0)]] *= factor  # launched from inside it
    return edge_f, act_f


# A copy from pinned memory: COPY_LATENCY_NS + bytes / PINNED_GBPS (the median of pinned host-to-device
# copies of >= 1 MiB, and of every copy under 4 KiB, on the H200 captures in fixtures/, and the same on
# the H100 run of docs/results/advice: `python benchmarks/copy_bandwidth.py ...`, benchmarks/RESULTS.md).
PINNED_GBPS = 55.0
COPY_LATENCY_NS = 1_000


def pinned_factors(g: Graph, host) -> tuple[np.ndarray, np.ndarray]:
    """`--pin-memory`: (per edge factors, per device activity factors). The host segments inside the
    runtime calls that launched a copy from pageable memory take 0, and so do their waits: such a call
    waits for its stream, then for the copy (a blocking copy: tracekit.analysis.events); from pinned
    memory with non_blocking=True it returns at once. Each such copy takes what a pinned copy of its size
    takes (COPY_LATENCY_NS + bytes / PINNED_GBPS, never longer than it took; its observed time where the
    trace has no size), launched from its call's start as the graph has it. A capture without such a
    copy is a mistake (ScenarioError)."""
    edge_f = np.ones(g.src.size, np.float64)
    act_f = np.ones(len(g.device), np.float64)
    names = g.device["name"].astype(str)
    pageable = names.str.contains(PAGEABLE_RE, regex=True).to_numpy()
    launch = g.device["launch_node"].to_numpy(np.int64)
    if not (pageable & (launch >= 0)).any():
        raise ScenarioError(
            "--pin-memory: the capture has no copy from pageable memory with its launch call "
            "(Memcpy HtoD (Pageable -> Device) or DtoH to Pageable)"
        )
    is_call = host["cat"].isin((S.CAT_RUNTIME, S.CAT_DRIVER)).to_numpy()
    m = g.launch_calls(host, pageable)
    # with the calls, the stream sync a blocking copy makes after its call (torch's copy_ with
    # non_blocking=False): inside the framework op around the call, a sync call's time and wait go too
    cov = g.covered(m | _syncs_beside(host, m, is_call))
    edge_f[(g.ecls == HOST_CLASS) & cov[g.src]] = 0.0
    edge_f[(g.ecls == WAIT_CLASS) & cov[np.maximum(g.dst - 1, 0)]] = 0.0
    if "bytes" in g.device:
        nbytes = g.device["bytes"].to_numpy(np.float64)
        dur = (g.device["end"] - g.device["ts"]).to_numpy(np.float64)
        pinned = COPY_LATENCY_NS + nbytes / PINNED_GBPS  # bytes / (GB/s) = ns
        ok = pageable & ~np.isnan(nbytes) & (dur > 0)
        act_f[ok] = np.minimum(pinned[ok] / dur[ok], 1.0)
    return edge_f, act_f


def _syncs_beside(host, calls: np.ndarray, is_call: np.ndarray) -> np.ndarray:
    """The blocking runtime calls (host state sync) inside the innermost framework op around each of
    `calls` on its thread (a mask over `host`, by position)."""
    out = np.zeros(len(host), bool)
    thread = (
        host["rank"].to_numpy(np.int64) * (1 << 42)
        + host["pid"].to_numpy(np.int64) * (1 << 21)
        + host["tid"].to_numpy(np.int64)
    )
    ts, end = host["ts"].to_numpy(np.int64), host["end"].to_numpy(np.int64)
    ops = np.flatnonzero((host["cat"] == S.CAT_CPU_OP).to_numpy())
    sync = np.flatnonzero(is_call & (host["state"] == STATE["sync"]).to_numpy())
    if not ops.size or not sync.size:
        return out
    for c in np.flatnonzero(calls).tolist():  # a few per step
        around = ops[(thread[ops] == thread[c]) & (ts[ops] <= ts[c]) & (end[ops] >= end[c])]
        if not around.size:
            continue
        k = around[np.argmax(ts[around])]  # the innermost op: the latest to start
        out[sync[(thread[sync] == thread[c]) & (ts[sync] >= ts[k]) & (end[sync] <= end[k])]] = True
    return out


@dataclass(frozen=True)
class Factors:
    """A scenario's factors that depend on the capture's names: per device activity (`--kernels`, and the
    work `--ops` ops launch) and per edge (`--ops`, `--cuda-graphs`; empty without them); and what
    `--cuda-graphs` sets: ns added per edge (empty: none), the graph's weights with the in-graph device
    gaps at the replay floor (None: the graph's own), and what its regions hold (`cudagraph.GraphRegions`)."""

    act: np.ndarray
    edge: np.ndarray
    edge_add: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    w: Optional[np.ndarray] = None
    regions: Any = None
    # recorded event boundaries per edge, where a knob adds host work that the profiler would have
    # recorded (tracekit.whatif.knobs): the unprofiled replay takes its cost off (None: the graph's)
    cost: Optional[np.ndarray] = None
    notes: tuple = ()


def factors(g: Graph, host, scenario: WhatIfOptions) -> Factors:

    act = activity_factors(g, dict(scenario.kernels))
    edge = np.zeros(0, np.float64)
    if scenario.ops:
        edge, op_act = op_factors(g, host, dict(scenario.ops))
        act = act * op_act
    w_add = None
    if scenario.pin_memory:
        pin, pin_act = pinned_factors(g, host)
        edge = pin if not edge.size else edge * pin
        act = act * pin_act
    cost = None
    notes: tuple = ()
    for on, make in (
        (scenario.channels_last, lambda: layout_factors(g, host)),
        (bool(scenario.autocast), lambda: autocast_factors(g, host, str(scenario.autocast))),
    ):
        if not on:
            continue
        k = make()
        act = act * k.act
        if k.edge.size:
            edge = k.edge if not edge.size else edge * k.edge
        if k.add_ns.size:
            w_add = k.add_ns if w_add is None else w_add + k.add_ns
            cost = (g.cost if cost is None else cost) + k.add_cost
        notes += k.notes
    if scenario.comm == 0.0:  # no communication: a collective no longer waits for the other ranks
        meet = np.where(g.kind == MEET, 0.0, 1.0)
        edge = meet if not edge.size else edge * meet
    if not scenario.cuda_graphs:
        return Factors(act, edge, w=None if w_add is None else g.w + w_add, cost=cost, notes=notes)
    regions = graph_regions(g, host, scenario.graph_region)
    edge = regions.edge_f if not edge.size else edge * regions.edge_f
    w = regions.w
    if w_add is not None:
        w = (g.w if w is None else w) + w_add
    return Factors(act, edge, regions.edge_add, w, regions, cost=cost, notes=notes)


@dataclass(frozen=True)
class Weights:
    """What a scenario does to the edge weights, as small tables the compiled replay applies per edge
    (`loops.longest_paths`): a host segment's weight times host_f[state] * rank_f[rank] (* edge_f), less
    `cost_half_ns` per recorded event boundary at its start (the profiler's cost, DESIGN.md
    "Unprofiled"); a device activity's times act_f[activity]; the syncs' waits dropped (`sync=0`)."""

    host_f: np.ndarray  # per host state (STATE_NAMES), then 1.0 for a segment without one
    rank_f: np.ndarray  # per rank
    cost_half_ns: float
    act_f: np.ndarray  # per device activity
    drop_wait: bool
    edge_f: np.ndarray  # per edge (`--ops`, `--cuda-graphs`), or empty
    edge_add: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ns per edge, or empty
    w: Optional[np.ndarray] = None  # the edge weights, when the scenario sets some (else the graph's)
    cost: Optional[np.ndarray] = None  # recorded event boundaries per edge, when a knob adds some


def weights(g: Graph, scenario: WhatIfOptions, cost_ns: float = 0.0, f: Factors | None = None) -> Weights:
    """The scenario's weight tables, with `cost_ns` of profiler time removed per recorded host event
    (half after its start, half after its end; a segment never shrinks below zero). `f`: the scenario's
    `factors` (None: no --kernels / --ops)."""
    # a state whose scenario drops waits (sync) keeps its own host time: its wait is derived
    sf = np.array(
        [scenario.cause_factor(n) if BY_NAME[n].scenario == "segments" else 1.0 for n in STATE_NAMES] + [1.0]
    )
    rf = np.ones(int(g.rank.max()) + 1 if g.rank.size else 1)
    for r, v in scenario.rank_host.items():
        if 0 <= r < rf.size:
            rf[r] = v
    af = np.ones(len(g.device)) if f is None else np.asarray(f.act, np.float64)
    # the last slot: a CPU backend's collectives (their COLL edges' activity, graph.host_collectives)
    af = np.r_[af * np.where(g.device["nccl"].to_numpy(bool), scenario.comm, 1.0), scenario.comm]
    edge = np.zeros(0, np.float64) if f is None else f.edge
    if f is None:
        return Weights(sf, rf, float(cost_ns) / 2.0, af, scenario.no_wait, edge)
    return Weights(sf, rf, float(cost_ns) / 2.0, af, scenario.no_wait, edge, f.edge_add, f.w, f.cost)


def replay(g: Graph, w: Weights) -> np.ndarray:
    """The node times of the graph replayed under `w` (one pass, `loops.longest_paths` with k = 1)."""
    return _pass(g, [w])[:, 0]


# How many scenarios one pass of `replay_many` replays: each costs 8 bytes per node, and the pass is
# bound by reading the edges, which all of them share.
REPLAY_BATCH = 4


def replay_many(g: Graph, ws: list[Weights]) -> Iterator[np.ndarray]:
    """`replay(g, w)` of each of `ws`, in order, a few scenarios per pass over the graph; only one pass's
    node times are held at a time. The scenarios may differ only in host factors, profiler cost and
    dropped waits (what the savings vary); edge weights, rank, activity and per-edge factors and
    additions are the first one's."""
    for at in range(0, len(ws), REPLAY_BATCH):
        rep = _pass(g, ws[at : at + REPLAY_BATCH])
        for j in range(rep.shape[1]):
            yield rep[:, j]
        del rep


def _pass(g: Graph, batch: list[Weights]) -> np.ndarray:
    """One pass over the graph for the scenarios of `batch`: (nodes, len(batch)) node times."""
    if not g.replayable:
        raise RuntimeError("this graph's edges were let go (Graph.let_edges_go): it replays nothing more")
    first = batch[0]
    for w in batch[1:]:
        shared = zip(_shared(w), _shared(first))
        if not all(a is b or (a is not None and b is not None and np.array_equal(a, b)) for a, b in shared):
            raise ValueError(
                "replay_many: the scenarios differ in edge weights or rank/activity/edge factors"
            )
    arrays = ReplayGraph(
        g.order,
        g.indptr,
        g.in_edges,
        g.src,
        g.w if first.w is None else first.w,
        g.lb,
        g.ecls,
        g.state,
        g.rank,
        g.act,
        g.cost if first.cost is None else first.cost.astype(g.cost.dtype),
    )
    return longest_paths(
        arrays,
        np.stack([w.host_f for w in batch]),
        first.rank_f,
        np.array([w.cost_half_ns for w in batch], np.float64),
        first.act_f,
        np.array([w.drop_wait for w in batch], np.bool_),
        first.edge_f,
        np.asarray(first.edge_add, np.float64),
    )


def _shared(w: Weights) -> tuple:
    return (w.w, w.rank_f, w.act_f, w.edge_f, w.edge_add, w.cost)


# -- step times ------------------------------------------------------------------------------------


@dataclass
class StepTimes:
    """Per (rank, device): the step numbers and the time of each step (ns), by the definition of
    DESIGN.md: the step ends when both its host window and the device work launched in it are done."""

    keys: list  # (rank, device)
    steps: list  # per key: int array of step numbers
    dur: list  # per key: int64 array of step times
    host_dur: list  # per key: the host windows alone
    busy: list  # per key: device busy time of the step's own work (sum of its activities' lengths)
    bounds: list  # per key: (start, end) int64 arrays of each step


class StepModel:
    """The step definition (tracekit.analysis.steps) applied to a graph's node times: which window each
    activity belongs to is fixed once on the observed times; `points` then reads any replay."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        steps = g.steps
        self.keys = []
        self.win = {}  # rank -> (step numbers, thread index, window start t, window end t, cycle)
        for rank, st in steps.groupby("rank", sort=True):
            r = int(rank)
            key = (r, int(st["pid"].iloc[0]), int(st["tid"].iloc[0]))
            self.win[r] = (
                st["step"].to_numpy(np.int64),
                g.thread_index.get(key),
                st["ts"].to_numpy(np.int64),
                st["end"].to_numpy(np.int64),
                st["cycle"].to_numpy(np.int64),
            )
        dev = g.device
        # (rank, device) -> (steps.Work, the activities' end nodes); (None, None): the host windows alone
        self.work: dict[tuple[int, int], tuple[Optional[Work], Optional[np.ndarray]]] = {}
        base = g.device_base
        for (rank, device), d in dev.groupby(["rank", "device"], sort=True):
            r = int(rank)
            if r not in self.win:
                continue
            _, _, ws, we, cy = self.win[r]
            work = assign_work(ws, we, cy, d["launch_ts"].to_numpy(np.float64), d["ts"].to_numpy(np.int64))
            self.work[(r, int(device))] = (work, base + 2 * d.index.to_numpy() + 1)
            self.keys.append((r, int(device)))
        for r in self.win:  # ranks without device activity: the host windows alone
            if not any(k[0] == r for k in self.keys):
                self.work[(r, -1)] = (None, None)
                self.keys.append((r, -1))

    def points(self, rep: np.ndarray, key) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(each step's start, each step's end, the host windows' lengths) for one (rank, device), from
        the node times `rep`."""
        g = self.g
        _, ti, ws, we, cy = self.win[key[0]]
        rws = map_times(g, ti, ws, rep)
        rwe = map_times(g, ti, we, rep)
        work, end_nodes = self.work[key]
        start, end = step_bounds(rws, rwe, cy, work, None if end_nodes is None else rep[end_nodes])
        return start, end, rwe - rws

    def times(self, rep: np.ndarray) -> StepTimes:
        out = StepTimes([], [], [], [], [], [])
        for key in self.keys:
            start, end, host = self.points(rep, key)
            out.keys.append(key)
            out.steps.append(self.win[key[0]][0])
            out.dur.append(end - start)
            out.host_dur.append(host)
            out.busy.append(np.zeros(end.size, np.int64))
            out.bounds.append((start, end))
        return out


def map_times(g: Graph, ti: int | None, t: np.ndarray, rep: np.ndarray) -> np.ndarray:
    """Replayed times of observed instants on a host thread: at a boundary, its node's time; inside a
    segment, the segment's replayed start plus the elapsed time, at most to the segment's replayed end."""
    if ti is None:
        return t.copy()
    tp = g.threads[ti]
    b = tp.bounds
    k = np.searchsorted(b, t, side="right") - 1
    kk = np.clip(k, 0, b.size - 1)
    node = tp.offset + kk
    base = rep[node] + (t - b[kk])
    nxt = np.minimum(kk + 1, b.size - 1)
    cap = np.where(kk + 1 < b.size, rep[tp.offset + nxt], np.iinfo(np.int64).max)
    return np.where(k < 0, t - b[0] + rep[tp.offset], np.minimum(base, np.maximum(cap, rep[node])))


__all__ = [
    "replay",
    "weights",
    "Weights",
    "activity_factors",
    "StepModel",
    "StepTimes",
    "map_times",
    "DROPPED",
]
