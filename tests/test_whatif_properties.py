"""Property tests (Hypothesis) of the replay on random timelines: the unchanged replay is the observed
timeline, a factor of 1 changes nothing, and the predicted step never shrinks when a factor grows."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import parse_paths
from tracekit.whatif import Replayer, parse_scenario

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
    t = rp.steps.times(rp.run(parse_scenario(**flags)))
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
    assert steps(rp, sets=ones, rank_host=["0=1"], python_speedup=1.0) == base
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
        a, b = steps(rp, sets=[f"{what}={lo}"]), steps(rp, sets=[f"{what}={hi}"])
    assert sum(a) <= sum(b) + 2  # ns rounding of scaled weights


@SETTINGS
@given(st.lists(layer, min_size=1, max_size=6))
def test_removing_waits_never_slows_the_step(layers):
    rp = build(layers)
    assert sum(steps(rp, sets=["sync=0"])) <= sum(steps(rp))
