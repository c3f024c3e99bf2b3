"""The replay's loops in C (tracekit/whatif/_loops.c) against their definition, the Python loops of
tracekit.whatif.loops (loops.PYTHON), on random graphs: the same orders, weights and replayed times,
with 32- and 64-bit indices, cycles, dropped bounds and every edge class; and a what-if that gives the
same result with either (TRACEKIT_LOOPS=python: what runs where the extension did not build)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.whatif import loops

_loops = pytest.importorskip("tracekit.whatif._loops", reason="the C extension did not build")
C = loops._c_versions(_loops)
PY = loops.PYTHON
ROOT = Path(__file__).resolve().parent.parent


def random_graph(seed: int, n: int, m: int, acyclic: bool, ix: type):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    if acyclic:  # edges from lower to higher node numbers
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
        keep = src != dst
        src, dst = src[keep], dst[keep]
    return src.astype(ix), dst.astype(ix), rng


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(1, 60),
    st.integers(0, 200),
    st.booleans(),
    st.sampled_from([np.int32, np.int64]),
)
def test_orders_and_weights_match_the_python_loops(seed, n, m, acyclic, ix):
    src, dst, rng = random_graph(seed, n, m, acyclic, ix)
    want_ptr, want_order = np.zeros(n + 2, np.int64), np.empty(dst.size, ix)
    PY["group"](dst, want_ptr, want_order)
    got_ptr, got_order = np.zeros(n + 2, np.int64), np.empty(dst.size, ix)
    C["group"](dst, got_ptr, got_order)
    assert np.array_equal(got_ptr, want_ptr) and np.array_equal(got_order, want_order)
    # the definition of the result: numpy's stable sort and the counts' running sum
    assert np.array_equal(want_order, np.argsort(dst, kind="stable"))
    assert np.array_equal(want_ptr[: n + 1], np.r_[0, np.cumsum(np.bincount(dst, minlength=n))])
    obs = rng.integers(-5, 50, n).astype(np.int64)
    out_ptr, out_order = loops.grouped(n, src)
    out_dst = dst[out_order]
    indeg = np.bincount(dst, minlength=n).astype(ix)
    seeds = np.flatnonzero(indeg == 0)
    seed_ptr = np.array([0, seeds.size], np.int64)
    a = PY["kahn"](n, out_ptr, out_dst, indeg.copy(), seeds, seed_ptr)
    b = C["kahn"](n, out_ptr, out_dst, indeg.copy(), seeds, seed_ptr)
    assert a[1] == b[1]
    if a[1] == 0:
        assert np.array_equal(a[0], b[0])
    by_time = np.argsort(obs, kind="stable")
    a = PY["kahn_by_time"](n, out_ptr, out_dst, indeg.astype(np.int64), by_time)
    b = C["kahn_by_time"](n, out_ptr, out_dst, indeg.astype(np.int64), by_time)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    indptr, in_edges = loops.grouped(n, dst)
    floor = rng.integers(0, 20, src.size).astype(np.int64)
    kind = rng.integers(0, 4, src.size).astype(np.int8)
    waits = np.array([False, True, False, True])
    a = PY["binding_weights"](indptr, in_edges, src, obs, floor, kind, waits, 3)
    b = C["binding_weights"](indptr, in_edges, src, obs, floor, kind, waits, 3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(1, 50),
    st.integers(0, 150),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
    st.sampled_from([np.int32, np.int64]),
)
def test_longest_paths_match_the_python_loop(seed, n, m, k, per_edge, adds, ix):
    src, dst, rng = random_graph(seed, n, m, True, ix)
    e = src.size
    indptr, in_edges = loops.grouped(n, dst)
    order, _ = PY["kahn"](
        n,
        *(lambda p, o: (p, dst[o]))(*loops.grouped(n, src)),
        np.bincount(dst, minlength=n).astype(ix),
        np.flatnonzero(np.bincount(dst, minlength=n) == 0),
        np.array([0, int((np.bincount(dst, minlength=n) == 0).sum())]),
    )
    lb = np.where(indptr[1:] == indptr[:-1], rng.integers(0, 100, n), loops.DROPPED).astype(np.int64)
    g = loops.ReplayGraph(
        order.astype(ix),
        indptr,
        in_edges,
        src,
        rng.integers(-30, 3000, e).astype(np.int64),
        lb,
        rng.integers(0, 4, e).astype(np.int8),
        rng.integers(-1, 5, e).astype(np.int8),  # -1: a segment without a state (host_f's last entry)
        rng.integers(0, 2, e).astype(np.int32),
        rng.integers(-1, 6, e).astype(np.int32),
        rng.integers(0, 4, e).astype(np.int32),
    )
    host_f = rng.uniform(0, 3, (k, 6))
    rank_f = rng.uniform(0.5, 2, 2)
    cost_half = rng.choice([0.0, 400.0, 1250.5], k)
    act_f = rng.uniform(0, 2, 6)
    drop_wait = rng.integers(0, 2, k).astype(bool)
    edge_f = rng.choice([0.0, 0.5, 1.0], e) if per_edge else np.zeros(0)
    edge_add = rng.uniform(0, 500, e) if adds else np.zeros(0)
    args = (g, host_f, rank_f, cost_half, act_f, drop_wait, edge_f, edge_add)
    assert np.array_equal(C["longest_paths"](*args), PY["longest_paths"](*args))


def test_a_wrong_array_type_is_a_type_error_not_a_wrong_read():
    ptr = np.zeros(4, np.int64)
    with pytest.raises(TypeError, match="key"):
        _loops.group(np.zeros(2, np.float64), ptr, np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="ptr"):
        _loops.group(np.zeros(2, np.int64), np.zeros(4, np.int32), np.zeros(2, np.int64))


@pytest.mark.parametrize("bad", [-1, 2])
def test_a_key_out_of_range_is_refused_before_anything_is_written(bad):
    order = np.full(3, 7, np.int64)
    for group in (C["group"], PY["group"]):
        with pytest.raises(ValueError, match="out of range"):
            group(np.array([0, bad, 1], np.int64), np.zeros(4, np.int64), order)
        assert (order == 7).all()


def test_a_whatif_gives_the_same_result_with_the_python_loops(monkeypatch):
    """GIVEN a real capture WHEN it is replayed with the C loops and with their Python definitions (what
    runs where the extension did not build) THEN every figure of the result is the same."""
    from tracekit.parse.parser import load_capture
    from tracekit.whatif.predict import whatif
    from tracekit.whatif.scenario import WhatIfOptions

    cap = load_capture(ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz")
    scenario = WhatIfOptions(set=["interpreter=0.5", "sync=0"], kernels=["Mul=0.5"])
    assert loops.backend().startswith("C")
    with_c = whatif(cap, scenario, attribute=False)[0].to_json()
    monkeypatch.setenv("TRACEKIT_LOOPS", "python")
    assert loops.backend() == "Python"
    assert whatif(cap, scenario, attribute=False)[0].to_json() == with_c


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 40), st.integers(0, 30))
def test_cover_matches_its_definition(seed, n, k):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n + 3, k)  # up to n + 2: beyond the last boundary covers nothing
    ends = np.minimum(starts + rng.integers(0, 5, k), n + 3)
    want = loops._cover(starts, ends, np.empty(n, np.bool_))
    assert np.array_equal(C["cover"](starts, ends, np.empty(n, np.bool_)), want)
    assert np.array_equal(loops.cover(starts.astype(np.int32), ends.astype(np.int32), n), want)
    # the definition by hand: segment i is covered when some interval has start <= i < end
    by_hand = np.array([bool(((starts <= i) & (i < ends)).any()) for i in range(n)], bool)
    assert np.array_equal(want, by_hand)
    with pytest.raises(ValueError, match="negative"):
        C["cover"](np.array([-1]), np.array([1]), np.empty(n, np.bool_))
