"""The replay's two loops over the graph's nodes (Kahn's topological order, the longest path), compiled
with numba: in Python each took ~5 s on the 3.5 M-row benchmark capture (benchmarks/RESULTS.md)."""

from __future__ import annotations

import numpy as np

DROPPED = np.iinfo(np.int64).min  # an edge a scenario removes (a sync's wait under sync=0); no bound


def topological_order(n, src, dst, indptr, in_edges, obs) -> tuple[np.ndarray, int]:
    """Kahn's algorithm, seeded in observed-time order. Edges point backwards in observed time except
    by clock disagreements of a few µs (a kernel that starts before its launch call returns), so a cycle
    is not expected; if one remains, its earliest node (observed) is taken first and counted."""
    out_order = np.argsort(src, kind="stable")
    out_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    return _kahn(n, out_ptr, dst[out_order], indeg, np.argsort(obs, kind="stable"))


def _kahn(n, out_ptr, out_dst, indeg, by_time) -> tuple[np.ndarray, int]:
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


def longest_path(order, indptr, in_edges, src, w, lb) -> np.ndarray:
    """rep[v] = max(lb[v], rep[u] + w over the incoming edges of v not DROPPED)."""
    rep = lb.copy()
    for v in order:
        lo, hi = indptr[v], indptr[v + 1]
        best = lb[v]
        for k in range(lo, hi):
            e = in_edges[k]
            we = w[e]
            if we == DROPPED:
                continue
            t = rep[src[e]] + we
            if t > best:
                best = t
        rep[v] = best
    return rep


def _compiled():
    """The numba versions of the two loops, when numba is installed (see benchmarks/RESULTS.md)."""
    global _kahn, longest_path  # noqa: PLW0603
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency; the loops still work without it
        return
    _kahn = numba.njit(cache=True)(_kahn)
    longest_path = numba.njit(cache=True)(longest_path)


_compiled()
