"""What the profiler hid about the input pipeline: the unprofiled loader waits beside the profiled
breakdown, the warnings, the advice ranked by the unprofiled evidence, and the same figures in JSON, the
API and diff."""

from __future__ import annotations

import io
import math

import pytest

from tests.diff_reports import gpu_report, manifest
from tests.tracebuilder import TraceBuilder
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import Report
from tracekit.analysis.pipeline import analyze
from tracekit.compare.diff import diff
from tracekit.parse.parser import parse_paths

LOADER = {
    "marked_by": "steps",
    "type": "torch.utils.data.dataloader.DataLoader",
    "dataloader": True,
    "num_workers": 3,
    "prefetch_factor": 2,
    "prefetch_depth": 6,
    "pin_memory": True,
    "persistent_workers": True,
    "batch_size": 64,
}


def _host_bound_capture(tmp_path, manifest_extra=None):
    """Three 50 µs steps; in each five 5 µs kernels 10 µs apart, nothing on the host between them
    (interpreter idle 25 µs/step, 50 %); a 1 µs DataLoader fetch at each step's start."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 50
        t.step(n, base, base + 50)
        t.dataloader(base, 1, kind="_MultiProcessingDataLoaderIter")
        for k in range(5):
            t.kernel(f"k{k}", base + 10 * k, 5)
    cap = parse_paths([t.write(tmp_path / "lb.pt.trace.json")])
    m = {"workload": "toy", "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 0}}
    m.update(manifest_extra or {})
    cap.meta["manifest"] = m
    return cap


def _loader_bound(step_ms=(0.100, 0.095, 0.105), wait_ms=(0.080, 0.075, 0.085)):
    return {
        "unprofiled_step_ms": list(step_ms),
        "unprofiled_loader_wait_ms": list(wait_ms),
        "loader": LOADER,
        "ranks": [{"rank": 0, "unprofiled": {"step_ms": list(step_ms), "loader_wait_ms": list(wait_ms)}}],
    }


def test_a_loader_stall_the_window_hid_is_named_from_the_unprofiled_waits(tmp_path):
    # GIVEN a profiled window of 50 µs steps with no loader wait, and unprofiled steps of ~100 µs of
    #       which ~80 µs wait for the batch (3 workers × prefetch 2 = 6 batches ahead, 3 active steps)
    r = analyze(_host_bound_capture(tmp_path, _loader_bound()))
    check_invariants(r)
    ip = r.input_pipeline
    # THEN the unprofiled step and its loader share are beside the profiled figures
    assert ip.unprofiled_step_median_ms == pytest.approx(0.100)
    assert ip.unprofiled_wait_median_ms == pytest.approx(0.080)
    assert ip.unprofiled_wait_share == pytest.approx(0.240 / 0.300)
    assert ip.profiled_step_ms == pytest.approx(0.050) and ip.profiled_wait_ms == pytest.approx(0.001)
    # both warnings: the window is within the prefetch depth, and the profiled steps are faster
    assert ip.hidden and len(ip.warnings) == 2
    assert "active=3 steps" in ip.warnings[0] and "= 6 batches" in ip.warnings[0]
    assert "the profiled steps (0.05 ms) are faster than the unprofiled ones (0.1 ms)" in ip.warnings[1]
    # AND the advice ranks the loader first, by its share of the unprofiled step; the host-bound advice
    #     keeps its share of the profiled step it was measured on (50 %): a share of one step is never
    #     moved onto another (that made a 115 % share on a capture whose profiled step was the longer)
    kinds = [a.kind for a in r.advice]
    assert kinds == ["dataloader_workers", "cuda_graphs"]
    loader, host = r.advice
    assert loader.basis == "unprofiled" and loader.share == pytest.approx(0.8)
    assert host.basis == "profiled" and host.share == pytest.approx(0.5)
    assert "3 workers, prefetch_factor 2" in loader.evidence
    # the knob: the pool makes a batch per 100 µs step, the step without its wait takes 20 µs, so
    # 3 workers × 100 / 20 = 15 keep up (the manifest names no CPU count to cap them)
    assert loader.knob == "DataLoader(num_workers=15)" and loader.whatif == ("--loader-workers", "15")
    # an upper bound: workers sharing a host make batches no faster than the capture's did
    assert loader.bound and "at most: each added worker" in loader.prediction_note


def test_without_timed_fetches_the_advice_keeps_the_profiled_evidence(tmp_path):
    r = analyze(_host_bound_capture(tmp_path))
    assert r.input_pipeline is None
    assert [(a.kind, a.basis) for a in r.advice] == [("cuda_graphs", "profiled")]
    assert r.advice[0].share == pytest.approx(0.5)
    assert "input_pipeline" not in r.to_json()


def test_a_loader_that_keeps_up_raises_no_stall_warning_and_no_advice(tmp_path):
    # GIVEN unprofiled steps that wait 1 µs of 50 for their batch, with a window beyond the depth
    extra = _loader_bound(step_ms=(0.050,) * 3, wait_ms=(0.001,) * 3)
    extra["loader"] = dict(LOADER, prefetch_depth=2, num_workers=1)
    r = analyze(_host_bound_capture(tmp_path, extra))
    assert r.input_pipeline.warnings == () and not r.input_pipeline.hidden
    assert [a.kind for a in r.advice] == ["cuda_graphs"]


def test_the_figures_are_in_json_text_markdown_and_the_api(tmp_path):
    import tracekit as tk
    from tracekit.render.registry import get_renderer

    cap = _host_bound_capture(tmp_path, _loader_bound())
    r = analyze(cap)
    doc = r.to_json()
    ip = doc["input_pipeline"]
    assert ip["unprofiled_wait_share"] == pytest.approx(0.8) and ip["hidden"] is True
    assert ip["unprofiled_wait_ms"] == [0.080, 0.075, 0.085] and ip["loader"]["num_workers"] == 3
    assert doc["advice"][0]["share"] == pytest.approx(0.8) and doc["advice"][0]["basis"] == "unprofiled"
    back = Report.from_json(doc)
    assert back.input_pipeline == r.input_pipeline and back.advice == r.advice
    for name in ("text", "markdown"):
        out = io.StringIO()
        kw = {"width": 200} if name == "text" else {}
        get_renderer(name, **kw).render(r, out)
        text = out.getvalue()
        assert "input pipeline: loader wait per step, without and with the profiler" in text
        assert "warning: the profiled window (active=3 steps)" in text
        assert "[80% of the unprofiled step]" in text
    causes = tk.Analysis(r).causes()
    row = causes[causes["cause"] == "dataloader"].iloc[0]
    assert row["unprofiled_ms_per_step"] == pytest.approx(0.080)
    assert row["unprofiled_share"] == pytest.approx(0.8)
    other = causes[causes["cause"] == "interpreter"].iloc[0]
    assert math.isnan(other["unprofiled_ms_per_step"])


def test_diff_compares_the_unprofiled_loader_wait_with_its_interval():
    def rep(run, waits):
        m = manifest("3.11.7", run=run)
        m["unprofiled_step_ms"] = [w + 20.0 for w in waits]
        m["unprofiled_loader_wait_ms"] = waits
        return gpu_report([30.0] * 6, manifest=m)

    a = rep("w2", [80.0, 82.0, 79.0, 81.0, 80.5, 79.5])
    b = rep("w8", [10.0, 11.0, 9.5, 10.5, 10.2, 9.8])
    (pair,) = diff([a, b]).pairs
    fig = next(f for f in pair.figures if f.key == "unprofiled_loader_wait")
    assert fig.a == pytest.approx(80.25) and fig.b == pytest.approx(10.1)
    assert fig.significant and fig.improved
    lo, hi = fig.change_ci
    assert lo <= fig.change <= hi < 0
