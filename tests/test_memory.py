"""The device-memory analysis (tracekit.analysis.memory) on tiny synthetic traces with hand-computed
answers (times in µs, bytes as written). Each test reads GIVEN (the timeline), WHEN (analyze), THEN."""

from __future__ import annotations

import io
import json
from pathlib import Path

import hypothesis.strategies as st
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.memory_model import CATEGORY_NAMES, DeviceMemory
from tracekit.analysis.model import Report
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths

ENGINE = 200  # the autograd engine's device thread
SCHEMA = json.loads((Path(__file__).parent.parent / "tracekit/render/report.schema.json").read_text())


def run(tmp_path: Path, t: TraceBuilder, manifest: dict | None = None) -> Report:
    capture = parse_paths([t.write(tmp_path / "rank0.pt.trace.json")])
    if manifest is not None:
        capture.meta["manifest"] = manifest
    report = analyze(capture)
    jsonschema.validate(json.loads(json.dumps(report.to_json())), SCHEMA)
    return report


def memory(report: Report, device: int = 0) -> DeviceMemory:
    return next(m for m in report.memory if m.device == device)


def nonzero(d) -> dict:
    return {k: v for k, v in d.items() if v}


def training_step(t: TraceBuilder, base: int = 1000, offset: float = 0.0, n: int = 1) -> None:
    """One training step over [offset, offset + 100) µs, addresses unique per step:

    main    |-- aten::linear [5,15) --|                 |- Optimizer.step [70,80) -| |- zero_grad [85,90) -|
               |- aten::addmm [7,10) -|
    engine                              |- evaluate_function: MmBackward0 [40,60) -|
    +A 100 @6 (freed @58: activation)   +G 30 @45 (freed @87 in zero_grad: gradient)
    +T 50 @8, -T @12 (temporary)        +X 20 @50, -X @55 (temporary)
                                         +S 40 @72 (never freed: optimizer state)
                                         +U 10 @74, -U @76 (temporary)
    """
    o = offset
    a = 1000 * n
    t.step(n, o, o + 100)
    t.op("aten::linear", o + 5, 10)
    t.op("aten::addmm", o + 7, 3)
    t.op("autograd::engine::evaluate_function: MmBackward0", o + 40, 20, tid=ENGINE)
    t.annotation("Optimizer.step#SGD.step", o + 70, 10)
    t.annotation("Optimizer.zero_grad#SGD.zero_grad", o + 85, 5)
    t.memory_events(
        [
            (o + 6, a + 1, 100),
            (o + 8, a + 2, 50),
            (o + 12, a + 2, -50),
            (o + 45, a + 3, 30, ENGINE),
            (o + 50, a + 4, 20, ENGINE),
            (o + 55, a + 4, -20, ENGINE),
            (o + 58, a + 1, -100, ENGINE),
            (o + 72, a + 5, 40),
            (o + 74, a + 6, 10),
            (o + 76, a + 6, -10),
            (o + 87, a + 3, -30),
        ],
        base=base,
    )


def test_categories_sum_to_the_peak_and_name_each_block(tmp_path):
    # GIVEN one training step (training_step) with 1000 bytes held before the trace, of which the capture
    # recorded 600 of parameters and 300 of optimizer state
    t = TraceBuilder()
    training_step(t)
    manifest = {
        "ranks": [{"rank": 0, "memory": {"model": {"0": {"parameters": 600, "optimizer_state": 300}}}}]
    }
    # WHEN
    m = memory(run(tmp_path, t, manifest))
    # THEN the peak is 1150 at 8 µs (A and T alive), in forward, inside aten::addmm
    (s,) = m.steps
    assert (s.peak_allocated, s.peak_at_ns, s.peak_phase, s.peak_op) == (1150, 8000, "forward", "aten::addmm")
    assert nonzero(s.by_category) == {
        "parameters": 600,
        "optimizer_state": 300,
        "activations": 100,
        "temporaries": 50,
        "unattributed": 100,
    }
    assert sum(s.by_category.values()) == s.peak_allocated
    assert (s.allocated_start, s.allocated_end, s.peak_reserved, s.reserve_at_peak) == (
        1000,
        1040,
        2300,
        1150,
    )
    assert {(b.bytes, b.category, b.op, b.top_op, b.phase) for b in m.largest} == {
        (100, "activations", "aten::linear", "aten::linear", "forward"),
        (50, "temporaries", "aten::addmm", "aten::linear", "forward"),
    }
    assert m.check.events == 11 and m.check.total_mismatches == 0 and m.check.frees_before_trace == 0


def test_each_category_by_where_it_was_made_and_freed(tmp_path):
    # GIVEN the same step; WHEN the state after every event is split (the step's later states)
    t = TraceBuilder()
    training_step(t)
    from tracekit.analysis.events import load_frames
    from tracekit.analysis.host import Threads
    from tracekit.analysis.memory import device_timelines

    capture = parse_paths([t.write(tmp_path / "rank0.pt.trace.json")])
    fr = load_frames(capture.table)
    (tl,) = device_timelines(fr, Threads(fr.host, fr.steps), {})
    # THEN each block has the category of the docstring, by address
    cats = {
        int(tl.blocks["alloc"].iat[j]): CATEGORY_NAMES[tl.blocks["category"].iat[j]]
        for j in range(len(tl.blocks))
    }
    by_size = {int(tl.nbytes[i]): c for i, c in cats.items()}
    assert by_size == {
        100: "activations",
        50: "temporaries",
        30: "gradients",
        20: "temporaries",
        40: "optimizer_state",
        10: "temporaries",
    }
    # and after the gradient's allocation (event 3: 1130) it is counted as such
    cat, excess = tl.by_category(3)
    assert excess == 0 and int(cat.sum()) == 1130
    assert nonzero(dict(zip(CATEGORY_NAMES, cat.tolist()))) == {
        "activations": 100,
        "gradients": 30,
        "unattributed": 1000,
    }


def test_recorded_state_the_trace_allocated_is_not_counted_twice(tmp_path):
    # GIVEN the step, and a record of 300 bytes of optimizer state of which the trace allocates 40
    t = TraceBuilder()
    training_step(t)
    manifest = {"ranks": [{"rank": 0, "memory": {"model": {"0": {"optimizer_state": 300}}}}]}
    from tracekit.analysis.events import load_frames
    from tracekit.analysis.host import Threads
    from tracekit.analysis.memory import device_timelines

    capture = parse_paths([t.write(tmp_path / "rank0.pt.trace.json")])
    capture.meta["manifest"] = manifest
    fr = load_frames(capture.table)
    (tl,) = device_timelines(fr, Threads(fr.host, fr.steps), manifest)
    # WHEN split after S's allocation (event 7: 1070) THEN the state is 40 seen + 260 of the record held
    cat, _ = tl.by_category(7)
    assert nonzero(dict(zip(CATEGORY_NAMES, cat.tolist()))) == {
        "optimizer_state": 300,
        "gradients": 30,
        "unattributed": 740,
    }


def test_no_memory_events_no_memory_section(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k", 0, 100)
    r = run(tmp_path, t)
    assert r.memory == () and "memory" not in r.to_json()


def test_frees_of_blocks_older_than_the_trace_are_counted_never_negative(tmp_path):
    # GIVEN 100 bytes held before the trace; the trace frees a block of 60 it never saw allocated (held
    # before: fine), then one of 80 (more than the start held: unexplained), and a double free
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory(10, -60, 40, addr=7)
    t.memory(20, -80, 0, addr=8)  # the allocator says 0: it cannot have freed 80 of 40
    t.memory(30, 16, 16, addr=9)
    t.memory(40, -16, 0, addr=9)
    t.memory(50, -16, 0, addr=9)
    # WHEN
    m = memory(run(tmp_path, t))
    # THEN counted; every figure is >= 0 and the categories sum to the allocator's total
    assert (m.check.frees_before_trace, m.check.frees_before_trace_bytes) == (2, 140)
    assert m.check.unexplained_free_bytes == 40
    assert m.check.double_frees == 1
    assert m.check.total_mismatches == 2  # 40 - 80 is not 0, nor 0 - 16
    assert m.check.excess_bytes == 40  # at the start 140 freed-later bytes of 100 held: 40 taken off
    (s,) = m.steps
    assert s.peak_allocated == 100 and s.allocated_start == 100  # the start: 40 + 60 held
    assert all(v >= 0 for v in s.by_category.values()) and sum(s.by_category.values()) == 100


def test_live_blocks_beyond_the_allocators_total_are_taken_off(tmp_path):
    # GIVEN two allocations of 50 whose totals say only 60 is allocated (an event went missing)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory(10, 50, 50, addr=1)
    t.memory(20, 50, 60, addr=2)
    # WHEN / THEN the 40 bytes too many are taken off (temporaries first... here inputs_outputs) and said
    m = memory(run(tmp_path, t))
    (s,) = m.steps
    assert s.peak_allocated == 60 and sum(s.by_category.values()) == 60
    assert m.check.excess_bytes == 40 and m.check.total_mismatches == 1


def test_a_trace_cut_mid_step_counts_the_events_after_its_last_step(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory(10, 64, 64, addr=1)
    t.memory(150, 32, 96, addr=2)  # the next step's window was cut off
    m = memory(run(tmp_path, t))
    assert (m.check.outside_steps, m.check.after_last_step) == (1, 1)
    assert m.steps[0].peak_allocated == 64
    assert m.trace_max_allocated == 96


def test_double_allocation_and_size_mismatch_are_counted(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory_events([(10, 1, 64), (20, 1, 64), (30, 1, -64), (40, 2, 32), (50, 2, -16)])
    m = memory(run(tmp_path, t))
    assert (m.check.double_allocations, m.check.size_mismatches) == (1, 1)


def test_without_addresses_everything_is_unattributed(tmp_path):
    # GIVEN memory events as a tracekit before addresses were kept stored them (no Addr)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory_events([(10, 1, 64), (20, 1, -64)], base=10)
    for ev in t.events:
        ev.get("args", {}).pop("Addr", None)
    m = memory(run(tmp_path, t))
    assert not m.addresses
    assert nonzero(m.steps[0].by_category) == {"unattributed": 74}


def test_profiler_cycles_do_not_share_blocks(tmp_path):
    # GIVEN two cycles (steps 1 and 5); a block allocated in the first is never freed there, and the
    # second cycle frees a block it never saw allocated
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.memory(10, 64, 64, addr=1)
    t.step(5, 1000, 1100)
    t.memory(1010, -64, 0, addr=1)
    m = memory(run(tmp_path, t))
    assert [s.step for s in m.steps] == [1, 5]
    assert m.check.frees_before_trace == 1  # the second cycle's free: held before it
    assert nonzero(m.steps[0].by_category) == {"inputs_outputs": 64}  # alive past its step
    assert m.steps[1].allocated_start == 64 and nonzero(m.steps[1].by_category) == {"inputs_outputs": 64}


def test_a_capture_steps_peak_beside_the_allocators(tmp_path):
    t = TraceBuilder()
    training_step(t)
    manifest = {
        "device": {"total_memory_bytes": 4096},
        "ranks": [{"rank": 0, "profiled": {"profiler_step": [0, 1], "peak_memory_bytes": [900, 1150]}}],
    }
    m = memory(run(tmp_path, t, manifest))
    assert (m.allocator_peak, m.device_total) == (1150, 4096)


def test_the_host_allocator_of_a_cpu_capture(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::mm", 5, 10)
    t.memory_events([(6, 1, 64), (20, 1, -64)], device=-1)
    m = memory(run(tmp_path, t), device=-1)
    assert m.host_allocator and m.steps[0].peak_allocated == 64


# -- invariants over random event streams ---------------------------------------------------------------
events = st.lists(
    st.tuples(st.integers(0, 5), st.integers(1, 4096), st.booleans(), st.integers(-64, 64)), max_size=40
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=events, base=st.integers(0, 5000))
def test_random_streams_never_go_negative_and_sum_to_the_total(tmp_path, events, base):
    """Allocations and frees at random addresses (frees of blocks never allocated, double frees, sizes
    that differ, totals that drift): every step's categories are >= 0 and sum to its peak."""
    t = TraceBuilder()
    t.step(1, 0, 500)
    t.step(2, 500, 1000)
    total = base
    for i, (addr, size, alloc, drift) in enumerate(events):
        nbytes = size if alloc else -size
        total = max(total + nbytes + (drift if i % 7 == 3 else 0), 0)
        t.memory(10 + 20 * i, nbytes, total, addr=addr)
    r = run(tmp_path, t)
    for m in r.memory:
        for s in m.steps:
            assert all(v >= 0 for v in s.by_category.values())
            assert sum(s.by_category.values()) == s.peak_allocated
            assert s.reserve_at_peak >= 0 and s.peak_allocated >= 0


def test_diff_compares_the_memory_of_each_step(tmp_path):
    from tracekit.compare.diff import diff as diff_reports

    a, b = TraceBuilder(), TraceBuilder()
    for n in range(1, 4):  # each step keeps its optimizer state S (40)
        training_step(a, offset=100 * (n - 1), n=n, base=1000 + 40 * (n - 1))
        training_step(b, offset=100 * (n - 1), n=n, base=2000 + 40 * (n - 1))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ra, rb = run(tmp_path / "a", a), run(tmp_path / "b", b)
    figures = {f.key: f for p in diff_reports([ra, rb]).pairs for f in p.figures}
    peak = figures["memory.peak_allocated"]
    # medians over the 3 steps: step 2's peak, 1040 + 150 and 2040 + 150; held before the trace 1000, 2000
    assert peak.a == pytest.approx(1190 / 2**20) and peak.b == pytest.approx(2190 / 2**20)
    assert figures["memory.unattributed"].b == pytest.approx(2000 / 2**20)
    same = {f.key: f for p in diff_reports([ra, ra]).pairs for f in p.figures}
    assert same["memory.peak_allocated"].a == same["memory.peak_allocated"].b


def test_an_out_of_memory_capture_says_so_in_the_report(tmp_path):
    from tracekit.render.registry import get_renderer

    t = TraceBuilder()
    training_step(t)
    where = "ProfilerStep#1 (active, step 3 of 4) in x.py:3 (f)"
    oom = {"message": f"out of memory at {where}: peak 70.00 of 80.00 GiB"}
    r = run(tmp_path, t, {"oom": oom})
    out = io.StringIO()
    get_renderer("text", width=200, color=False).render(r, out)
    assert f"the capture ran {oom['message']}; the trace holds the steps before it" in out.getvalue()


def test_the_api_view_has_a_row_per_step(tmp_path):
    import tracekit as tk

    t = TraceBuilder()
    training_step(t)
    a = tk.analyze(t.write(tmp_path / "rank0.pt.trace.json"), savings=False)
    df = a.memory()
    assert list(df["peak_allocated"]) == [1150]
    assert int(df[[f"{c}_bytes" for c in CATEGORY_NAMES]].sum(axis=1).iloc[0]) == 1150


def test_a_capture_file_reads_the_memory_columns_only_when_it_may_hold_memory_events(tmp_path):
    from tracekit import api
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_meta, write_capture

    with_memory, without = TraceBuilder(), TraceBuilder()
    training_step(with_memory)
    without.step(1, 0, 100)
    without.kernel("k", 0, 100)
    paths = []
    for name, t in (("with", with_memory), ("without", without)):
        (tmp_path / name).mkdir()
        out = tmp_path / f"{name}.parquet"
        write_capture(parse_paths([t.write(tmp_path / name / "rank0.pt.trace.json")]), out)
        paths.append(out)
    cols = [loaded_columns(False, p, read_meta(p)) for p in paths]
    assert "flow_id" in cols[0] and "flow_id" not in cols[1] and "total_allocated" in cols[1]
    report = api.analyze(paths[0], savings=False).report
    assert report.memory[0].steps[0].peak_allocated == 1150
