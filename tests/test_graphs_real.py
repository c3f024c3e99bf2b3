"""CUDA graphs and torch.compile on real H200 captures (fixtures/h200_graphs, see its README), read by the
same attribution rules, and `whatif --cuda-graphs` on the eager capture checked against the graphed one.
The counts below were read off the traces by hand (`benchmarks/graph_floor.py`, a JSON dump)."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import Report
from tracekit.analysis.pipeline import analyze
from tracekit.api import load as load_inputs
from tracekit.whatif.cudagraph import GRAPH_GAP_NS, GRAPH_GAP_RANGE_NS
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.scenario import WhatIfOptions

ROOT = Path(__file__).parent.parent / "fixtures" / "h200_graphs"
RUNS = ("mlp_eager", "mlp_graph", "mlp_compile", "mlp_graph_seed")


@pytest.fixture(scope="module")
def real():
    cache: dict[str, tuple[Report, object]] = {}

    def get(run: str) -> tuple[Report, object]:
        if run not in cache:
            capture = load_inputs(ROOT / run)
            report = analyze(capture)
            check_invariants(report, capture)
            cache[run] = (report, capture)
        return cache[run]

    return get


def test_graph_kernels_have_the_graph_launch_as_their_record(real):
    report, capture = real("mlp_graph")
    # GIVEN one cudaGraphLaunch per step, 313 kernels each: every kernel with a launch record is a
    # graph's (the others ran in the graph launched before the trace began)
    assert all(k.launched == k.graph_launched > 0 for k in report.kernel_stats)
    assert all(k.api.count == 0 and k.queue.count == 0 for k in report.kernel_stats if k.graph_launched)
    # the gaps inside a graph are queued (its launch had ended); the host inside cudaGraphLaunch while
    # the device waits for the first kernel is launch
    (d,) = report.devices
    idle = d.idle_ns_per_step()
    assert idle["queued"] > 0 and idle["launch"] > 0
    assert idle["framework"] == 0 and idle["dataloader"] == 0
    # the capture is graphed: no advice to capture it with graphs
    assert "cuda_graphs" not in [a.kind for a in report.advice]


@pytest.mark.parametrize(
    "path, mean_ns",
    [(ROOT / "mlp_graph", 108), (ROOT.parent.parent / "docs" / "results" / "cuda_graphs" / "hb_graph", 439)],
    ids=["machine1", "machine2"],
)
def test_in_graph_gaps_are_the_documented_floor(path, mean_ns):
    # the mean gap between consecutive kernels of one graph launch, as graph_floor.py reads it (the two
    # H200 machines of the docs): the floor lies between them, each inside the range the notes give
    rp = Replayer.of(load_inputs(path))
    dev = rp.graph.device
    corr = dev["correlation"].to_numpy(np.float64)
    start, end = dev["ts"].to_numpy(np.int64), dev["end"].to_numpy(np.int64)
    order = np.argsort(start, kind="stable")
    same = corr[order][1:] == corr[order][:-1]  # consecutive kernels of one graph launch
    gaps = (start[order][1:] - end[order][:-1])[same]
    assert gaps.size > 1000
    assert abs(float(np.mean(gaps)) - mean_ns) <= 5
    assert GRAPH_GAP_RANGE_NS[0] - 10 <= mean_ns <= GRAPH_GAP_RANGE_NS[1]
    assert GRAPH_GAP_RANGE_NS[0] < GRAPH_GAP_NS < GRAPH_GAP_RANGE_NS[1]


def test_compiled_code_is_named_and_framework(real):
    report, _ = real("mlp_compile")
    c = report.compiled
    assert c is not None
    # one compiled frame (the model's forward), compile id 0: no recompile; its compile ran in the
    # untimed warm-up steps, not in the profiled ones
    assert [r.name for r in c.regions] == ["Torch-Compiled Region: 0/0"]
    assert c.recompiled_frames == () and c.compile_ms_by_step == ()
    assert c.regions[0].calls_per_step == 1.0
    # 51 Triton kernels per step: triton_poi_fused_addmm_relu_0 and triton_per_fused_sum_threshold_backward_1
    # (25 each: the 24 hidden layers + the input layer) and triton_per_fused_sum_0 (1)
    assert c.triton_kernels_per_step == 51
    assert c.guard_ms_per_step > 0 and c.wrapper_ms_per_step > 0
    # the wrapper's Python between launches lies inside cpu_ops: the host's interpreter share is what runs
    # outside the compiled code (the training loop, backward, SGD), not inductor's wrapper
    (d,) = report.devices
    idle = d.idle_ns_per_step()
    assert idle["framework"] > idle["interpreter"]
    # compiled but still launch-bound: the advice names reduce-overhead, not "try torch.compile"
    (adv,) = [a for a in report.advice if a.kind == "cuda_graphs"]
    assert "reduce-overhead" in adv.message
    assert real("mlp_eager")[0].compiled is None and real("mlp_graph")[0].compiled is None


RESULTS = ROOT.parent.parent / "docs" / "results" / "cuda_graphs"
PAIRS = [
    (ROOT / "mlp_eager", ROOT / "mlp_graph", 313),  # the lead's user script: 0.850 ms as a graph
    (RESULTS / "hb_eager", RESULTS / "hb_graph", 209),  # heavy_mlp host-bound, cuda_graphs=true: 0.794 ms
    (RESULTS / "seed_eager", RESULTS / "seed_graph", 73),  # the seed MLP (GPU-bound): 5.185 ms
]


@pytest.mark.parametrize("eager_dir, graph_dir, kernels", PAIRS, ids=lambda p: getattr(p, "name", str(p)))
def test_whatif_cuda_graphs_on_the_eager_capture_predicts_the_graph(eager_dir, graph_dir, kernels):
    # GIVEN an eager capture and the same step captured as one CUDA graph (unprofiled: CUDA events)
    eager, graphed = load_inputs(eager_dir), load_inputs(graph_dir)
    measured = statistics.median(graphed.manifest["unprofiled_step_ms"])
    result, _ = whatif(eager, WhatIfOptions(cuda_graphs=True), attribute=False)
    (d,) = result.devices
    # THEN the prediction without the profiler is within 20 % of the graph's unprofiled step (the median
    # over steps: the step across the two profiler cycles holds the profiler's own pause)
    predicted = statistics.median(d.unprofiled_predicted_step_ns) / 1e6
    assert predicted == pytest.approx(measured, rel=0.2)
    info = result.graph["cuda_graphs"]
    assert info["regions"] == 6 and info["kernels"] == 6 * kernels and info["syncs_kept"] == 0


def test_whatif_cuda_graphs_on_a_graphed_capture_changes_little(real):
    # a capture that is one graph per step already: its host is a graph launch, its gaps the floor
    _, graphed = real("mlp_graph_seed")
    result, _ = whatif(graphed, WhatIfOptions(cuda_graphs=True), attribute=False)
    (d,) = result.devices
    assert statistics.median(d.predicted_step_ns) == pytest.approx(
        statistics.median(d.replayed_step_ns), rel=0.02
    )


@pytest.mark.parametrize("run", RUNS)
def test_unchanged_replay_of_graph_and_compile_captures(real, run):
    rp = Replayer.of(real(run)[1])
    for obs, rep in zip(rp.observed.dur, rp.replayed.dur):
        assert abs(rep.mean() / obs.mean() - 1) <= 0.02


def test_compile_inside_the_trace_is_named_with_its_step():
    # GIVEN heavy_mlp host-bound with compile=true captured from step 0 (no untimed warm-up)
    report = analyze(load_inputs(RESULTS / "hb_compile_first"))
    c = report.compiled
    # THEN step 0 holds the compile: 1378.2 ms of entire_frame_compile (read off the trace)
    ((step, ms),) = c.compile_ms_by_step
    assert step == 0 and ms == pytest.approx(1378.2, abs=0.1)
    assert [r.name for r in c.regions] == ["Torch-Compiled Region: 0/0"] and c.recompiled_frames == ()


@pytest.mark.slow
def test_the_published_cuda_graph_tables_are_the_derived_ones():
    """docs/results/whatif.md's CUDA-graph and torch.compile tables, re-derived from the committed captures
    by docs/results/cuda_graphs.py."""
    import importlib.util
    import sys

    results = ROOT.parent.parent / "docs" / "results"
    spec = importlib.util.spec_from_file_location("cuda_graphs_results", results / "cuda_graphs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    lines, _ = mod.tables(results / "cuda_graphs")
    page = (results / "whatif.md").read_text()
    for line in lines:
        assert line in page, line
