"""The replay's loops over the graph's nodes and edges. Each is defined here in Python (`PYTHON`, what
the tests compare with) and runs as C (tracekit/whatif/_loops.c): a loop over every node or edge in
Python is seconds per pass on a large capture (benchmarks/RESULTS.md, "The replay's loops"). Where the
extension did not build, or with TRACEKIT_LOOPS=python, the Python definitions run.

    grouped(n, key)            edges grouped by node (a stable counting sort): CSR pointers + order
    cover(starts, ends, n)     which segments some interval covers
    topological_order(...)     Kahn's algorithm, seeded in observed-time order
    binding_weights(...)       per edge, the weight that replays the observed times (graph.py's rule)
    longest_paths(g, ...)      rep[v] = max over incoming edges of rep[u] + w(scenario), for k scenarios
                               in one pass (one replay: k = 1)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tracekit.analysis import intervals as iv
from tracekit.native import current
from tracekit.settings import setting

try:
    from tracekit.whatif import _loops  # type: ignore[attr-defined]  # the C extension
except ImportError:  # it did not build: the Python definitions run
    _loops = None
_loops = current(_loops, "whatif/_loops.c")  # a build from other sources: the Python definitions run

DROPPED = np.iinfo(np.int64).min  # an edge a scenario removes (a sync's wait under sync=0); no bound
# Edge classes of the replay (`longest_paths`): how a scenario changes an edge's weight.
PLAIN, HOST_CLASS, DEVICE_CLASS, WAIT_CLASS = 0, 1, 2, 3


def grouped(n: int, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, order): the indices i with key[i] == v are order[ptr[v]:ptr[v + 1]], in increasing i
    (what np.argsort(key, kind="stable") gives, in O(len(key)))."""
    ptr = np.zeros(n + 2, np.int64)
    order = np.empty(key.size, _index_type(key.size))
    _here()["group"](np.ascontiguousarray(key), ptr, order)
    return ptr[: n + 1], order


def _index_type(n: int) -> type[np.signedinteger]:
    """32-bit indices where they fit (the graph's bulk: half the memory of 64-bit ones)."""
    return np.int32 if n < 2**31 else np.int64


def _group(key, ptr, order):
    """A counting sort into `order` (len(key)) and `ptr` (n + 2 zeros; ptr[:n + 1] is the result): the
    keys counted at ptr[k + 2], summed, then each index placed at ptr[k + 1], its key's next free place,
    which leaves ptr[k + 1] at the start of key k + 1. No array but those two (numpy's bincount, its
    running sum and a copy of the starts are three more of the graph's length: benchmarks/RESULTS.md,
    "`loops.grouped`")."""
    n = ptr.size - 2
    for i in range(key.size):
        k = key[i]
        if k < 0 or k >= n:
            raise ValueError("group: a key out of range")
        ptr[k + 2] += 1
    for v in range(2, n + 2):
        ptr[v] += ptr[v - 1]
    for i in range(key.size):
        k = key[i]
        order[ptr[k + 1]] = i
        ptr[k + 1] += 1
    return order


def cover(starts: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    """Per segment i of n (between boundaries i and i + 1), whether some interval [starts, ends), given
    as boundary indices (0 .. n; larger ones cover nothing), covers it."""
    out = np.empty(n, np.bool_)
    _here()["cover"](np.ascontiguousarray(starts), np.ascontiguousarray(ends), out)
    return out


def _cover(starts, ends, out):
    """`cover`'s definition: tracekit.analysis.intervals.cover (the running sum of +1 at each start and
    -1 at each end), into `out`."""
    out[:] = iv.cover(starts, ends, out.size)
    return out


def topological_order(n, src, dst, obs, cycle=None, indeg=None) -> tuple[np.ndarray, int]:
    """Kahn's algorithm, seeded in observed-time order. Edges point backwards in observed time except
    by clock disagreements of a few µs (a kernel that starts before its launch call returns), so a cycle
    is not expected; if one remains, its earliest node (observed) is taken first and counted.
    `cycle`: each node's profiler cycle (None: one), when no edge joins two: the order is then one
    cycle after the other (Kahn's queue seeded from every cycle at once interleaves them all, and a
    replay in that order scatters its reads: benchmarks/RESULTS.md, "Issue 17 follow-up").
    `indeg`: each node's number of incoming edges, when the caller has it (else counted here)."""
    out_ptr, out_order = grouped(n, src)
    # each node's incoming edges (given: the caller's np.diff of grouped(n, dst)'s pointers)
    indeg = (np.bincount(dst, minlength=n) if indeg is None else indeg).astype(_index_type(dst.size))
    seeds = np.flatnonzero(indeg == 0)
    if cycle is None:
        seeds = seeds[np.argsort(obs[seeds], kind="stable")]
        seed_ptr = np.array([0, seeds.size], np.int64)
    else:
        seeds = seeds[np.lexsort((obs[seeds], cycle[seeds]))]
        seed_ptr = np.searchsorted(cycle[seeds], np.arange(int(cycle.max()) + 2))
    run = _here()
    order, forced = run["kahn"](n, out_ptr, dst[out_order], indeg, seeds, seed_ptr)
    if forced:  # rare: redo it with every node in observed order to break the cycles by time
        indeg = np.bincount(dst, minlength=n).astype(np.int64)
        order, forced = run["kahn_by_time"](n, out_ptr, dst[out_order], indeg, np.argsort(obs, kind="stable"))
        if cycle is not None:  # one cycle after the other, each in the order found
            order = order[grouped(int(cycle.max()) + 1, cycle[order])[1]]
    return order, forced


def _kahn(n, out_ptr, out_dst, indeg, seeds, seed_ptr):
    """The seeds of each group (seeds[seed_ptr[i]:seed_ptr[i + 1]]) are queued once the earlier groups'
    nodes are placed. Returns (order, 1) as soon as a cycle stops it (the caller redoes it by time)."""
    order = np.empty(n, out_dst.dtype)
    queue = np.empty(n, out_dst.dtype)
    head = tail = 0
    for g in range(seed_ptr.size - 1):
        for i in range(seed_ptr[g], seed_ptr[g + 1]):
            queue[tail] = seeds[i]
            tail += 1
        while head < tail:
            v = queue[head]
            order[head] = v
            head += 1
            for k in range(out_ptr[v], out_ptr[v + 1]):
                u = out_dst[k]
                indeg[u] -= 1
                if indeg[u] == 0:
                    queue[tail] = u
                    tail += 1
    return order, 0 if head == n else 1


def _kahn_by_time(n, out_ptr, out_dst, indeg, by_time):
    order = np.empty(n, np.int64)
    queue = np.empty(n, np.int64)
    head = tail = 0
    for v in by_time:
        if indeg[v] == 0:
            queue[tail] = v
            tail += 1
    done = 0
    forced = 0
    seen = np.zeros(n, np.bool_)
    cursor = 0
    while done < n:
        if head == tail:  # a cycle: take the earliest node not yet placed
            while seen[by_time[cursor]]:
                cursor += 1
            v = by_time[cursor]
            indeg[v] = 0
            queue[tail] = v
            tail += 1
            forced += 1
        v = queue[head]
        head += 1
        if seen[v]:
            continue
        seen[v] = True
        order[done] = v
        done += 1
        for k in range(out_ptr[v], out_ptr[v + 1]):
            u = out_dst[k]
            indeg[u] -= 1
            if indeg[u] == 0 and not seen[u]:
                queue[tail] = u
                tail += 1
    return order, forced


def binding_weights(indptr, in_edges, src, obs, floor, kind, waits, unexplained_ns):
    """Per edge (w, unexplained): `_binding_weights`, as C where it built."""
    return _here()["binding_weights"](indptr, in_edges, src, obs, floor, kind, waits, unexplained_ns)


def _binding_weights(indptr, in_edges, src, obs, floor, kind, waits, unexplained_ns):
    """`graph.binding_weights` (its rule and docstring) in one pass over each node's incoming edges:
    per edge (w, unexplained). `waits[kind]`: whether an edge of that kind is a wait the trace does not
    measure; a binding edge's candidate is obs[u] + floor, of equal ones the last (highest index)."""
    w = np.empty(in_edges.size, np.int64)
    unexplained = np.zeros(in_edges.size, np.bool_)
    for v in range(indptr.size - 1):
        lo, hi = indptr[v], indptr[v + 1]
        if lo == hi:
            continue
        best = in_edges[lo]
        top = obs[src[best]] + floor[best]
        for k in range(lo + 1, hi):
            e = in_edges[k]
            c = obs[src[e]] + floor[e]
            if c >= top:
                best, top = e, c
        for k in range(lo, hi):
            e = in_edges[k]
            slack = obs[v] - obs[src[e]]
            if e == best and not (waits[kind[e]] and slack - floor[e] > unexplained_ns):
                w[e] = slack
            else:
                unexplained[e] = e == best
                w[e] = min(floor[e], slack)
    return w, unexplained


class ReplayGraph(NamedTuple):
    """The graph's arrays a replay reads (tracekit.whatif.graph.Graph's fields of the same names; `w`
    the edge weights, the graph's own or a scenario's)."""

    order: np.ndarray
    indptr: np.ndarray
    in_edges: np.ndarray
    src: np.ndarray
    w: np.ndarray
    lb: np.ndarray
    ecls: np.ndarray
    state: np.ndarray
    rank: np.ndarray
    act: np.ndarray
    cost: np.ndarray


def longest_paths(g, host_f, rank_f, cost_half, act_f, drop_wait, edge_f, edge_add):
    """The replayed node times of k scenarios, (nodes, k): `_longest_paths`, as C where it built."""
    return _here()["longest_paths"](g, host_f, rank_f, cost_half, act_f, drop_wait, edge_f, edge_add)


def _longest_paths(g, host_f, rank_f, cost_half, act_f, drop_wait, edge_f, edge_add):
    """The replay of k scenarios in one pass over the graph `g` (a ReplayGraph); returns rep as
    (nodes, k), column j scenario j's:

        rep[v] = max(lb[v], rep[u] + w'(e) over the incoming edges e = (u, v))

    w' the scenario's weight (DESIGN.md, "Scenarios"): a host segment (ecls HOST_CLASS) takes
    w * host_f[j, state] * rank_f[rank] less `cost_half[j]` per recorded event boundary (never below
    zero, nor below itself when negative); a device activity (DEVICE_CLASS) w * act_f[act]; a sync's
    wait (WAIT_CLASS) is skipped when `drop_wait[j]`; weights are rounded to whole ns. `edge_f` (empty:
    none): one more factor per edge (`--ops`): a host segment's weight times it, a wait or a device edge
    with 0 skipped (`--comm 0`: the ranks no longer meet).
    `edge_add` (empty: none): ns added to a host segment after all that (`--cuda-graphs`: one graph
    launch where a region begins). Each edge is read once for all k (the pass is bound by those
    scattered reads); one replay is the case k = 1 (a loop of its own gained little: benchmarks/RESULTS.md,
    "Issue 17")."""
    k = host_f.shape[0]
    per_edge = edge_f.size > 0
    adds = edge_add.size > 0
    w, src, ecls, state, rank = g.w, g.src, g.ecls, g.state, g.rank
    indptr, in_edges, lb = g.indptr, g.in_edges, g.lb
    rep = np.empty((lb.size, k), np.int64)
    best = np.empty(k, np.int64)
    for v in g.order:
        for j in range(k):
            best[j] = lb[v]
        for i in range(indptr[v], indptr[v + 1]):
            e = in_edges[i]
            c = ecls[e]
            u = src[e]
            if c == HOST_CLASS:
                for j in range(k):
                    x = w[e] * (host_f[j, state[e]] * rank_f[rank[e]])
                    if per_edge:
                        x = x * edge_f[e]
                    if cost_half[j] > 0.0:
                        x = max(x - g.cost[e] * cost_half[j], min(x, 0.0))
                    if adds:
                        x = x + edge_add[e]
                    t = rep[u, j] + np.int64(np.rint(x))
                    if t > best[j]:
                        best[j] = t
                continue
            if c == PLAIN:
                we = w[e]
            elif c == DEVICE_CLASS:
                if per_edge and edge_f[e] == 0.0:
                    continue
                we = np.int64(np.rint(w[e] * act_f[g.act[e]]))
            else:
                if per_edge and edge_f[e] == 0.0:
                    continue
                we = w[e]
            for j in range(k):
                if c == WAIT_CLASS and drop_wait[j]:
                    continue
                t = rep[u, j] + we
                if t > best[j]:
                    best[j] = t
        for j in range(k):
            rep[v, j] = best[j]
    return rep


# The loops as written above: their definition, which the C versions are tested against.
PYTHON = {
    "group": _group,
    "cover": _cover,
    "kahn": _kahn,
    "kahn_by_time": _kahn_by_time,
    "binding_weights": _binding_weights,
    "longest_paths": _longest_paths,
}


def _c_versions(c) -> dict:
    """The loops of the C extension `c` (tracekit/whatif/_loops.c), called as the Python ones are."""

    def group(key, ptr, order):
        c.group(np.ascontiguousarray(key), ptr, order)
        return order

    def cover_into(starts, ends, out):
        c.cover(np.ascontiguousarray(starts), np.ascontiguousarray(ends), out)
        return out

    def kahn(n, out_ptr, out_dst, indeg, seeds, seed_ptr):
        out_dst = np.ascontiguousarray(out_dst)
        order, queue = np.empty(n, out_dst.dtype), np.empty(n, out_dst.dtype)
        forced = c.kahn(
            out_ptr, out_dst, indeg, np.asarray(seeds, np.int64), np.asarray(seed_ptr, np.int64), order, queue
        )
        return order, forced

    def kahn_by_time(n, out_ptr, out_dst, indeg, by_time):
        order, queue, seen = np.empty(n, np.int64), np.empty(n, np.int64), np.zeros(n, np.bool_)
        forced = c.kahn_by_time(out_ptr, np.ascontiguousarray(out_dst), indeg, by_time, order, queue, seen)
        return order, forced

    def weights(indptr, in_edges, src, obs, floor, kind, waits, unexplained_ns):
        w = np.empty(in_edges.size, np.int64)
        unexplained = np.zeros(in_edges.size, np.bool_)
        c.binding_weights(
            indptr,
            np.ascontiguousarray(in_edges),
            np.ascontiguousarray(src),
            np.ascontiguousarray(obs, np.int64),
            np.ascontiguousarray(floor, np.int64),
            np.ascontiguousarray(kind, np.int8),
            np.ascontiguousarray(waits, np.bool_),
            w,
            unexplained,
            int(unexplained_ns),
        )
        return w, unexplained

    def paths(g, host_f, rank_f, cost_half, act_f, drop_wait, edge_f, edge_add):
        f64 = np.float64
        rep = np.empty((g.lb.size, host_f.shape[0]), np.int64)
        c.longest_paths(
            *(np.ascontiguousarray(x) for x in (g.order, g.indptr, g.in_edges, g.src)),
            np.ascontiguousarray(g.w, np.int64),
            np.ascontiguousarray(g.lb, np.int64),
            np.ascontiguousarray(g.ecls, np.int8),
            np.ascontiguousarray(g.state, np.int8),
            *(np.ascontiguousarray(x) for x in (g.rank, g.act, g.cost)),
            np.ascontiguousarray(host_f, f64),
            np.ascontiguousarray(rank_f, f64),
            np.ascontiguousarray(cost_half, f64),
            np.ascontiguousarray(act_f, f64),
            np.ascontiguousarray(drop_wait, np.bool_),
            np.ascontiguousarray(edge_f, f64),
            np.ascontiguousarray(edge_add, f64),
            rep,
        )
        return rep

    return {
        "group": group,
        "cover": cover_into,
        "kahn": kahn,
        "kahn_by_time": kahn_by_time,
        "binding_weights": weights,
        "longest_paths": paths,
    }


C = _c_versions(_loops) if _loops is not None else None


def _here() -> dict:
    """The loops that run: C where the extension built, unless TRACEKIT_LOOPS=python."""
    if C is not None and setting("TRACEKIT_LOOPS") != "python":
        return C
    return PYTHON


def backend() -> str:
    """'C (tracekit.whatif._loops)' or 'Python': which loops replay here."""
    return "C (tracekit.whatif._loops)" if _here() is C else "Python"
