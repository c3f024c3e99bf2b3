"""`--cuda-graphs`: what the step would take if the device work of a region were launched as one CUDA
graph (DESIGN.md, "What if: CUDA graphs").

A *region* is a host interval on one thread: each step window (`--cuda-graphs`), or each outermost host
event (cpu_op, annotation, module, Python function) whose name matches `--cuda-graphs-region REGEX`. A
region that launches device work becomes one graph:

    eager    host  |op|lk|op|lk|op|lk|...|            (interpreter, framework, launch per kernel)
             dev        K1    K2    K3                 (each kernel waits for its launch)
    graphed  host  |G|                                 (one cudaGraphLaunch, GRAPH_LAUNCH_NS)
             dev     K1.K2.K3                           (back to back, GRAPH_GAP_NS apart)

- its host segments in the states interpreter, framework and launch take no time (a replay runs none of
  the region's Python, dispatch or launches), and on a step thread so do the autograd engine threads'
  inside it; one graph launch (GRAPH_LAUNCH_NS) is added where it begins. Segments in `sync` and
  `dataloader` stay: a graph cannot hold a blocking call, and the input pipeline runs anyway (counted and
  said in the result);
- between consecutive kernels of the region on a stream the gap is the graph-replay floor GRAPH_GAP_NS
  instead of the observed one; the kernels keep their durations (fusion is not predicted: that is what
  torch.compile changes, and a trace cannot say how).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.causes import FAMILY_REPLAY, STATE, states_where
from tracekit.data import schema as S
from tracekit.whatif.graph import HOST, IDLE, STREAM, SYNC_OWN, Graph
from tracekit.whatif.loops import HOST_CLASS
from tracekit.whatif.scenario import ScenarioError

# Device gap between consecutive kernels of one graph replay on a stream. Measured on H200 graph captures
# (torch 2.11, `python benchmarks/graph_floor.py RUN_DIR`): on one machine 0.107-0.108 µs mean (median
# 0.097 / 0.000 µs; fixtures/h200_graphs: the host-bound MLP's 313-kernel graph, the seed MLP's 120), on
# another, the same kernel pairs 0.44-0.56 µs mean (median 0.38-0.42 µs; docs/results/cuda_graphs: the
# host-bound heavy_mlp's 209-kernel graph, the seed's 73) — a property of the machine, not of the model, and
# not visible in an eager trace (its back-to-back queued kernels sit 0.96-1.18 µs apart on both). The
# floor is taken between the two; GRAPH_GAP_RANGE_NS is what the prediction says it may be off by.
GRAPH_GAP_NS = 250
GRAPH_GAP_RANGE_NS = (100, 450)
# Host time of one graph.replay() (cudaGraphLaunch) without the profiler: 3.3-5.5 µs (mean of 50 calls,
# 5 trials) for the host-bound MLP's graph, 9.7-10.5 µs for the seed MLP's, on the H200
# (`python3 benchmarks/graph_floor.py --device`, docs/results/cuda_graphs/graph_floor_device.txt); under
# the profiler CUPTI's callbacks make the call 240-310 µs for 313 nodes (not the cost a user pays).
GRAPH_LAUNCH_NS = 5_000
# The host states a graph replay no longer runs.
REMOVED_STATES = states_where(lambda c: not c.graph_keeps)
SYNC, DATALOADER = STATE["sync"], STATE["dataloader"]
REGION_CATS = (S.CAT_CPU_OP, S.CAT_USER_ANNOTATION, S.CAT_PYTHON_FUNCTION)


@dataclass(frozen=True)
class GraphRegions:
    """What `--cuda-graphs` does to a capture's graph, and what its regions hold."""

    edge_f: np.ndarray  # per edge: 0 for the region's removed host segments, else 1
    edge_add: np.ndarray  # per edge: GRAPH_LAUNCH_NS on each region's first host segment, else 0
    w: np.ndarray  # the graph's weights, in-region stream gaps at GRAPH_GAP_NS and waits for the engine at 0
    regions: int  # regions that launch device work (graphs)
    kernels: int  # device activities inside them
    kernels_outside: int  # device activities of the steps outside every region
    syncs: int  # blocking calls inside the regions (kept: a graph cannot capture them)
    dataloader_fetches: int  # DataLoader fetches inside the regions (kept)
    region_text: str

    def to_json(self) -> dict:
        return {
            "regions": self.regions,
            "kernels": self.kernels,
            "kernels_outside": self.kernels_outside,
            "syncs_kept": self.syncs,
            "dataloader_fetches_kept": self.dataloader_fetches,
            "gap_floor_ns": GRAPH_GAP_NS,
            "gap_floor_range_ns": list(GRAPH_GAP_RANGE_NS),
            "graph_launch_ns": GRAPH_LAUNCH_NS,
            "region": self.region_text,
        }


def graph_regions(g: Graph, host: pd.DataFrame, pattern: str | None) -> GraphRegions:
    """The regions of `pattern` (None: the steps) on the graph `g` built from the frames' `host` events.
    ScenarioError when the pattern matches no host event, or none that launches device work."""
    spans = _spans(g, host, pattern)
    node_span, own = _cover(g, spans)
    n_act = len(g.device)
    launch = g.device["launch_node"].to_numpy(np.int64) if n_act else np.zeros(0, np.int64)
    act_span = np.where(launch > 0, node_span[np.maximum(launch - 1, 0)], -1)
    used = np.unique(act_span[act_span >= 0])
    if not used.size:
        raise ScenarioError(
            f"--cuda-graphs-region {pattern}: {len(spans)} host event(s) match {pattern!r}, but no device "
            "work is launched inside them; name the ops or modules that launch the kernels"
            if pattern
            else "--cuda-graphs: no device work is launched inside the capture's steps"
        )
    live = np.isin(node_span, used)
    node_span = np.where(live, node_span, -1)
    edge_f, edge_add, w = _host_edges(g, node_span, own)
    _device_edges(g, act_span, w)
    return GraphRegions(
        edge_f=edge_f,
        edge_add=edge_add,
        w=w,
        regions=int(used.size),
        kernels=int((act_span >= 0).sum()),
        kernels_outside=int(((act_span < 0) & (launch > 0)).sum()),
        syncs=_inside(host, g, node_span, FAMILY_REPLAY[host["family"].to_numpy()] == SYNC),
        dataloader_fetches=_inside(host, g, node_span, _is_fetch(host)),
        region_text=f"outermost host events matching {pattern!r}" if pattern else "each step",
    )


def _spans(g: Graph, host: pd.DataFrame, pattern: str | None) -> pd.DataFrame:
    """rank, pid, tid, ts, end of each region: the step windows, or the outermost matching host events."""
    if pattern is None:
        return g.steps[["rank", "pid", "tid", "ts", "end"]].reset_index(drop=True)
    rx = re.compile(pattern)
    names = host["name"].astype("category")
    cats = np.asarray(names.cat.categories.astype(str), dtype=object)
    hit = np.array([bool(rx.search(c)) for c in cats] + [False], dtype=bool)
    codes = names.cat.codes.to_numpy()
    m = hit[np.where(codes >= 0, codes, len(cats))] & host["cat"].isin(REGION_CATS).to_numpy()
    if not m.any():
        raise ScenarioError(
            f"--cuda-graphs-region {pattern}: no host event (op, annotation, module) name matches {pattern!r}"
        )
    ev = host.loc[m, ["rank", "pid", "tid", "ts", "end"]].sort_values(
        ["rank", "pid", "tid", "ts", "end"], ascending=[True, True, True, True, False], kind="stable"
    )
    keep = []
    for _, t in ev.groupby(["rank", "pid", "tid"], sort=False):  # one loop per thread
        e = t["end"].to_numpy(np.int64)
        reach = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, e[:-1]])
        keep.append(t[t["ts"].to_numpy(np.int64) >= reach])  # not inside an earlier match
    return pd.concat(keep).reset_index(drop=True)


def _cover(g: Graph, spans: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per node, the region whose interval holds the segment that starts at it (-1: none), and whether
    the node is on the region's own thread. A region on a thread that owns steps also holds its
    process's autograd engine threads over the same interval."""
    node_span = np.full(g.obs.size, -1, np.int64)
    own = np.zeros(g.obs.size, bool)
    step_threads = {tuple(int(x) for x in k) for k in g.steps[["rank", "pid", "tid"]].to_numpy()}
    for key, sp in spans.groupby(["rank", "pid", "tid"]):  # one loop per thread with regions
        key = tuple(int(x) for x in key)
        targets = [key]
        if key in step_threads:
            targets += [k for k in g.engine_threads if k[:2] == key[:2] and k != key]
        s = sp["ts"].to_numpy(np.int64)
        e = sp["end"].to_numpy(np.int64)
        ids = sp.index.to_numpy(np.int64)
        for k in targets:  # the thread, then its engine threads
            ti = g.thread_index.get(k)
            if ti is None:
                continue
            tp = g.threads[ti]
            i = np.searchsorted(s, tp.bounds, side="right") - 1  # the region that starts last before
            inside = (i >= 0) & (tp.bounds < e[np.maximum(i, 0)])
            seg = tp.offset + np.flatnonzero(inside)
            node_span[seg] = ids[i[inside]]
            own[seg] = k == key
    return node_span, own


def _host_edges(g: Graph, node_span: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, ...]:
    """The host side: removed segments (factor 0), one graph launch per region (on its earliest removed
    segment of its own thread), no wait for the engine."""
    region = node_span[g.src]
    is_host = (g.ecls == HOST_CLASS) & ((g.kind == HOST) | (g.kind == SYNC_OWN))
    removed = is_host & (region >= 0) & np.isin(g.state, REMOVED_STATES)
    edge_f = np.where(removed, 0.0, 1.0)
    edge_add = np.zeros(g.src.size, np.float64)
    cand = np.flatnonzero(removed & own[g.src])
    if cand.size:
        order = cand[np.lexsort((g.src[cand], region[cand]))]
        first = order[np.r_[True, region[order][1:] != region[order][:-1]]]
        edge_add[first] = GRAPH_LAUNCH_NS
    w = g.w.copy()
    w[(g.kind == IDLE) & (region >= 0)] = 0  # inside a region nothing waits for the engine's host work
    return edge_f, edge_add, w


def _device_edges(g: Graph, act_span: np.ndarray, w: np.ndarray) -> None:
    """Consecutive kernels of one region on a stream: GRAPH_GAP_NS apart at most (in place on `w`)."""
    m = np.flatnonzero(g.kind == STREAM)
    if not m.size:
        return
    a = (g.src[m].astype(np.int64) - g.device_base - 1) // 2
    b = (g.dst[m].astype(np.int64) - g.device_base) // 2
    same = (act_span[a] >= 0) & (act_span[a] == act_span[b])
    w[m[same]] = np.minimum(w[m[same]], GRAPH_GAP_NS)


def _is_fetch(host: pd.DataFrame) -> np.ndarray:
    return (host["state"] == DATALOADER).to_numpy()


def _inside(host: pd.DataFrame, g: Graph, node_span: np.ndarray, m: np.ndarray) -> int:
    """How many of the host events `m` start inside a region."""
    return int((node_span[g.host_start_node[m]] >= 0).sum()) if m.any() else 0


__all__ = ["graph_regions", "GraphRegions", "GRAPH_GAP_NS", "GRAPH_GAP_RANGE_NS", "GRAPH_LAUNCH_NS"]
