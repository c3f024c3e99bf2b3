"""The dependency graph of a capture (DESIGN.md, "What if: the graph and the replay").

Nodes are instants with an observed time: every boundary of every host event on its thread (a thread's
time is a chain of *segments* between consecutive boundaries), and the start and end of every device
activity. Edges say "v cannot happen before u + w":

    host thread T  o--seg--o--seg--o---- sync call ----o--seg--o        HOST / SYNC_OWN chain edges
                           |launch end                 ^ WAIT (awaited work ends, + wake-up)
                           v LAUNCH                    |
    stream S         o==K1==o--STREAM--o==== K2 ====o--+                  DUR: the activity's length
    stream S'                               ^ XSTREAM (cross-stream wait, recorded or inferred)
    rank 1 stream    o==== allreduce ====o  COLL: a collective ends after its start plus its transfer,
                                            MEET: and after every other rank started it
    CPU backend T'   o==== gloo:all_reduce ====o              (the same COLL edges, on host nodes)
    step thread T    o-- collective wait ---o                  COLL_WAIT: resumes when it ends

Each node's replayed time is max(u' + w) over its incoming edges (a longest path; nodes with none keep
their observed time). The weights are set so that replaying the capture unchanged gives back the
observed times (`binding` below), except where an observed wait has no known cause: that wait is
dropped and counted, and the replay then runs early by exactly that much, which is the replay error
the self-check reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analysis.calls import CallKind, call_kind
from tracekit.analysis.causes import FAMILY_REPLAY, STATE
from tracekit.analysis.collective import match_collectives
from tracekit.analysis.comm import arrivals, host_collectives
from tracekit.analysis.events import Frames
from tracekit.analysis.host import Threads, segment_states
from tracekit.data import schema as S
from tracekit.whatif.loops import (
    DEVICE_CLASS,
    DROPPED,
    HOST_CLASS,
    PLAIN,
    WAIT_CLASS,
    cover,
    grouped,
    topological_order,
)
from tracekit.whatif.loops import (
    binding_weights as _binding_weights,
)

# Edge kinds.
HOST, SYNC_OWN, IDLE, WAIT, ANCHOR, JOIN, LAUNCH_EDGE, STREAM, XSTREAM, DUR, COLL, COLL_WAIT, MEET = range(13)
EDGE_KINDS = (
    "host",
    "sync_own",
    "idle",
    "wait",
    "anchor",
    "join",
    "launch",
    "stream",
    "xstream",
    "dur",
    "coll",
    "coll_wait",
    "meet",
)


SYNC = STATE["sync"]
COLLECTIVE = STATE["collective"]

# Floors: the least time a dependency takes when it is not the one that held a node back. Each is
# measured on the capture (medians below) where it has enough samples, else these H200 values are used
# (median launch end → kernel start 1.3-2.3 µs, back-to-back kernels 1.2 µs apart on one stream, a sync
# call returning ~2 µs after the device finished; fixtures/h200).
DEFAULT_LAUNCH_FLOOR_NS = 2_000
DEFAULT_STREAM_FLOOR_NS = 1_000
DEFAULT_WAKE_FLOOR_NS = 2_000
DEFAULT_SYNC_OVERHEAD_NS = 3_000
MIN_SAMPLES = 20
# A wait longer than this beyond its floor, with no dependency in the trace to explain it, is dropped
# from the replay and reported (a missing stream-wait record, an untraced thread, clock skew).
UNEXPLAINED_NS = 50_000
# A device activity that starts this much later than its launch and its stream allow is looked up for a
# cross-stream dependency (an activity on another stream of the device that ended just before it).
XSTREAM_MIN_NS = 5_000
# The ends of one collective on different ranks further apart than this (median) mean the ranks' clocks
# are not comparable: the ranks are then replayed without the cross-rank edges.
CLOCK_SKEW_NS = 100_000
# A launch call at least this long that returns within QUEUE_WAKE_MAX_NS of the end of device work
# launched before it began waited for a slot in the device's full launch queue (a host far ahead of a busy
# device: torchvision's ViT-B/16 in fp32 on an H100, 274 launches of 100 µs to 1.4 ms in three
# steps, each returning 1.6-26 µs, median 6.3, after a kernel ended; a launch's own time is 3-10 µs).
QUEUE_WAIT_MIN_NS = 50_000
QUEUE_WAKE_MAX_NS = 30_000


@dataclass
class ThreadPoints:
    """One host thread's chain: its boundary times are nodes offset .. offset + len(bounds) - 1."""

    key: tuple[int, int, int]  # rank, pid, tid
    offset: int
    bounds: np.ndarray  # sorted unique observed times


@dataclass
class Graph:
    """Nodes (observed times) and weighted edges, with the topological order and the incoming-edge
    lists the replay walks; plus what maps events and steps onto nodes."""

    obs: np.ndarray  # int64, per node
    src: np.ndarray  # int32 (int64 on a graph of 2**31 nodes or more), per edge
    dst: np.ndarray
    w: np.ndarray  # int64: the weight for an unchanged replay
    kind: np.ndarray  # int8: EDGE_KINDS index
    ecls: np.ndarray  # int8: how a scenario changes the edge (loops.PLAIN, HOST_CLASS, DEVICE_CLASS, ...)
    state: np.ndarray  # int8: host scaling state of HOST / SYNC_OWN edges (causes.STATE codes), else -1
    rank: np.ndarray  # int32: rank of the edge's destination
    act: np.ndarray  # int32: device activity of DUR / COLL edges, else -1
    cost: np.ndarray  # int32: profiler event boundaries at the start of a HOST / SYNC_OWN segment
    lb: np.ndarray  # int64: a node's earliest time whatever its edges say (DROPPED: none)
    order: np.ndarray  # nodes in a topological order
    indptr: np.ndarray  # incoming edges of node v: in_edges[indptr[v]:indptr[v + 1]]
    in_edges: np.ndarray
    threads: list[ThreadPoints]
    thread_index: dict[tuple[int, int, int], int]
    host_row: np.ndarray  # per host event (frames.host order): its row in the capture table
    host_start_node: np.ndarray  # its start and end node
    host_end_node: np.ndarray
    device: pd.DataFrame  # frames.device plus launch_ts (NaN without launch record)
    device_base: int  # activity i: start node device_base + 2i, end node + 1
    steps: pd.DataFrame  # frames.steps
    diagnostics: dict = field(default_factory=dict)
    engine_threads: frozenset = frozenset()  # (rank, pid, tid) of the autograd engine's threads

    # The per-edge arrays, and the replay's order and bounds: what only a replay reads.
    EDGE_ARRAYS = (
        "src",
        "dst",
        "w",
        "kind",
        "ecls",
        "state",
        "rank",
        "act",
        "cost",
        "lb",
        "order",
        "indptr",
        "in_edges",
    )

    def covered(self, m: np.ndarray) -> np.ndarray:
        """Per node: whether the host segment from it to its thread's next node lies inside one of the
        host events `m` selects (in `host_start_node` order)."""
        n = self.obs.size
        d = np.bincount(self.host_start_node[m], minlength=n + 1) - np.bincount(
            self.host_end_node[m], minlength=n + 1
        )
        return np.cumsum(d[:n]) > 0

    def launch_calls(self, host: pd.DataFrame, activities: np.ndarray) -> np.ndarray:
        """A mask over `host` (the frames' host events, `host_start_node` order): the runtime and driver
        calls that launched the device activities `activities` selects (a blocking call launches from
        its start: `launches`)."""
        launch = self.device["launch_node"].to_numpy(np.int64)
        nodes = np.unique(launch[activities & (launch >= 0)])
        is_call = host["cat"].isin((S.CAT_RUNTIME, S.CAT_DRIVER)).to_numpy()
        blocking = FAMILY_REPLAY[host["family"].to_numpy()] == SYNC
        node = np.where(blocking, self.host_start_node, self.host_end_node)
        return is_call & np.isin(node, nodes)

    def let_edges_go(self) -> None:
        """Empty the edges (the graph's bulk), keeping the nodes, threads
        and device frame: the predicted timeline can still be made from node times, nothing more can be
        replayed (`replayable` is then False, and a replay raises)."""
        for name in self.EDGE_ARRAYS:
            setattr(self, name, np.zeros(0, getattr(self, name).dtype))

    @property
    def replayable(self) -> bool:
        return self.lb.size == self.obs.size


def build_graph(fr: Frames, threads: Threads, stream_waits: pd.DataFrame | None = None) -> Graph:
    """The graph of a capture's frames. `threads` is the analysis's host-thread model (backward windows,
    engine threads, step threads); `stream_waits`: the capture's recorded `cuda_sync` stream waits
    (`recorded_stream_waits`), or None."""
    b = _Builder(fr, threads)
    b.host_chains()
    b.device_chains()
    b.launches()
    b.syncs()
    b.queue_waits()
    b.collectives()
    b.cross_stream(stream_waits)
    return b.finish()


def keep_sync_records(capture) -> None:
    """Let `capture`'s table go but for its sync records (`sync_records`): what a caller that read the
    capture for itself passes as `load_frames(release=)`, once the frames hold all the analysis and the
    replay read, before they are converted (the table and the frames are then never held together:
    benchmarks/RESULTS.md "Issue 17"). Never a capture the caller's caller loaded."""
    capture.table = sync_records(capture.table)


def sync_records(table):
    """The rows of `table` that `recorded_stream_waits` reads (cat cuda_sync; a few per step, where
    Kineto wrote them): what a caller that keeps the frames but lets the table go keeps for the graph."""
    import pyarrow as pa

    from tracekit.data import arrow

    if table.num_rows == 0 or "cat" not in table.column_names:
        return table
    keep = []
    for chunk in table["cat"].chunks:  # on the dictionary codes: decoding millions of strings is slow
        if not pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_encode()
        codes, names = arrow.codes(chunk)
        keep.append(codes == names.index(S.CAT_CUDA_SYNC) if S.CAT_CUDA_SYNC in names else codes < -1)
    return table.filter(arrow.bools(np.concatenate(keep)))


def recorded_stream_waits(table) -> pd.DataFrame:
    """`cuda_sync` "Stream Wait Event" records (Kineto with CUDA sync events enabled): rank, device,
    stream (the waiting one), wait_stream, correlation (of the cudaStreamWaitEvent call)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = ["rank", "cat", "sync_kind", "device", "stream", "wait_stream", "correlation"]
    if table.num_rows == 0 or any(c not in table.column_names for c in cols):
        return pd.DataFrame(columns=cols[:1] + cols[3:])
    t = table.select(cols)
    m = pc.and_(
        pc.equal(pc.cast(t["cat"], pa.string()), S.CAT_CUDA_SYNC),
        pc.equal(pc.cast(t["sync_kind"], pa.string()), "Stream Wait Event"),
    )
    t = t.filter(pc.fill_null(m, False)).select(["rank", "device", "stream", "wait_stream", "correlation"])
    df = t.to_pandas().dropna()
    return df.astype(np.int64)


class _Builder:
    def __init__(self, fr: Frames, threads: Threads) -> None:
        self.fr = fr
        self.th = threads
        self.edges: list[tuple] = []  # (src, dst, floor, kind, state, act, cost) arrays
        self.diag: dict = {}
        self.step_key: dict[
            int, tuple[int, int, int]
        ] = {}  # rank -> (rank, pid, tid) of its (first) step thread
        for r, p, t in fr.steps[["rank", "pid", "tid"]].drop_duplicates().itertuples(index=False):
            self.step_key.setdefault(int(r), (int(r), int(p), int(t)))
        self.step_threads = set(self.step_key.values())
        self.by_thread = threads.host_by_thread  # the analysis' host events per thread (table order)
        self._thread_nodes(fr)
        # a CPU backend's collective spans (positions in fr.host): their ends are set by the collective,
        # not by the issuing thread's progress
        self.coll_spans = host_collectives(fr.host, self.step_threads)
        self.coll_pos = self.coll_spans["pos"].to_numpy(np.int64)
        dev = fr.device.reset_index(drop=True)
        self.dev = dev
        self.device_base = self.n_host
        self.n_nodes = self.n_host + 2 * len(dev)
        # node and activity indices fit 32 bits on any capture that fits in memory: the per-edge arrays
        # are the graph's bulk
        self.ix = np.int32 if self.n_nodes < 2**31 else np.int64
        obs = np.empty(self.n_nodes, np.int64)
        for tp in self.threads:
            obs[tp.offset : tp.offset + tp.bounds.size] = tp.bounds
        obs[self.n_host :: 2] = dev["ts"].to_numpy(np.int64)
        obs[self.n_host + 1 :: 2] = dev["end"].to_numpy(np.int64)
        self.obs = obs
        self.act_launch = np.full(len(dev), -1, np.int64)  # node of the launch call's end
        self.launch_ts = np.full(len(dev), np.nan)
        self.launch_idx = self._launch_index()
        self.queue_calls, self.queue_awaited = self._queue_waits()

    def _launch_index(self) -> np.ndarray:
        """Per device activity: its launch record's index in the frames' launches, -1 where none."""
        dev, lau = self.dev, self.fr.launches
        idx = np.full(len(dev), -1, np.int64)
        if not len(dev) or not len(lau):
            return idx
        ok = ~np.isnan(dev["correlation"].to_numpy(np.float64))
        idx[ok] = _pair_index(
            lau["rank"].to_numpy(np.int64),
            lau["correlation"].to_numpy(np.int64),
            dev["rank"].to_numpy(np.int64)[ok],
            dev["correlation"].to_numpy(np.float64)[ok].astype(np.int64),
        )
        return idx

    def _queue_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """The launch calls that waited for the device's launch queue (QUEUE_WAIT_MIN_NS): (their
        positions in the host frame, the device activity each waited for: the last to end before it
        returned, within QUEUE_WAKE_MAX_NS, launched before it began and still unfinished then). In the
        replay such a call ends when that activity does (a WAIT edge; its own time the sync overhead), so
        a device that runs faster frees the host sooner: held as host work, the wait kept a device-bound
        step from shortening (ViT-B/16 under bf16: 29 ms saved predicted, 145 measured)."""
        host, dev = self.fr.host, self.dev
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if not len(dev) or not len(host):
            return none
        ts = host["ts"].to_numpy(np.int64)
        end = host["end"].to_numpy(np.int64)
        is_call = host["cat"].isin((S.CAT_RUNTIME, S.CAT_DRIVER)).to_numpy()
        cand = np.flatnonzero(
            is_call & (host["state"].to_numpy() == STATE["launch"]) & (end - ts >= QUEUE_WAIT_MIN_NS)
        )
        lau = self.launch_idx
        if not cand.size or not (lau >= 0).any():
            return none
        lau_end = np.full(len(dev), np.iinfo(np.int64).max)
        lau_end[lau >= 0] = self.fr.launches["end"].to_numpy(np.int64)[lau[lau >= 0]]
        a_rank, a_end = dev["rank"].to_numpy(np.int64), dev["end"].to_numpy(np.int64)
        h_rank = host["rank"].to_numpy(np.int64)
        calls, awaited = [], []
        for rank in np.unique(h_rank[cand]):  # one loop per rank
            mine = np.flatnonzero((a_rank == rank) & (lau >= 0))
            mine = mine[np.argsort(a_end[mine], kind="stable")]
            c = cand[h_rank[cand] == rank]
            k = np.searchsorted(a_end[mine], end[c], side="right") - 1
            a = mine[np.maximum(k, 0)]
            ok = (
                (k >= 0)
                & (end[c] - a_end[a] <= QUEUE_WAKE_MAX_NS)
                & (lau_end[a] <= ts[c])
                & (a_end[a] > ts[c])
            )
            calls.append(c[ok])
            awaited.append(a[ok])
        if not calls:
            return none
        return np.concatenate(calls), np.concatenate(awaited)

    def _thread_nodes(self, fr: Frames) -> None:
        """Each thread's boundaries (its nodes), and each host event's start and end node."""
        self.threads: list[ThreadPoints] = []
        self.thread_index: dict[tuple[int, int, int], int] = {}
        self.bw: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, list]] = {}
        self.local: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}  # boundary index
        host = fr.host
        self.start_node = np.zeros(len(host), np.int64)
        self.end_node = np.zeros(len(host), np.int64)
        offset = 0
        for key in sorted(set(self.by_thread) | self.step_threads):  # one loop per thread
            ev = self.by_thread.get(key)
            s = ev["ts"].to_numpy(np.int64) if ev is not None else np.zeros(0, np.int64)
            e = ev["end"].to_numpy(np.int64) if ev is not None else np.zeros(0, np.int64)
            extra = [np.zeros(0, np.int64)]
            if key in self.step_threads:
                ws, we, other = self._joined_backward_windows(key)
                self.bw[key] = (ws, we, other)
                st = fr.steps[
                    (fr.steps["rank"] == key[0]) & (fr.steps["pid"] == key[1]) & (fr.steps["tid"] == key[2])
                ]
                extra += [ws, we, st["ts"].to_numpy(np.int64), st["end"].to_numpy(np.int64)]
            bounds, index = _sorted_unique(np.concatenate([s, e, *extra]))
            self.thread_index[key] = len(self.threads)
            self.threads.append(ThreadPoints(key, offset, bounds))
            if ev is not None:
                self.local[key] = (index[: s.size], index[s.size : 2 * s.size])
                rows = host.index.get_indexer(ev.index)
                self.start_node[rows] = offset + index[: s.size]
                self.end_node[rows] = offset + index[s.size : 2 * s.size]
            offset += bounds.size
        self.n_host = offset

    # -- helpers ------------------------------------------------------------------------------------
    def add(self, src, dst, floor, kind, state=None, act=None, cost=None) -> None:
        """Edges src -> dst: node and activity indices kept as `self.ix` (the graph's index type),
        a constant floor, kind, state or act broadcast without a copy until `_columns`."""
        ix = self.ix
        src = np.asarray(src, ix)
        n = src.size
        if n == 0:
            return
        self.edges.append(
            (
                src,
                np.asarray(dst, ix),
                np.broadcast_to(np.asarray(floor, np.int64), (n,)),
                np.broadcast_to(np.asarray(kind, np.int8), (n,)),
                np.broadcast_to(np.int8(-1), (n,)) if state is None else np.asarray(state, np.int8),
                np.broadcast_to(ix(-1), (n,)) if act is None else np.asarray(act, ix),
                np.broadcast_to(np.int32(0), (n,)) if cost is None else np.asarray(cost, np.int32),
            )
        )

    def point_at(self, key: tuple[int, int, int], t: np.ndarray) -> np.ndarray:
        """Node of the latest boundary of a thread at or before each time (the first one if none)."""
        tp = self.threads[self.thread_index[key]]
        k = np.searchsorted(tp.bounds, t, side="right") - 1
        return tp.offset + np.maximum(k, 0)

    def _joined_backward_windows(self, key):
        """The step thread's backward windows whose engine ops ran on another thread (GPU: the engine's
        device thread), with that thread's key per window; on CPU the engine runs on the step thread."""
        ev = self.by_thread.get(key)
        if ev is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), []
        ws, we = self.th._backward_windows(key, ev)
        eng = self.th.engine_ops
        eng = eng[(eng["rank"] == key[0]).to_numpy() & (eng["pid"] == key[1]).to_numpy()]
        keep, other = [], []
        e_end = eng["end"].to_numpy(np.int64)
        for i, (a, z) in enumerate(zip(ws, we)):  # one loop per backward window
            m = (e_end == z) & (eng["ts"].to_numpy(np.int64) >= a)
            if not m.any():
                continue
            row = eng[m].iloc[0]
            k2 = (int(row["rank"]), int(row["pid"]), int(row["tid"]))
            if k2 != key:
                keep.append(i)
                other.append(k2)
        kept = np.asarray(keep, np.int64)
        return ws[kept], we[kept], other

    # -- host ---------------------------------------------------------------------------------------
    def host_chains(self) -> None:
        """Each thread: one edge per segment between consecutive boundaries (see module docstring)."""
        n_anchor = 0
        for tp in self.threads:
            key = tp.key
            bnd = tp.bounds
            if bnd.size < 2:
                continue
            ev = self.by_thread.get(key)
            if ev is None:
                continue
            si, ei = self.local[key]  # each event's start and end boundary
            n = bnd.size - 1
            seg_s = bnd[:-1]
            src = tp.offset + np.arange(n)
            dst = src + 1
            length = bnd[1:] - seg_s
            st = ev["state"].to_numpy()
            fam = ev["family"].to_numpy()
            state = _scaling_state(self.th[key], bnd, si, ei, fam)
            # profiler cost: event boundaries (starts and ends) at each segment's start
            cnt = (np.bincount(si, minlength=n + 1) + np.bincount(ei, minlength=n + 1))[:n]
            kind = np.full(n, HOST, np.int8)
            # busy: inside an op, a runtime call or a DataLoader fetch (Python frames and annotations,
            # e.g. the step span itself, cover a thread that waits as well as one that works)
            covered = cover(si[st >= 0], ei[st >= 0], n)
            # sync calls: the segment that ends at the call's end is its own overhead; the wait is derived
            waits = FAMILY_REPLAY[fam] == SYNC
            if self.queue_calls.size:  # a launch that waited for the launch queue: as a sync call
                waits |= np.isin(self.fr.host.index.get_indexer(ev.index), self.queue_calls)
            last_of_call = ei[waits] - 1
            kind[last_of_call[last_of_call >= 0]] = SYNC_OWN
            if key in self.step_threads:
                ws, we, other = self.bw[key]
                inside = cover(np.searchsorted(bnd, ws), np.searchsorted(bnd, we), n)
                kind[inside & ~covered] = IDLE
                # blocked on a CPU backend's collective: the time is the collective's (COLL_WAIT edges)
                cw = st == COLLECTIVE
                kind[cover(si[cw], ei[cw], n)] = IDLE
                # the step thread resumes when the engine thread's last op of the window ends
                for _a, z, k2 in zip(ws, we, other):  # one loop per backward window
                    self.add(self.point_at(k2, np.array([z])), self.point_at(key, np.array([z])), 0, JOIN)
            else:
                # a thread that owns no step is idle between its events, except an autograd engine
                # thread inside a backward window (its time between ops is engine work: framework)
                idle = ~covered
                sk = self.step_key.get(key[0])
                if key in self.th.engine and sk is not None and sk in self.by_thread:
                    all_ws, all_we = self.th._backward_windows(sk, self.by_thread[sk])
                    idle &= ~cover(np.searchsorted(bnd, all_ws), np.searchsorted(bnd, all_we), n)
                kind[idle] = IDLE
                # an idle thread wakes when its rank's step thread reaches that point
                if sk is not None and sk in self.thread_index:
                    # the boundaries that end an idle segment, and the thread's first one; not the end of
                    # a CPU backend's collective (its COLL edges set it)
                    wake = np.r_[0, np.flatnonzero(idle) + 1]
                    wake = wake[~np.isin(tp.offset + wake, self.end_node[self.coll_pos])]
                    t = bnd[wake]
                    p = self.point_at(sk, t)
                    self.add(p, tp.offset + wake, t - self.obs[p], ANCHOR)
                    n_anchor += wake.size
            floor = np.where(kind == IDLE, 0, length)
            self.add(src, dst, floor, kind, state=state, cost=np.where(kind == IDLE, 0, cnt))
        self.diag["anchored_wakeups"] = n_anchor

    # -- device -------------------------------------------------------------------------------------
    def device_chains(self) -> None:
        dev = self.dev
        self.stream_prev = np.full(len(dev), -1, np.int64)
        if not len(dev):
            return
        order = np.lexsort(
            (
                dev["end"].to_numpy(),
                dev["ts"].to_numpy(),
                dev["stream"].to_numpy(),
                dev["device"].to_numpy(),
                dev["rank"].to_numpy(),
            )
        )
        r, d, st = (dev[c].to_numpy(np.int64)[order] for c in ("rank", "device", "stream"))
        same = (r[1:] == r[:-1]) & (d[1:] == d[:-1]) & (st[1:] == st[:-1])
        prev, cur = order[:-1][same], order[1:][same]
        self.stream_prev[cur] = prev
        base = self.device_base
        self.add(base + 2 * prev + 1, base + 2 * cur, self._stream_floor(prev, cur), STREAM)

    def _stream_floor(self, prev, cur) -> int:
        gap = self.obs[self.device_base + 2 * cur] - self.obs[self.device_base + 2 * prev + 1]
        floor = _median_or(gap[(gap >= 0) & (gap < XSTREAM_MIN_NS)], DEFAULT_STREAM_FLOOR_NS)
        self.diag["stream_floor_ns"] = floor
        return floor

    def launches(self) -> None:
        dev, fr = self.dev, self.fr
        if not len(dev) or not len(fr.launches):
            return
        lau = fr.launches
        idx = self.launch_idx
        has = np.flatnonzero(idx >= 0)
        li = idx[has]
        # the end node of each launch's own host event; a blocking call (a copy that returns when it is
        # done) issues its work when it starts: from its end, the launch and its wait were a cycle
        pos = host_positions(self.fr.host["row"].to_numpy(np.int64), lau["row"].to_numpy()[li])
        blocking = FAMILY_REPLAY[self.fr.host["family"].to_numpy()[pos]] == SYNC
        nodes = np.where(blocking, self.start_node[pos], self.end_node[pos])
        self.act_launch[has] = nodes
        self.launch_ts[has] = lau["ts"].to_numpy(np.float64)[li]
        start = self.device_base + 2 * has
        lat = self.obs[start] - self.obs[nodes]
        prev = self.stream_prev[has]
        prev_end = np.where(
            prev >= 0, self.obs[self.device_base + 2 * np.maximum(prev, 0) + 1], np.iinfo(np.int64).min
        )
        launch_bound = (prev_end < self.obs[nodes]) & ~blocking
        floor = _median_or(lat[launch_bound & (lat >= 0) & (lat < XSTREAM_MIN_NS)], DEFAULT_LAUNCH_FLOOR_NS)
        self.diag["launch_floor_ns"] = floor
        self.diag["launch_records_missing"] = int(len(dev) - has.size)
        self.add(nodes, start, floor, LAUNCH_EDGE)

    # -- syncs --------------------------------------------------------------------------------------
    def syncs(self) -> None:
        """Each blocking runtime call waits for device work: its own copy (blocking cudaMemcpy with a
        correlation), every stream's last launched work (device synchronize), else the activity that
        ended last before the call returned among those launched before it started (stream and event
        synchronize: the trace does not say which stream or event)."""
        dev, base = self.dev, self.device_base
        calls, lau = self._sync_calls()
        self.diag["sync_calls"] = int(len(calls))
        if not len(calls) or not len(dev):
            return
        launch_ts = np.where(np.isnan(self.launch_ts), dev["ts"].to_numpy(np.float64), self.launch_ts)
        a_rank = dev["rank"].to_numpy(np.int64)
        a_end = dev["end"].to_numpy(np.int64)
        copies = _rows_by_correlation(dev, set(lau.values()))
        srcs, dsts = [], []
        wake_samples: list[int] = []
        own: list[int] = []
        for rank in np.unique(calls["rank"].to_numpy()):  # one loop per rank
            mine = np.flatnonzero(a_rank == rank)
            by_end = mine[np.argsort(a_end[mine], kind="stable")]
            ends_sorted = a_end[by_end]
            lts_sorted = launch_ts[by_end]
            streams = {}
            for key, g in dev.iloc[mine].groupby(["device", "stream"]):
                gi = g.index.to_numpy()
                gi = gi[np.argsort(launch_ts[gi], kind="stable")]
                streams[key] = (np.maximum.accumulate(launch_ts[gi]), gi)
            rc = calls[calls["rank"] == rank]
            for row in rc.itertuples(index=False):  # one loop per sync call
                s, e = int(row.ts), int(row.end)
                name = str(row.name)
                awaited: list[int] = []
                c = lau.get((int(row.rank), int(row.pid), int(row.tid), s))
                if c is not None:
                    awaited = list(copies.get((int(rank), c), ()))
                if not awaited and call_kind(name) == CallKind.DEVICE_SYNC:
                    for lts, gi in streams.values():
                        k = np.searchsorted(lts, s, side="left") - 1
                        if k >= 0:
                            awaited.append(int(gi[k]))
                if not awaited:
                    k = np.searchsorted(ends_sorted, e + 2_000, side="right") - 1
                    while k >= 0 and not lts_sorted[k] < s:
                        k -= 1
                    if k >= 0:
                        awaited.append(int(by_end[k]))
                if not awaited:
                    continue
                endnode = int(row.end_node)
                for a in awaited:
                    srcs.append(base + 2 * a + 1)
                    dsts.append(endnode)
                if call_kind(name) == CallKind.COPY_ASYNC:
                    # a queued copy that waited for its pageable copy (tracekit.analysis.events) returns
                    # as its last chunk is staged, before the copy ends: not a wake-up's lag
                    continue
                last = max(int(a_end[a]) for a in awaited)
                if last > s:
                    wake_samples.append(e - last)
                else:  # the work was done before the call: all of it is the call's own time
                    own.append(e - s)
        ws_ = np.asarray(wake_samples, np.int64)
        wake = _median_or(ws_[np.abs(ws_) < XSTREAM_MIN_NS], DEFAULT_WAKE_FLOOR_NS)
        self.diag["wake_floor_ns"] = wake
        self.sync_overhead = _median_or(np.asarray(own, np.int64), DEFAULT_SYNC_OVERHEAD_NS)
        self.diag["sync_overhead_ns"] = self.sync_overhead
        self.diag["sync_waits"] = len(wake_samples)
        self.add(np.asarray(srcs, np.int64), np.asarray(dsts, np.int64), wake, WAIT)

    def queue_waits(self) -> None:
        """Each launch call that waited for the launch queue ends when the activity it waited for does
        (`_queue_waits`), after the captures' wake-up floor (`syncs`)."""
        self.diag["queue_waits"] = int(self.queue_calls.size)
        wake = self.diag.get("wake_floor_ns", DEFAULT_WAKE_FLOOR_NS)
        self.add(self.device_base + 2 * self.queue_awaited + 1, self.end_node[self.queue_calls], wake, WAIT)

    def _sync_calls(self) -> tuple[pd.DataFrame, dict]:
        """The blocking runtime calls (by thread, then start) with their end node; and the correlation
        of each one that is itself a launch record (a blocking cudaMemcpy), by (rank, pid, tid, ts)."""
        host = self.fr.host
        m = FAMILY_REPLAY[host["family"].to_numpy()] == SYNC
        calls = host.loc[m, ["rank", "pid", "tid", "ts", "end", "name"]].assign(end_node=self.end_node[m])
        calls = calls.sort_values(["rank", "pid", "tid", "ts"], kind="stable")
        lt = self.fr.launches
        lt = lt[np.isin(lt["ts"].to_numpy(np.int64), calls["ts"].to_numpy(np.int64))]
        lau = dict(
            zip(
                zip(*(lt[c].to_numpy(np.int64).tolist() for c in ("rank", "pid", "tid", "ts"))),
                lt["correlation"].to_numpy(np.int64).tolist(),
            )
        )
        return calls, lau

    # -- collectives --------------------------------------------------------------------------------
    def collectives(self) -> None:
        self.host_collectives()
        self.device_collectives()

    def host_collectives(self) -> None:
        """A CPU backend's collectives (gloo spans on its own threads): matched across ranks, each ends
        after every rank started it, its transfer after the last arrival kept (COLL, on host nodes; their
        factor is the extra activity slot, `len(device)`); a step thread's collective wait ends when the
        collective it waits for does (COLL_WAIT)."""
        spans = self.coll_spans
        self.diag["host_collectives"] = int(len(spans))
        if not len(spans) or spans["rank"].nunique() < 2:
            return
        frame = spans.assign(device=-1).reset_index(drop=True)
        c = arrivals(frame)
        c = c[c["nranks"].to_numpy() > 1]
        start = self.start_node[c["pos"].to_numpy(np.int64)]
        end = self.end_node[c["pos"].to_numpy(np.int64)]
        srcs, dsts, floors, own = [], [], [], []
        for _, g in c.groupby(["name", "group"]).indices.items():  # one loop per matched collective
            t = c["end"].to_numpy(np.int64)[g] - c["last_start"].to_numpy(np.int64)[g]
            for j, r_i in enumerate(g):
                srcs.extend(start[g])
                dsts.extend([end[r_i]] * g.size)
                floors.extend([max(int(t[j]), 0)] * g.size)
                own.extend(g == r_i)
        self.diag["host_collectives_matched"] = int(c.groupby(["name", "group"]).ngroups)
        self._coll_edges(
            np.asarray(srcs), np.asarray(dsts), np.asarray(floors), len(self.dev), np.asarray(own, bool)
        )
        # each collective wait of a step thread: after the span of its rank whose end is nearest its own
        host = self.fr.host
        w = np.flatnonzero(host["state"].to_numpy() == COLLECTIVE)
        srcs, dsts = [], []
        for r, g in spans.groupby("rank"):  # one loop per rank
            ends = g["end"].to_numpy(np.int64)
            pos = g["pos"].to_numpy(np.int64)
            mine = w[host["rank"].to_numpy()[w] == r]
            for i in mine:  # one loop per collective wait
                k = int(np.argmin(np.abs(ends - int(host["end"].iat[i]))))
                srcs.append(self.end_node[pos[k]])
                dsts.append(self.end_node[i])
        self.add(np.asarray(srcs, np.int64), np.asarray(dsts, np.int64), 0, COLL_WAIT)

    def _coll_edges(self, srcs, dsts, floors, acts, own) -> None:
        """A matched collective's edges to each rank's end, with its transfer after the last arrival: from
        its own start (COLL; `own`) and from the other ranks' (MEET); `acts` its activity (the factor
        slot of `--comm` and `--kernels`)."""
        acts = np.broadcast_to(np.asarray(acts), srcs.shape)
        self.add(srcs[own], dsts[own], floors[own], COLL, act=acts[own])
        self.add(srcs[~own], dsts[~own], floors[~own], MEET, act=acts[~own])

    def device_collectives(self) -> None:
        dev = self.dev
        n = len(dev)
        if n == 0:
            return
        base = self.device_base
        nccl = dev["nccl"].to_numpy()
        grouped = np.zeros(n, bool)
        if nccl.any() and dev.loc[nccl, "rank"].nunique() > 1:
            coll = dev.loc[nccl, ["rank", "device", "ts", "end", "name"]].assign(i=np.flatnonzero(nccl))
            c = match_collectives(coll)
            c = c[c["group"] >= 0]
            c = c[c.groupby(["name", "group"])["rank"].transform("nunique") > 1]
            spread = c.groupby(["name", "group"])["end"].agg(lambda x: int(x.max() - x.min()))
            skew = float(np.median(spread.to_numpy())) if len(spread) else 0.0
            self.diag["collectives_matched"] = int(len(spread))
            self.diag["collective_end_spread_ns"] = skew
            if skew > CLOCK_SKEW_NS:
                self.diag["clock_skew"] = True
            else:
                srcs, dsts, floors, acts, own = [], [], [], [], []
                for _, g in c.groupby(["name", "group"]):  # one loop per matched collective
                    idx = g["i"].to_numpy(np.int64)
                    s_max = int(dev["ts"].to_numpy(np.int64)[idx].max())
                    for r_i in idx:
                        t_r = int(dev["end"].to_numpy(np.int64)[r_i]) - s_max
                        srcs.extend(base + 2 * idx)
                        dsts.extend([base + 2 * r_i + 1] * idx.size)
                        floors.extend([t_r] * idx.size)
                        acts.extend([r_i] * idx.size)
                        own.extend(idx == r_i)
                    grouped[idx] = True
                self._coll_edges(
                    np.asarray(srcs),
                    np.asarray(dsts),
                    np.asarray(floors),
                    np.asarray(acts),
                    np.asarray(own, bool),
                )
        single = np.flatnonzero(~grouped)
        dur = dev["end"].to_numpy(np.int64) - dev["ts"].to_numpy(np.int64)
        self.add(base + 2 * single, base + 2 * single + 1, dur[single], DUR, act=single)

    # -- cross-stream -------------------------------------------------------------------------------
    def cross_stream(self, stream_waits: pd.DataFrame | None) -> None:
        """Stream waits: from the capture's cuda_sync records when it has them; else inferred for the
        activities that started later than their launch and stream allow, from the activity on another
        stream of the device that ended last before they started."""
        dev, base = self.dev, self.device_base
        n = len(dev)
        if n == 0 or dev.groupby(["rank", "device"])["stream"].nunique().max() < 2:
            self.diag["stream_waits"] = "single stream"
            return
        if stream_waits is not None and len(stream_waits):
            self._recorded_waits(stream_waits)
            return
        # what the launch and stream edges explain, per start node
        src, dst, floor, kind = (np.concatenate([e[i] for e in self.edges]) for i in range(4))
        m = (kind == LAUNCH_EDGE) | (kind == STREAM)
        starts = base + 2 * np.arange(n)
        explained = np.full(self.n_nodes, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(explained, dst[m], self.obs[src[m]] + floor[m])
        delay = self.obs[starts] - explained[starts]
        late = np.flatnonzero((delay > XSTREAM_MIN_NS) & (explained[starts] > np.iinfo(np.int64).min))
        srcs, dsts = [], []
        a_end = dev["end"].to_numpy(np.int64)
        a_ts = dev["ts"].to_numpy(np.int64)
        for (_r, _d), g in dev.groupby(["rank", "device"]):  # one loop per device
            gi = g.index.to_numpy()
            gi = gi[np.argsort(a_end[gi], kind="stable")]
            ge = a_end[gi]
            gs = dev["stream"].to_numpy()[gi]
            for i in late[np.isin(late, g.index.to_numpy())]:  # one loop per late activity
                k = np.searchsorted(ge, a_ts[i] + 2_000, side="right") - 1
                while k >= 0 and gs[k] == dev["stream"].iat[i]:
                    k -= 1
                if k >= 0 and ge[k] > explained[starts[i]]:
                    srcs.append(base + 2 * gi[k] + 1)
                    dsts.append(starts[i])
        self.diag["stream_waits"] = f"inferred {len(srcs)} from timing (no stream-wait records)"
        self.add(
            np.asarray(srcs, np.int64),
            np.asarray(dsts, np.int64),
            self.diag.get("stream_floor_ns", 0),
            XSTREAM,
        )

    def _recorded_waits(self, waits: pd.DataFrame) -> None:
        """cudaStreamWaitEvent(stream, event): the work launched on `stream` after the call waits for
        the work on `wait_stream` launched before it (the event was recorded there just before)."""
        dev, base, lau = self.dev, self.device_base, self.fr.launches
        li = lau.set_index(["rank", "correlation"])
        launch_ts = np.where(np.isnan(self.launch_ts), dev["ts"].to_numpy(np.float64), self.launch_ts)
        srcs, dsts = [], []
        groups = {k: g.index.to_numpy() for k, g in dev.groupby(["rank", "device", "stream"])}
        for w in waits.itertuples(index=False):  # one loop per recorded wait
            try:
                t = float(li.loc[(int(w.rank), int(w.correlation)), "ts"])
            except (KeyError, TypeError):
                continue
            before = groups.get((w.rank, w.device, w.wait_stream))
            after = groups.get((w.rank, w.device, w.stream))
            if before is None or after is None:
                continue
            b = before[launch_ts[before] < t]
            a = after[launch_ts[after] > t]
            if b.size and a.size:
                srcs.append(base + 2 * b[np.argmax(launch_ts[b])] + 1)
                dsts.append(base + 2 * a[np.argmin(launch_ts[a])])
        self.diag["stream_waits"] = f"{len(srcs)} recorded (cuda_sync)"
        self.add(
            np.asarray(srcs, np.int64),
            np.asarray(dsts, np.int64),
            self.diag.get("stream_floor_ns", 0),
            XSTREAM,
        )

    # -- weights and order --------------------------------------------------------------------------
    def _node_cycles(self, node_rank: np.ndarray) -> np.ndarray | None:
        """Each node's profiler cycle on its rank, by its observed time (the number of its rank's cuts
        at or before it); None for a single cycle."""
        cuts = {r: np.asarray(c, np.int64) for r, c in _cycle_cuts(self.fr.steps).items()}
        if not cuts:
            return None
        cyc = np.zeros(self.n_nodes, np.int32)
        for tp in self.threads:  # sorted times: the cuts' places in them, summed (no search per node)
            c = cuts.get(tp.key[0])
            if c is None or not tp.bounds.size:
                continue
            at = np.searchsorted(tp.bounds, c, side="left")  # the first node at or after each cut
            cyc[tp.offset : tp.offset + tp.bounds.size] = np.cumsum(
                np.bincount(at, minlength=tp.bounds.size + 1)
            )[:-1]
        dev = np.arange(self.device_base, self.n_nodes)
        for r, c in cuts.items():  # one loop per rank
            m = dev[node_rank[self.device_base :] == r]
            cyc[m] = np.searchsorted(c, self.obs[m], side="right")
        return cyc

    def _columns(self, cyc: np.ndarray | None) -> list[np.ndarray]:
        """The edges' columns (src, dst, floor, kind, state, act, cost), each written once from the
        pieces `add` collected, which are let go column by column (the graph's largest moment); with
        `cyc` (each node's profiler cycle), only the edges within one cycle."""
        ix = self.ix
        dtypes = (ix, ix, np.int64, np.int8, np.int8, ix, np.int32)
        pieces = [list(col) for col in zip(*self.edges)] if self.edges else [[] for _ in dtypes]
        self.edges = []
        # Per piece, the mask of its edges within one cycle, or None where all are (nearly every piece:
        # only the edges across a gap between two cycles are dropped), which is then a plain copy.
        keep: list = [None] * len(pieces[0])
        sizes = [p.size for p in pieces[0]]
        if cyc is not None:
            for j, (a, b) in enumerate(zip(pieces[0], pieces[1])):
                k = cyc[a] == cyc[b]
                m = int(np.count_nonzero(k))
                keep[j], sizes[j] = (None if m == k.size else k), m
            self.diag["cross_cycle_edges_dropped"] = sum(p.size for p in pieces[0]) - sum(sizes)
        out = []
        for i, dt in enumerate(dtypes):
            col = np.empty(sum(sizes), dt)
            pos = 0
            for j, (piece, m) in enumerate(zip(pieces[i], sizes)):
                if keep[j] is None:
                    col[pos : pos + m] = piece
                else:
                    np.compress(keep[j], piece, out=col[pos : pos + m])
                pos += m
            out.append(col)
            pieces[i] = []
        return out

    def finish(self) -> Graph:
        obs = self.obs
        node_rank = np.zeros(self.n_nodes, np.int32)
        for tp in self.threads:
            node_rank[tp.offset : tp.offset + tp.bounds.size] = tp.key[0]
        node_rank[self.device_base :: 2] = self.dev["rank"].to_numpy(np.int32)
        node_rank[self.device_base + 1 :: 2] = self.dev["rank"].to_numpy(np.int32)
        # profiler cycles are separate timelines: no edge crosses the gap between two (trace export,
        # profiler restart); a cycle's first nodes keep their observed times (tracekit.analysis.steps)
        cyc = self._node_cycles(node_rank)
        src, dst, floor, kind, state, act, cost = self._columns(cyc)
        if src.size >= 2**31:  # the edges' own indices (in_edges, order) are as wide as these
            src, dst, act = src.astype(np.int64), dst.astype(np.int64), act.astype(np.int64)
        ix = src.dtype.type
        edge_rank = node_rank[dst]
        del node_rank
        own = kind == SYNC_OWN
        floor[own] = np.minimum(floor[own], getattr(self, "sync_overhead", DEFAULT_SYNC_OVERHEAD_NS))
        indptr, order_e = grouped(self.n_nodes, dst)  # incoming edges of each node
        w, unexplained = binding_weights(obs, src, dst, floor, kind, indptr, order_e)
        del floor
        self.diag["unexplained_waits"] = int(unexplained.sum())
        self.diag["unexplained_wait_ns"] = int(
            (obs[dst[unexplained]] - obs[src[unexplained]] - w[unexplained]).sum()
        )
        order, forced = topological_order(self.n_nodes, src, dst, obs, cyc, indeg=np.diff(indptr))
        self.diag["cycles_broken"] = int(forced)
        # Nodes nothing in the trace explains keep their observed time as a lower bound: threads' and
        # streams' first nodes, and device work launched before the trace began (no launch record).
        lb = np.where(indptr[1:] == indptr[:-1], obs, DROPPED)
        no_launch = np.flatnonzero(self.act_launch < 0)
        lb[self.device_base + 2 * no_launch] = obs[self.device_base + 2 * no_launch]
        dev = self.dev.assign(launch_ts=self.launch_ts, launch_node=self.act_launch)
        return Graph(
            obs=obs,
            src=src,
            dst=dst,
            w=w,
            kind=kind,
            ecls=_edge_classes(kind),
            state=state,
            rank=edge_rank,
            act=act,
            cost=cost,
            lb=lb,
            order=order.astype(ix, copy=False),
            indptr=indptr,
            in_edges=order_e.astype(ix, copy=False),
            threads=self.threads,
            thread_index=self.thread_index,
            host_row=self.fr.host["row"].to_numpy(np.int64),
            host_start_node=self.start_node,
            host_end_node=self.end_node,
            device=dev,
            device_base=self.device_base,
            steps=self.fr.steps,
            diagnostics=self.diag,
            engine_threads=frozenset(tuple(int(x) for x in k) for k in self.th.engine),
        )


def _cycle_cuts(steps: pd.DataFrame) -> dict:
    """rank -> the start times of its profiler cycles after the first (their first windows' starts)."""
    out: dict[int, list[int]] = {}
    if "cycle" not in steps.columns or not len(steps):
        return out
    st = steps[["rank", "cycle", "ts"]]
    firsts = st[st["cycle"] > 0].groupby(["rank", "cycle"], sort=True)["ts"].min()
    for (r, _c), t in firsts.items():
        out.setdefault(int(r), []).append(int(t))
    return out


def binding_weights(obs, src, dst, floor, kind, indptr, in_edges) -> tuple[np.ndarray, np.ndarray]:
    """Per edge, the weight that replays the observed times (DESIGN.md); `indptr`, `in_edges`: the
    incoming edges of each node (`loops.grouped(n, dst)`):

        binding b = argmax over the in-edges of v of (obs[u] + floor)     (the dependency that held v)
        w_b = obs[v] - obs[u_b]                                            (its observed lag, kept)
        w_e = min(floor_e, obs[v] - obs[u_e])  for the others              (never later than observed)

    so that max(obs[u] + w) = obs[v]. A binding lag more than UNEXPLAINED_NS beyond its floor on a
    dependency that does not measure it (a launch, a stream, a sync wake-up, a cross-stream wait) is a
    wait with no cause in the trace: it is cut to its floor and flagged (the second array)."""
    if src.size == 0:
        return floor.copy(), np.zeros(0, bool)
    waits = np.isin(np.arange(len(EDGE_KINDS)), (LAUNCH_EDGE, STREAM, WAIT, XSTREAM))
    return _binding_weights(indptr, in_edges, src, obs, floor, kind, waits, UNEXPLAINED_NS)


def _edge_classes(kind: np.ndarray) -> np.ndarray:
    """How a scenario changes each edge (the replay's `loops.longest_paths`)."""
    ecls = np.full(kind.size, PLAIN, np.int8)
    ecls[(kind == HOST) | (kind == SYNC_OWN)] = HOST_CLASS
    ecls[(kind == DUR) | (kind == COLL) | (kind == MEET)] = DEVICE_CLASS
    ecls[kind == WAIT] = WAIT_CLASS
    return ecls


def _scaling_state(th, bnd, si, ei, fam) -> np.ndarray:
    """The state that scales each segment between the boundaries `bnd` of a thread (its events start at
    boundary si and end at ei, `fam`: their families): rule 3's state as the replay scales it
    (tracekit.analysis.host.segment_states; inside a sync op such as aten::item but outside its runtime
    sync call, the op's own framework/launch work)."""
    default = int(th.timeline.state[0]) if th.timeline.state.size else 0
    waits = (np.searchsorted(bnd, th.wait_s), np.searchsorted(bnd, th.wait_e))  # backward windows
    return segment_states(bnd.size - 1, si, ei, fam, default, waits, cover=cover)[1]


def _sorted_unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the sorted distinct values, each element's index among them)."""
    order = np.argsort(x, kind="stable")
    y = x[order]
    new = np.r_[True, y[1:] != y[:-1]] if y.size else np.zeros(0, bool)
    index = np.empty(x.size, np.int64)
    index[order] = np.cumsum(new) - 1
    return y[new], index


def host_positions(host_row: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The host frame positions of table rows that are host events (launch records are: runtime calls),
    by the frame's `row` column, which ascends; RuntimeError for a row that is not one."""
    rows = np.asarray(rows, np.int64)
    pos = np.minimum(np.searchsorted(host_row, rows), max(host_row.size - 1, 0))
    if rows.size and (host_row.size == 0 or not np.array_equal(host_row[pos], rows)):
        raise RuntimeError("a launch record that is not a host event of the frames")
    return pos


def _pair_index(ka: np.ndarray, kb: np.ndarray, qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
    """For each query pair (qa, qb), the index i of the same pair (ka[i], kb[i]) (unique), else -1."""
    out = np.full(qa.size, -1, np.int64)
    for a in np.unique(qa):  # one loop per rank
        ki, qi = np.flatnonzero(ka == a), np.flatnonzero(qa == a)
        if not ki.size:
            continue
        ki = ki[np.argsort(kb[ki], kind="stable")]
        pos = np.minimum(np.searchsorted(kb[ki], qb[qi]), ki.size - 1)
        hit = kb[ki][pos] == qb[qi]
        out[qi[hit]] = ki[pos[hit]]
    return out


def _rows_by_correlation(dev: pd.DataFrame, wanted: set) -> dict:
    """(rank, correlation) -> the device activities of that correlation, for the wanted correlations."""
    corr = dev["correlation"].to_numpy(np.float64)
    rank = dev["rank"].to_numpy(np.int64)
    out: dict = {}
    for i in np.flatnonzero(np.isin(corr, np.asarray(sorted(wanted), np.float64))):  # the calls' copies
        out.setdefault((int(rank[i]), int(corr[i])), []).append(int(i))
    return out


def _median_or(x: np.ndarray, default: int) -> int:
    x = np.asarray(x)
    return int(np.median(x)) if x.size >= MIN_SAMPLES else int(default)


__all__ = [
    "Graph",
    "build_graph",
    "binding_weights",
    "host_positions",
    "recorded_stream_waits",
    "EDGE_KINDS",
    "MEET",
]
