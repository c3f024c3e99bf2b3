"""Property tests (Hypothesis) of the replay on random timelines: the unchanged replay is the observed
timeline, a factor of 1 changes nothing, and the predicted step never shrinks when a factor grows."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import parse_paths
from tracekit.whatif.predict import Replayer
from tracekit.whatif.scenario import WhatIfOptions

# one host "layer": (interpreter gap, op length, launches a kernel?, kernel length, device lag, sync?)
layer = st.tuples(
    st.integers(0, 30),
    st.integers(2, 30),
    st.booleans(),
    st.integers(1, 60),
    st.integers(0, 20),
    st.booleans(),
)


def build(layers: list[tuple], steps: int = 2) -> Replayer:
    t = TraceBuilder()
    now, dev_free, corr = 0, 0, 0
    for n in range(1, steps + 1):
        start = now
        for gap, op_len, launches, k_len, lag, sync in layers:
            now += gap
            t.op("aten::op", now, op_len)
            if launches:
                corr += 1
                t.launch(now + 1, 1, corr=corr)
                k_start = max(now + 2 + lag % 5, dev_free + 1)
                t.kernel("gemm" if lag % 2 else "relu", k_start, k_len, corr=corr)
                dev_free = k_start + k_len
            now += op_len
            if sync:
                end = max(now + 3, dev_free + 2)
                t.sync(now, end - now, name="cudaStreamSynchronize")
                now = end
        now += 5
        t.step(n, start, now)
    with tempfile.TemporaryDirectory() as d:
        return Replayer.of(parse_paths([t.write(Path(d) / "t.pt.trace.json")]))


def steps(rp: Replayer, **flags) -> list[int]:
    t = rp.steps.times(rp.run(WhatIfOptions(**flags)))
    return [int(x) for d in t.dur for x in d]


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(layer, min_size=1, max_size=6))
def test_unchanged_replay_is_identity(layers):
    rp = build(layers)
    for obs, rep in zip(rp.observed.dur, rp.replayed.dur):
        assert list(obs) == list(rep)
    assert rp.graph.diagnostics["unexplained_waits"] == 0


@SETTINGS
@given(st.lists(layer, min_size=1, max_size=6))
def test_factor_one_changes_nothing(layers):
    rp = build(layers)
    base = steps(rp)
    ones = ["interpreter=1", "framework=1", "launch=1", "dataloader=1", "sync=1"]
    assert steps(rp, set=ones, rank_host=["0=1"], python_speedup=1.0) == base
    if len(rp.graph.device):
        assert steps(rp, kernels=[".=1"]) == base


@SETTINGS
@given(
    st.lists(layer, min_size=1, max_size=6),
    st.sampled_from(["interpreter", "framework", "launch", "kernels"]),
    st.floats(0, 3),
    st.floats(0, 3),
)
def test_monotonic_in_factors(layers, what, f1, f2):
    rp = build(layers)
    lo, hi = sorted((f1, f2))
    if what == "kernels":
        if not len(rp.graph.device):
            return
        a, b = steps(rp, kernels=[f".={lo}"]), steps(rp, kernels=[f".={hi}"])
    else:
        a, b = steps(rp, set=[f"{what}={lo}"]), steps(rp, set=[f"{what}={hi}"])
    assert sum(a) <= sum(b) + 2  # ns rounding of scaled weights


@SETTINGS
@given(st.lists(layer, min_size=1, max_size=6))
def test_removing_waits_never_slows_the_step(layers):
    rp = build(layers)
    assert sum(steps(rp, set=["sync=0"])) <= sum(steps(rp))


def reference_weights(g, scenario, cost_ns, f):
    """The scenario's edge weights, vectorised (DESIGN.md "Scenarios"): what the compiled replay
    (`loops.longest_path`) computes edge by edge."""
    import numpy as np

    from tracekit.analysis.causes import STATE_NAMES
    from tracekit.whatif.graph import COLL, DUR, HOST, SYNC_OWN, WAIT
    from tracekit.whatif.loops import DROPPED

    w = g.w.astype(np.float64)
    host = (g.kind == HOST) | (g.kind == SYNC_OWN)
    sf = np.array([scenario.cause_factor(n) for n in STATE_NAMES] + [1.0])
    sf[STATE_NAMES.index("sync")] = 1.0
    sfe = sf[np.where(g.state >= 0, g.state, len(STATE_NAMES))]
    rf = np.ones(int(g.rank.max()) + 1 if g.rank.size else 1)
    for r, v in scenario.rank_host.items():
        rf[r] = v
    w = np.where(host, w * (sfe * rf[g.rank]), w)
    if f.edge.size:
        w = np.where(host, w * f.edge, w)
    if cost_ns:
        w = np.where(host, np.maximum(w - g.cost * (cost_ns / 2.0), np.minimum(w, 0.0)), w)
    dev = (g.kind == DUR) | (g.kind == COLL)
    if dev.any():
        w = np.where(dev, w * f.act[np.maximum(g.act, 0)], w)
    out = np.rint(w).astype(np.int64)
    if scenario.no_wait:
        out[g.kind == WAIT] = DROPPED
    if f.edge.size:
        out[(g.kind == WAIT) & (f.edge == 0)] = DROPPED
    return out


def reference_replay(g, w):

    from tracekit.whatif.loops import DROPPED

    rep = g.lb.copy()
    for v in g.order:
        edges = g.in_edges[g.indptr[v] : g.indptr[v + 1]]
        edges = edges[w[edges] != DROPPED]
        rep[v] = max([int(g.lb[v]), *(int(rep[g.src[e]]) + int(w[e]) for e in edges)])
    return rep


@SETTINGS
@given(
    st.lists(layer, min_size=1, max_size=6),
    st.floats(0, 3),
    st.floats(0, 3),
    st.floats(0, 3),
    st.booleans(),
    st.sampled_from([0.0, 800.0, 2500.0]),
    st.sampled_from([[], ["aten::op=0"], ["aten::op=0.5"]]),
)
def test_compiled_replay_applies_the_scenario_edge_by_edge(layers, fi, ff, fk, no_wait, cost_ns, ops):
    rp = build(layers)
    sets = [f"interpreter={fi}", f"framework={ff}", "launch=0.5"] + (["sync=0"] if no_wait else [])
    kernels = [f"gemm={fk}"] if rp.graph.device["name"].astype(str).str.contains("gemm").any() else []
    sc = WhatIfOptions(set=sets, kernels=kernels, rank_host=["0=0.8"], ops=ops)
    af = rp.check(sc)
    want = reference_replay(rp.graph, reference_weights(rp.graph, sc, cost_ns, af))
    assert list(rp.run(sc, cost_ns / 1000.0, af)) == list(want)
