"""One step, one truth (issue 17): the step definition (tracekit.analysis.steps) and the invariants that
tie analyze, whatif and diff to it, as property tests over random timelines in every capture form
(single-cycle, two profiler cycles, two ranks of two cycles) and end to end on the real captures."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np
import pytest
from diff_reports import gpu_report, manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.steps import assign_work, bounds, cycles, outliers
from tracekit.compare.diff import diff
from tracekit.compare.group import merge_reports
from tracekit.errors import TraceFormatError
from tracekit.parse.parser import parse_paths
from tracekit.whatif.predict import IDENTITY, whatif

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the definition on arrays ---------------------------------------------------------------------------


def test_a_step_ends_when_its_host_window_and_its_device_work_are_done():
    # GIVEN   host  |-w1-|-w2-|-w3-|                 windows [0,10) [10,20) [20,30)
    #         dev   |== a 0..25 ==|== b 25..40 ==|== c 40..55 ==|   launched in w1, w2, w3
    ws, we, cy = np.array([0, 10, 20]), np.array([10, 20, 30]), np.zeros(3, np.int64)
    work = assign_work(ws, we, cy, np.array([1.0, 11.0, 21.0]), np.array([0, 25, 40]))
    start, end = bounds(ws, we, cy, work, np.array([25, 40, 55]))
    # THEN the steps are the device's period
    assert list(start) == [0, 25, 40] and list(end) == [25, 40, 55]


def test_cycles_are_separate_timelines():
    # GIVEN two cycles, steps 1-2 and 5-6, 1000 apart; the device of cycle 1 ends at 30
    ws, we = np.array([0, 10, 1000, 1010]), np.array([10, 20, 1010, 1020])
    cy = cycles(np.zeros(4, np.int64), np.array([1, 2, 5, 6]), ws)
    assert list(cy) == [0, 0, 1, 1]
    work = assign_work(ws, we, cy, np.array([1.0, 11.0, 1001.0]), np.array([1, 11, 1001]))
    start, end = bounds(ws, we, cy, work, np.array([5, 30, 1005]))
    # THEN cycle 2's first step starts at its own window, not at cycle 1's last point
    assert list(start) == [0, 10, 1000, 1010] and list(end) == [10, 30, 1010, 1020]


def test_work_queued_before_a_cycle_delays_its_first_step():
    ws, we = np.array([0, 10, 1000, 1010]), np.array([10, 20, 1010, 1020])
    cy = np.array([0, 0, 1, 1])
    # an activity launched at 990 (before cycle 2's first window) that runs to 1004
    work = assign_work(ws, we, cy, np.array([990.0]), np.array([995]))
    assert list(work.step) == [-1] and list(work.pre) == [2]
    start, _ = bounds(ws, we, cy, work, np.array([1004]))
    assert start[2] == 1004


def test_cycles_from_files_when_step_numbers_run_on():
    # wait=0, warmup=0: the numbers do not jump; the second file's start splits them
    ws = np.array([0, 10, 500, 510])
    cy = cycles(np.zeros(4, np.int64), np.array([0, 1, 2, 3]), ws, {0: [0, 495]})
    assert list(cy) == [0, 0, 1, 1]


def test_an_outlier_step_is_named():
    assert outliers([1, 2, 3, 4, 5, 6], [100, 101, 99, 100, 400, 100]) == [(5, 400)]
    assert outliers([1, 2, 3], [100, 101, 102]) == []


# -- random timelines in every capture form ---------------------------------------------------------------

# one host "layer": (interpreter gap, op length, launches a kernel?, kernel length, sync?)
layer = st.tuples(st.integers(0, 30), st.integers(2, 30), st.booleans(), st.integers(1, 80), st.booleans())
GAP_US = 80_000  # between profiler cycles: trace export, profiler restart


def _cycle(t: TraceBuilder, layers, first_step: int, steps: int, now: int, corr: int) -> tuple[int, int]:
    dev_free = now
    for n in range(first_step, first_step + steps):
        start = now
        for gap, op_len, launches, k_len, sync in layers:
            now += gap
            t.op("aten::op", now, op_len)
            if launches:
                corr += 1
                t.launch(now + 1, 1, corr=corr)
                k_start = max(now + 3, dev_free + 1)
                t.kernel("k", k_start, k_len, corr=corr)
                dev_free = k_start + k_len
            now += op_len
            if sync:
                end = max(now + 3, dev_free + 2)
                t.sync(now, end - now, name="cudaStreamSynchronize")
                now = end
        now += 5
        t.step(n, start, now)
    return now, corr


def capture(form: str, layers, tmp: Path):
    """A capture of `form`: "single" (one file, 3 steps), "cycles" (two files of one rank, steps 2-4 and
    7-9, GAP_US apart), "ranks" (two ranks, each two cycles)."""
    files = []
    for rank in (0, 1) if form == "ranks" else (0,):
        now, corr = 0, 0
        for c, first in enumerate((2, 7) if form != "single" else (2,)):
            t = TraceBuilder(rank=rank, world_size=2) if form == "ranks" else TraceBuilder()
            now, corr = _cycle(t, layers, first, 3, now + (GAP_US if c else 0), corr)
            files.append(t.write(tmp / f"rank{rank}.{c}.pt.trace.json"))
    return parse_paths(files)


def _invariants(cap) -> None:
    import tracekit as tk

    a = tk.analyze(cap)
    report = a.report
    check_invariants(report)
    result, _ = whatif(cap, IDENTITY)
    by_key = {(d.rank, d.device): d for d in result.devices}
    for d in report.devices:
        step_ms = statistics.median(d.step_ns) / 1e6
        # analyze's step is whatif's observed step, and the unchanged replay is the observation
        w = by_key[(d.rank, d.device)]
        assert w.observed_step_ms == pytest.approx(step_ms, abs=1e-9)
        assert list(w.observed_step_ns) == list(w.replayed_step_ns)
        # no step spans the gap between two cycles
        assert max(d.step_ns) < GAP_US * 1000
        # no saving exceeds the step
        for saved in (d.savings_ms_per_step or {}).values():
            assert all(v <= step_ms + 1e-9 for v in saved.values()), (saved, step_ms)
    # a capture against itself changes nothing
    pair = diff([report, report]).pairs[0]
    assert all(f.estimate is None or f.estimate.shift == 0 for f in pair.figures + pair.ops)


@SETTINGS
@given(st.lists(layer, min_size=1, max_size=5), st.sampled_from(["single", "cycles", "ranks"]))
def test_analyze_whatif_and_diff_agree_in_every_capture_form(layers, form):
    with tempfile.TemporaryDirectory() as d:
        _invariants(capture(form, layers, Path(d)))


def test_two_cycles_give_each_step_to_one_cycle(tmp_path):
    cap = capture("cycles", [(5, 10, True, 40, False), (3, 8, True, 30, True)], tmp_path)
    result, _ = whatif(cap, IDENTITY)
    (d,) = result.devices
    assert d.steps == (2, 3, 4, 7, 8, 9)
    # every step takes the same (the loop is the same); none holds the 80 ms gap
    assert len(set(d.observed_step_ns)) <= 2 and max(d.observed_step_ns) < 1e6
    assert result.graph["cross_cycle_edges_dropped"] > 0


def test_cycles_from_the_trace_files_when_numbers_run_on(tmp_path):
    # GIVEN a schedule without wait and warm-up steps: two files whose step numbers run on (2-4, 5-7)
    files, now, corr = [], 0, 0
    for c, first in enumerate((2, 5)):
        t = TraceBuilder()
        now, corr = _cycle(t, [(5, 10, True, 40, False)], first, 3, now + (GAP_US if c else 0), corr)
        files.append(t.write(tmp_path / f"rank0.{c}.pt.trace.json"))
    result, _ = whatif(parse_paths(files), IDENTITY)
    (d,) = result.devices
    # THEN the trace files' starts split them: no step holds the gap
    assert d.steps == (2, 3, 4, 5, 6, 7) and max(d.observed_step_ns) < 1e6


def test_repeated_step_numbers_are_refused(tmp_path, capsys):
    from clirun import run_main

    files = []
    for c in range(2):  # two runs, each numbering its steps 2-4
        t = TraceBuilder()
        _cycle(t, [(5, 10, True, 40, False)], 2, 3, c * GAP_US, 0)
        files.append(t.write(tmp_path / f"rank0.{c}.pt.trace.json"))
    with pytest.raises(TraceFormatError, match="ProfilerStep#2 2 times"):
        import tracekit as tk

        tk.analyze(parse_paths(files))
    code, out, err = run_main(["analyze", *map(str, files)], capsys)
    assert code == 2 and "ProfilerStep#2 2 times" in err and "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1


# -- a pooled diff's columns are the statistic its change is computed from ----------------------------------


@SETTINGS
@given(
    st.lists(st.lists(st.floats(1.0, 20.0), min_size=3, max_size=6), min_size=2, max_size=4),
    st.lists(st.lists(st.floats(1.0, 20.0), min_size=3, max_size=6), min_size=2, max_size=4),
)
def test_pooled_diff_columns_agree_with_their_change(runs_a, runs_b):
    def side(runs, name, python):
        reports = []
        for i, dur in enumerate(runs):
            m = manifest(python, run=f"{name}-{i}")
            reports.append(gpu_report(dur, manifest=m, op_us={"aten::linear": [20.0] * len(dur)}))
        return merge_reports(reports)

    pair = diff([side(runs_a, "a", "3.9.18"), side(runs_b, "b", "3.11.7")]).pairs[0]
    for f in pair.figures:
        if f.a is None or f.b is None or f.change is None or f.estimate.method == "single value":
            continue
        assert np.sign(round(f.change, 12)) == np.sign(round(f.b / f.a - 1, 12)), f.key
        assert f.change == pytest.approx(f.b / f.a - 1, rel=1e-9, abs=1e-12), f.key


# -- real captures ---------------------------------------------------------------------------------------

# every real capture of the repository: single-cycle (h200, h200_whatif), two cycles (h200_default), two
# ranks (h200/ddp_slow_rank1), other people's traces (hta)
REAL = sorted(
    p
    for d in ("h200", "h200_default", "h200_whatif")
    for p in (ROOT / "fixtures" / d).iterdir()
    if p.is_dir()
)
REAL += sorted((ROOT / "fixtures" / "hta").glob("*.json.gz"))
# the H200 cross-version study (docs/results/gpu_python): each workload's first run under each Python
REAL += sorted((ROOT / "docs" / "results" / "gpu_python").glob("*/py3.*-1.parquet"))


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_captures_keep_the_invariants(path):
    from tracekit.api import load

    _invariants_real(load(path))


def _invariants_real(cap) -> None:
    import tracekit as tk

    report = tk.analyze(cap).report
    check_invariants(report)
    result, _ = whatif(cap, IDENTITY)
    by_key = {(d.rank, d.device): d for d in result.devices}
    for d in report.devices:
        step_ms = statistics.median(d.step_ns) / 1e6
        assert by_key[(d.rank, d.device)].observed_step_ms == pytest.approx(step_ms, abs=1e-9)
        for saved in (d.savings_ms_per_step or {}).values():
            assert all(v <= step_ms + 1e-9 for v in saved.values())


# Default-schedule captures whose step the profiler hardly changes (the device sets it): the step is
# the unprofiled one, CUDA events at step boundaries (the lead's H200 captures, fixtures/h200_default).
DEVICE_BOUND = {"heavy_mlp": 0.01, "mlp_graph_seed": 0.01, "mlp_graph": 0.07}


@pytest.mark.parametrize("name", sorted(DEVICE_BOUND))
def test_default_schedule_step_is_the_unprofiled_step(name):
    from tracekit.api import load

    cap = load(ROOT / "fixtures" / "h200_default" / name)
    unprofiled = statistics.median(cap.manifest["unprofiled_step_ms"])
    result, _ = whatif(cap, IDENTITY)
    (d,) = result.devices
    assert len(d.steps) == 6 and len(set(cap.meta["sources"][i]["path"] for i in range(2))) == 2
    assert abs(d.observed_step_ms / unprofiled - 1) < DEVICE_BOUND[name]
    # the host windows are shorter: the host runs ahead (a CUDA graph launches a step in ~0.1 ms)
    assert statistics.median(d.observed_host_window_ns) / 1e6 < 0.9 * d.observed_step_ms
    # the device-bound step does not identify the profiler's cost: the measured default is kept
    from tracekit.whatif.profiler import DEFAULT_COST_US

    assert result.unprofiled.profiler_cost_us_per_event == DEFAULT_COST_US
    assert "does not identify" in result.unprofiled.note
