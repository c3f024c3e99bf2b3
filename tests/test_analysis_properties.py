"""Property tests (Hypothesis): the interval algebra against brute force on a unit grid, and the
invariants of the whole analysis on random timelines."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.analysis import intervals as iv
from tracekit.analysis.causes import FAMILIES, STATE
from tracekit.analysis.host import _timeline, segment_states
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths

GRID = 60
intervals = st.lists(
    st.tuples(st.integers(0, GRID), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])), max_size=12
)


def cover(ivs, n=GRID + 25) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    for a, b in ivs:
        m[a:b] = True
    return m


@given(intervals)
def test_union_matches_brute_force(ivs):
    s, e = iv.union([a for a, _ in ivs], [b for _, b in ivs])
    assert np.all(e[:-1] < s[1:])  # disjoint, not touching, sorted
    assert np.array_equal(cover(zip(s, e)), cover(ivs))


@given(intervals, st.lists(st.integers(0, GRID + 20), min_size=2, max_size=6, unique=True))
def test_gaps_in_windows_is_window_minus_busy(busy, cuts):
    cuts = sorted(cuts)
    ws, we = np.array(cuts[:-1]), np.array(cuts[1:])
    bs, be = iv.union([a for a, _ in busy], [b for _, b in busy])
    win, gs, ge = iv.gaps_in_windows(bs, be, ws, we)
    want = cover(zip(ws, we)) & ~cover(busy)
    assert np.array_equal(cover(zip(gs, ge)), want)
    assert np.all((gs >= ws[win]) & (ge <= we[win]))
    assert np.array_equal(iv.total_overlap(bs, be, ws, we), [cover(busy)[a:b].sum() for a, b in zip(ws, we)])


@given(
    st.lists(intervals, min_size=1, max_size=4), st.lists(st.tuples(st.integers(0, GRID), st.integers(0, 30)))
)
def test_state_timeline_is_max_priority_cover(families, queries):
    fam = [
        (np.array([a for a, _ in f], dtype=np.int64), np.array([b for _, b in f], dtype=np.int64))
        for f in families
    ]
    tl = iv.StateTimeline.build(fam)
    n = GRID + 31  # covers every query [a, a + 30]
    brute = np.zeros(n, dtype=np.int64)
    for p, f in enumerate(families):
        brute[cover(f, n)] = p + 1
    a = np.array([q[0] for q in queries], dtype=np.int64)
    b = a + np.array([q[1] for q in queries], dtype=np.int64)
    tot = tl.totals(a, b, len(families) + 1)
    for i, (x, y) in enumerate(zip(a, b)):
        assert list(tot[i]) == [int((brute[x:y] == k).sum()) for k in range(len(families) + 1)]


family_events = st.lists(
    st.tuples(st.integers(0, GRID), st.integers(0, 20), st.integers(0, len(FAMILIES) - 1)), max_size=12
)


def _brute_states(events, waits, default, n):
    """Rule 3 by brute force on the unit grid: per instant, the highest state of the covering events."""
    state = np.full(n, -1)
    replay = np.full(n, -1)
    for a, d, f in events:
        state[a : a + d] = np.maximum(state[a : a + d], FAMILIES[f].state)
        replay[a : a + d] = np.maximum(replay[a : a + d], FAMILIES[f].replay)
    for a, b in waits:
        state[a:b] = np.maximum(state[a:b], STATE["framework"])
        replay[a:b] = np.maximum(replay[a:b], STATE["framework"])
    return np.where(state >= 0, state, default), np.where(replay >= 0, replay, default)


@given(
    family_events, intervals, st.sampled_from([0, STATE["framework"]]), st.lists(st.integers(0, GRID + 21))
)
def test_one_rule_of_host_states_for_the_analysis_and_the_replay(events, waits, default, cuts):
    """The thread's timeline (the analysis) and the states of the replay's segments, cut at any superset
    of the events' boundaries, are the same rule: the highest covering state, by brute force."""
    n = GRID + 22
    want, want_replay = _brute_states(events, waits, default, n)
    s = np.array([a for a, _, _ in events], np.int64)
    e = np.array([a + d for a, d, _ in events], np.int64)
    fam = np.array([f for _, _, f in events], np.int8)
    ws, we = iv.union([a for a, _ in waits], [b for _, b in waits])
    tl = _timeline(s, e, fam, ws, we, default)
    assert np.array_equal(tl.at(np.arange(n)), want)
    bnd = np.unique(np.concatenate([s, e, np.asarray(cuts, np.int64), [0, n]]))
    si, ei = np.searchsorted(bnd, s), np.searchsorted(bnd, e)
    waits_idx = (np.searchsorted(bnd, ws), np.searchsorted(bnd, we))
    state, replay = segment_states(bnd.size - 1, si, ei, fam, default, waits_idx)
    for i in range(bnd.size - 1):
        assert (state[i], replay[i]) == (want[bnd[i]], want_replay[bnd[i]])


@given(intervals)
def test_innermost_containing_on_nested_family(ivs):
    # make the family properly nested: keep intervals that nest with all kept so far
    kept: list[tuple[int, int]] = []
    for a, b in sorted(ivs, key=lambda t: (t[0], -t[1])):
        if b > a and all(b <= y or a >= y for x, y in kept if x <= a):
            kept.append((a, b))
    s = np.array([a for a, _ in kept], dtype=np.int64)
    e = np.array([b for _, b in kept], dtype=np.int64)
    depth = iv.nesting_depth(s, e)
    t = np.arange(GRID + 25)
    got = iv.innermost_containing(s, e, depth, t)
    for x in t:
        inside = [i for i, (a, b) in enumerate(kept) if a <= x < b]
        if not inside:
            assert got[x] == -1
        else:
            assert kept[got[x]] == min((kept[i] for i in inside), key=lambda k: k[1] - k[0])


# -- whole analysis on random timelines --------------------------------------------------------

kernel = st.tuples(
    st.integers(0, 400), st.integers(1, 60), st.integers(0, 1), st.integers(0, 1)
)  # ts dur stream dev
host_ev = st.tuples(
    st.sampled_from(["op", "launch", "sync", "dl", "item", "call"]), st.integers(0, 400), st.integers(1, 50)
)
# runtime calls of every runtime and kind (tracekit.analysis.calls), unknown ones included
CALL_NAMES = (
    "cudaMalloc",
    "cuMemAlloc_v2",
    "hipMalloc",
    "hipMemcpyWithStream",
    "hipLaunchKernel",
    "cudaMemcpyAsync",
    "cudaEventRecord",
    "INVALID",
    "cudaSomethingNew",
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kernels=st.lists(kernel, max_size=15),
    host=st.lists(host_ev, max_size=15),
    steps=st.lists(st.integers(1, 450), min_size=1, max_size=3, unique=True),
    linked=st.lists(st.booleans(), min_size=15, max_size=15),
)
def test_random_timelines_keep_the_invariants(kernels, host, steps, linked):
    """Whatever the events, the causes sum to the idle time, the host states to the step, and the
    runtime-call table to the `runtime` idle."""
    t = TraceBuilder()
    cuts = [0, *sorted(steps)]
    for n, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]), start=1):
        t.step(n, a, b)
    corr = 0
    for i, (ts, dur, stream, dev) in enumerate(kernels):
        if linked[i] and host:
            # a launch record shortly before (or after: clock skew) the kernel
            corr += 1
            t.launch(max(0, ts - 7), 3, corr=corr, tid=100 + 100 * (i % 2))
            t.kernel(f"k{i % 3}", ts, dur, corr=corr, stream=7 + stream, device=dev)
        else:
            t.kernel(f"k{i % 3}", ts, dur, stream=7 + stream, device=dev)
    for kind, ts, dur in host:
        if kind == "op":
            t.op("aten::mm", ts, dur)
        elif kind == "launch":
            t.runtime("cudaLaunchKernel", ts, dur)
        elif kind == "sync":
            t.sync(ts, dur, name="cudaStreamSynchronize")
        elif kind == "dl":
            t.dataloader(ts, dur)
        elif kind == "call":
            t.runtime(CALL_NAMES[(ts + dur) % len(CALL_NAMES)], ts, dur)
        else:
            t.op("aten::item", ts, dur)
    with tempfile.TemporaryDirectory() as d:
        path = t.write(Path(d) / "r.pt.trace.json")
        capture = parse_paths([path])
        report = analyze(capture)
    check_invariants(report, capture)
    for dev in report.devices:
        for s in dev.samples:
            assert s.busy_ns + sum(s.idle_ns.values()) == s.dur_ns
    # the host breakdown also partitions each step
    for h in report.host.steps:
        assert sum(h.breakdown_ns.values()) == h.dur_ns
    runtime = sum(s.idle_ns["runtime"] for d in report.devices for s in d.samples)
    assert sum(c.idle_ns for c in report.runtime_calls) == runtime


@given(
    intervals.filter(lambda ivs: len(ivs) >= 2),
    st.lists(st.integers(0, GRID + 20), min_size=2, max_size=6, unique=True),
    intervals,
)
def test_dispatch_gap_pieces_match_brute_force(ops, cuts, backward):
    # GIVEN random ops of one thread (nested or overlapping), step windows between cuts, backward windows
    from tracekit.analysis.dispatch import dispatch_gap_pieces

    cuts = sorted(cuts)
    ws, we = np.array(cuts[:-1]), np.array(cuts[1:])
    os_ = np.array([a for a, _ in ops], dtype=np.int64)
    oe = np.array([b for _, b in ops], dtype=np.int64)
    bs, be = iv.union([a for a, _ in backward], [b for _, b in backward])
    # WHEN
    win, gs, ge = dispatch_gap_pieces(os_, oe, ws, we, bs, be)
    # THEN a unit t is in a gap iff no op covers it, some op ended at or before it, some op starts
    # after it, it lies in a step window and in no backward window
    n = GRID + 25
    t = np.arange(n)
    want = ~cover(ops, n) & cover(zip(ws, we), n) & ~cover(backward, n)
    want &= np.array([any(b <= x for a, b in ops) and any(a > x for a, _ in ops) for x in t])
    assert np.array_equal(cover(zip(gs, ge), n), want)
    assert np.all((gs >= ws[win]) & (ge <= we[win])) and np.all(ge > gs)
