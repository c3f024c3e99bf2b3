"""Attribution rules on tiny synthetic traces with hand-computed answers (times in µs, answers in ns).

Each test reads GIVEN (the timeline), WHEN (analyze), THEN (the split of idle time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import CAUSES, Report
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths

US = 1000


def run(tmp_path: Path, *builders: TraceBuilder, **kw) -> Report:
    paths = [b.write(tmp_path / f"rank{i}.pt.trace.json") for i, b in enumerate(builders)]
    capture = parse_paths(paths)
    report = analyze(capture, **kw)
    check_invariants(report, capture)
    return report


def idle(report: Report, rank: int = 0, device: int = 0, step: int | None = None) -> dict[str, int]:
    """Idle ns by cause (non-zero only), summed over steps (or one step)."""
    dev = next(d for d in report.devices if d.rank == rank and d.device == device)
    out = dict.fromkeys(CAUSES, 0)
    for s in dev.samples:
        if step is None or s.step == step:
            for c, v in s.idle_ns.items():
                out[c] += v
    return {c: v for c, v in out.items() if v}


def test_fully_busy_step_has_no_idle(tmp_path):
    # GIVEN a kernel covering the whole step
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k", 0, 100)
    # WHEN / THEN
    r = run(tmp_path, t)
    assert idle(r) == {}
    assert r.devices[0].gpu_utilization == 1.0


def test_slicing_interpreter_framework_launch(tmp_path):
    # GIVEN   CPU  ....interp....|-- aten::add [30,50) --|
    #                                 |- L [40,45) -|
    #         GPU  [K0 0,10)                 idle            [K 60,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 10)
    t.op("aten::add", 30, 20)
    t.launch(40, 5, corr=1)
    t.kernel("k", 60, 40, corr=1)
    r = run(tmp_path, t)
    # THEN [10,30) interpreter, [30,40) framework, [40,45) launch call + [45,60) issued-not-started
    assert idle(r) == {"interpreter": 20 * US, "framework": 10 * US, "launch": 20 * US}
    assert r.devices[0].samples[0].busy_ns == 50 * US


def test_kernel_launched_before_the_gap_is_queued(tmp_path):
    # GIVEN   CPU  |L [2,4)|
    #         GPU  [K0 0,10)   idle   [K 60,100)   (K waits on a dependency)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 10)
    t.launch(2, 2, corr=1)
    t.kernel("k", 60, 40, corr=1)
    r = run(tmp_path, t)
    assert idle(r) == {"queued": 50 * US}


def test_launch_ending_exactly_at_gap_start_is_queued(tmp_path):
    # GIVEN L ends at a = 10: the work was queued when the GPU went idle (predicate L.end <= a)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 10)
    t.launch(5, 5, corr=1)
    t.kernel("k", 60, 40, corr=1)
    assert idle(run(tmp_path, t)) == {"queued": 50 * US}


def test_overlapping_streams_count_once_and_tail_gap(tmp_path):
    # GIVEN   stream 7 [0,30)  stream 8 [20,50)  → busy [0,50); tail [50,100) with no kernel after it
    #         CPU op aten::mm [60,70) during the tail
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("a", 0, 30, stream=7)
    t.kernel("b", 20, 30, stream=8)
    t.op("aten::mm", 60, 10)
    r = run(tmp_path, t)
    assert r.devices[0].samples[0].busy_ns == 50 * US
    assert idle(r) == {"interpreter": 40 * US, "framework": 10 * US}
    tail = max(r.top_gaps, key=lambda g: g.dur_ns)
    assert tail.next_kernel is None and tail.dur_ns == 50 * US


def test_gap_at_step_start(tmp_path):
    # GIVEN step [0,100); CPU L [10,20); GPU K [30,100) → gap [0,30) from the window's start
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(10, 10, corr=1)
    t.kernel("k", 30, 70, corr=1)
    assert idle(run(tmp_path, t)) == {"interpreter": 10 * US, "launch": 20 * US}


def test_work_queued_before_the_first_step_delays_its_start(tmp_path):
    # GIVEN a kernel [-10, 20) queued before the step's window [0,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", -10, 30)
    r = run(tmp_path, t)
    # THEN the step starts when the device is free (a CUDA event at its start would record there)
    (s,) = r.devices[0].samples
    assert (s.start_ns, s.dur_ns, s.host_dur_ns, s.busy_ns) == (20 * US, 80 * US, 100 * US, 0)
    assert idle(r) == {"interpreter": 80 * US}


def test_step_lasts_until_its_device_work_is_done_and_activity_is_clipped(tmp_path):
    # GIVEN   host  |-- step 1 [0,50) --|-- step 2 [50,100) --|
    #         s7    |===== a [0,60) launched at 1 =====|
    #         s8                          |== b [56,80) launched at 55 ==|
    t = TraceBuilder()
    t.step(1, 0, 50)
    t.step(2, 50, 100)
    t.launch(1, 1, corr=1)
    t.kernel("a", 0, 60, corr=1)
    t.launch(55, 1, corr=2)
    t.kernel("b", 56, 24, corr=2, stream=8)
    r = run(tmp_path, t)
    s1, s2 = r.devices[0].samples
    # THEN step 1 ends when its kernel does (60), step 2 starts there; b's [56, 60) is busy in step 1
    assert (s1.start_ns, s1.dur_ns, s1.host_dur_ns) == (0, 60 * US, 50 * US)
    assert (s2.start_ns, s2.dur_ns, s2.host_dur_ns) == (60 * US, 40 * US, 50 * US)
    assert (s1.busy_ns, s2.busy_ns) == (60 * US, 20 * US)


def test_gap_across_step_boundary_is_split(tmp_path):
    # GIVEN steps [0,50) and [50,100); kernels [0,10) and [80,100) without launch records
    t = TraceBuilder()
    t.step(1, 0, 50)
    t.step(2, 50, 50 + 50)
    t.kernel("a", 0, 10)
    t.kernel("b", 80, 20)
    r = run(tmp_path, t)
    assert idle(r, step=1) == {"interpreter": 40 * US}
    assert idle(r, step=2) == {"interpreter": 30 * US}
    assert [s.idle_gaps for s in r.devices[0].samples] == [1, 1]


def test_nested_annotations_dataloader_wins(tmp_path):
    # GIVEN   CPU |--- DataLoader.__next__ [0,60) ------------|  |L [62,65)|
    #              |- aten::copy_ [10,20) [cudaMemcpy 12,18] -|
    #         GPU                 idle                                     [K 70,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.dataloader(0, 60)
    t.op("aten::copy_", 10, 10)
    t.sync(12, 6, name="cudaMemcpy")
    t.launch(62, 3, corr=1)
    t.kernel("k", 70, 30, corr=1)
    r = run(tmp_path, t)
    assert idle(r) == {"dataloader": 60 * US, "interpreter": 2 * US, "launch": 8 * US}
    assert r.dataloader.iterator == "_SingleProcessDataLoaderIter" and r.dataloader.multi_worker is False


def test_sync_spanning_the_gap_start_drains(tmp_path):
    # GIVEN   CPU  |-- cudaStreamSynchronize [5,22) --|....|- aten::mm [30,40) [L 32,35] -|
    #         GPU  [K0 0,20)          idle [20,50)                               [K 50,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.sync(5, 17, name="cudaStreamSynchronize")
    t.op("aten::mm", 30, 10)
    t.launch(32, 3, corr=1)
    t.kernel("k", 50, 50, corr=1)
    r = run(tmp_path, t)
    # THEN the whole gap is a sync drain, with the host slices kept as detail
    assert idle(r) == {"sync": 30 * US}
    gap = r.top_gaps[0]
    assert gap.cause == "sync" and gap.sync.call == "cudaStreamSynchronize"
    assert gap.slices_ns == {"sync": 2 * US, "interpreter": 8 * US, "framework": 2 * US, "launch": 18 * US}
    assert [(s.call, s.idle_ns, s.gaps) for s in r.sync_sources] == [("cudaStreamSynchronize", 30 * US, 1)]


@pytest.mark.parametrize(("tol_ns", "expected"), [(2_000, {"sync": 30_000}), (0, {"interpreter": 30_000})])
def test_sync_drain_tolerance(tmp_path, tol_ns, expected):
    # GIVEN a sync that returned 1 µs before the GPU went idle (clock offset), nothing else on the host
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.sync(5, 14, name="cudaDeviceSynchronize")  # ends at 19
    t.kernel("k", 50, 50)  # no launch record: the step thread is T
    # THEN within the tolerance it drained the queue; with no tolerance it did not
    assert idle(run(tmp_path, t, sync_tolerance_ns=tol_ns)) == expected


def test_missing_correlation_uses_step_thread(tmp_path):
    # GIVEN K without a correlation id: no launch record, so no queued / pending-launch piece
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.op("aten::mm", 30, 10)
    t.kernel("k", 50, 50)
    assert idle(run(tmp_path, t)) == {"interpreter": 20 * US, "framework": 10 * US}


def test_launch_on_another_thread_slices_that_thread(tmp_path):
    # GIVEN the backward thread (tid 200) launched K; the main thread is busy in an op meanwhile
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.op("aten::mm", 0, 100)  # main thread: framework the whole time
    t.op("autograd::engine::evaluate_function", 30, 20, tid=200)
    t.launch(40, 5, corr=1, tid=200)
    t.kernel("k", 60, 40, corr=1)
    # THEN the gap [20,60) is sliced by tid 200, an autograd engine thread (no Python between its ops):
    # [20,40) framework, [40,60) launch
    assert idle(run(tmp_path, t)) == {"framework": 20 * US, "launch": 20 * US}


def test_launch_on_a_plain_thread_between_ops_is_interpreter(tmp_path):
    # GIVEN a user thread (tid 300, not the autograd engine) launched K
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.op("aten::mm", 30, 10, tid=300)
    t.launch(40, 5, corr=1, tid=300)
    t.kernel("k", 60, 40, corr=1)
    assert idle(run(tmp_path, t)) == {"interpreter": 10 * US, "framework": 10 * US, "launch": 20 * US}


def test_step_thread_blocked_in_backward_is_framework(tmp_path):
    # GIVEN   step thread  |- aten::sum [0,10) -|........ backward() ........
    #         engine 200                          |- evaluate_function [20,80) -|
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::sum", 0, 10)
    t.op("autograd::engine::evaluate_function: AddmmBackward0", 20, 60, tid=200)
    r = run(tmp_path, t)
    # THEN the step thread is framework while the engine works, interpreter otherwise
    (h,) = r.host.steps
    assert (h.breakdown_ns["framework"], h.breakdown_ns["interpreter"]) == (70 * US, 30 * US)


def test_item_sync_source_names_op_and_user_line(tmp_path):
    # GIVEN   py   train.py(57): main [0,100) > torch/_tensor.py(1): item [3,30)
    #         CPU  |- aten::item [4,28) > aten::_local_scalar_dense [5,27) > cudaStreamSynchronize [6,26) -|
    #         GPU  [K0 0,20)  idle [20,50)  [K 50,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.python("train.py(57): main", 0, 100, py_id=1)
    t.python("torch/_tensor.py(1): item", 3, 27, py_id=2, parent=1)
    t.op("aten::item", 4, 24)
    t.op("aten::_local_scalar_dense", 5, 22)
    t.sync(6, 20, name="cudaStreamSynchronize")
    t.kernel("k0", 0, 20)
    t.kernel("k", 50, 50)
    r = run(tmp_path, t)
    assert idle(r) == {"sync": 30 * US}
    (src,) = r.sync_sources
    # the python tracer's line is where `main` starts; the function name goes with it
    assert (src.source, src.function, src.op, src.call, src.gaps) == (
        "train.py:57",
        "main",
        "aten::item",
        "cudaStreamSynchronize",
        1,
    )
    assert src.idle_ms_per_step == pytest.approx(0.030)


def test_item_after_copy_finished_points_at_its_stream_sync(tmp_path):
    # GIVEN the DtoH copy ended (a = 20) before cudaStreamSynchronize [21,30) began, inside aten::item
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::item", 10, 22)
    t.memcpy(15, 5)
    t.sync(21, 9, name="cudaStreamSynchronize")
    t.kernel("k", 50, 50)
    r = run(tmp_path, t)
    # THEN the item op spans a = 20: drain; the pointer is the stream sync inside it. Before the copy,
    # [0,10) is interpreter and [10,15) the host inside aten::item (sync state, not a drain)
    assert idle(r) == {"interpreter": 10 * US, "sync": 35 * US}
    assert r.sync_sources[0].call == "cudaStreamSynchronize" and r.sync_sources[0].op == "aten::item"


def test_several_devices_of_one_rank(tmp_path):
    # GIVEN device 0 busy [0,50), device 1 busy [0,80) in the same step
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("a", 0, 50, device=0)
    t.kernel("b", 0, 80, device=1)
    r = run(tmp_path, t)
    assert [(d.device, d.samples[0].busy_ns) for d in r.devices] == [(0, 50 * US), (1, 80 * US)]
    assert idle(r, device=1) == {"interpreter": 20 * US}


def test_collective_wait_names_the_straggler(tmp_path):
    # GIVEN   rank 0 GPU [fwd 0,20)[===== ncclAllReduce 20,80 (waits) =====]
    #         rank 1 GPU [========== fwd 0,70 ==========][nccl 70,80]
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    r0 = TraceBuilder(rank=0, world_size=2)
    r0.step(1, 0, 100)
    r0.kernel("fwd", 0, 20)
    r0.kernel(nccl, 20, 60)
    r1 = TraceBuilder(rank=1, world_size=2)
    r1.step(1, 0, 100)
    r1.kernel("fwd", 0, 70)
    r1.kernel(nccl, 70, 10)
    r = run(tmp_path, r0, r1)
    d0, d1 = sorted(r.devices, key=lambda d: d.rank)
    # THEN rank 0 waited 60 - 10 = 50 µs for rank 1; rank 1 waited for nobody
    assert d0.samples[0].collective_wait_ns == 50 * US and d0.straggler_rank == 1
    assert d1.samples[0].collective_wait_ns == 0 and d1.straggler_rank is None
    assert d0.samples[0].busy_ns == 80 * US  # the collective counts as busy


def test_collectives_are_matched_by_sequence_when_the_host_runs_ahead(tmp_path):
    # GIVEN rank 0's trace starts one all-reduce earlier (k0) and its host runs ahead of its GPU: its
    #       step 2 window ends at 120 while its GPU still runs k2 [130,200)
    #   rank 0 steps [0,100)[100,120)   GPU [k0 0,5) [==== k1 10,90 (waits) ====]    [== k2 130,200 ==]
    #   rank 1 steps [0,100)[100,200)   GPU                          [k1 85,90)            [k2 195,200)
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    r0 = TraceBuilder(rank=0, world_size=2)
    r0.step(1, 0, 100)
    r0.step(2, 100, 120)
    for a, b in ((0, 5), (10, 90), (130, 200)):
        r0.kernel(nccl, a, b - a)
    r1 = TraceBuilder(rank=1, world_size=2)
    r1.step(1, 0, 100)
    r1.step(2, 100, 200)
    for a, b in ((85, 90), (195, 200)):
        r1.kernel(nccl, a, b - a)
    # WHEN
    r = run(tmp_path, r0, r1)
    d0, d1 = sorted(r.devices, key=lambda d: d.rank)
    # THEN the collectives are paired by their common end (k1 with k1, not k0 with k1): rank 0 waited
    # 80 - 5 = 75 µs in step 1; k2 starts after its last window, so no step holds its wait, and the
    # device's 70 µs of work after the last window is reported
    assert [s.collective_wait_ns for s in d0.samples] == [75 * US, 0] and d0.straggler_rank == 1
    assert d0.busy_after_last_step_ns == 70 * US
    assert all(s.collective_wait_ns == 0 for s in d1.samples) and d1.straggler_rank is None


def test_cpu_only_capture_reports_host_breakdown(tmp_path):
    # GIVEN no device activity; ops [10,30) and [40,50) in a step [0,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 20)
    t.op("aten::add", 40, 10)
    r = run(tmp_path, t)
    assert r.cpu_only and r.devices == ()
    (h,) = r.host.steps
    assert h.breakdown_ns == {
        "dataloader": 0,
        "sync": 0,
        "collective": 0,
        "runtime": 0,
        "launch": 0,
        "framework": 30 * US,
        "interpreter": 70 * US,
    }
    assert (h.dispatch_gaps, h.dispatch_gap_ns) == (1, 10 * US)


def test_trace_without_steps_is_one_step(tmp_path):
    # GIVEN no ProfilerStep spans: one step spans the trace [0,100)
    t = TraceBuilder()
    t.op("aten::mm", 0, 10)
    t.kernel("k", 20, 80)
    r = run(tmp_path, t)
    s = r.devices[0].samples[0]
    assert (s.dur_ns, s.busy_ns) == (100 * US, 80 * US)
    assert idle(r) == {"framework": 10 * US, "interpreter": 10 * US}


def test_kernel_stats_split_api_queue_kernel(tmp_path):
    # GIVEN L [10,15) → K [20,30): API 5 µs, queue 5 µs, kernel 10 µs
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(10, 5, corr=1)
    t.kernel("k", 20, 10, corr=1)
    t.kernel("nolaunch", 40, 10)
    r = run(tmp_path, t)
    k = next(k for k in r.kernel_stats if k.name == "k")
    assert (k.api.mean_ns, k.queue.mean_ns, k.kernel.mean_ns, k.launched) == (5 * US, 5 * US, 10 * US, 1)
    n = next(k for k in r.kernel_stats if k.name == "nolaunch")
    assert (n.launched, n.api.count, n.kernel.count) == (0, 0, 1)


def test_op_stats_per_step(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 200)
    t.op("aten::linear", 10, 20)
    t.op("aten::linear", 40, 20)
    t.op("aten::linear", 110, 40)
    r = run(tmp_path, t)
    o = next(o for o in r.op_stats if o.name == "aten::linear")
    assert (o.steps, o.calls_per_step, o.ns_per_step) == ((1, 2), (2, 1), (40 * US, 40 * US))
    assert o.us_per_call == pytest.approx(80 / 3)


def test_gap_histogram_buckets(tmp_path):
    # GIVEN gaps of 3 µs and 30 µs
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("a", 0, 10)
    t.kernel("b", 13, 57)
    t.kernel("c", 100 - 0, 0)
    r = run(tmp_path, t)
    h = r.gap_histogram
    edges = list(h.edges_us)
    assert h.counts[edges.index(2)] == 1 and h.idle_ns[edges.index(2)] == 3 * US
    assert h.counts[edges.index(20)] == 1 and h.idle_ns[edges.index(20)] == 30 * US
    assert sum(h.counts) == 2


def test_advice_only_with_strong_evidence(tmp_path):
    # GIVEN a DataLoader stall of 80 % of the step with a single-process iterator
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.dataloader(0, 80)
    t.kernel("k", 80, 20)
    r = run(tmp_path, t)
    assert [a.kind for a in r.advice] == ["dataloader_workers"]
    # GIVEN a busy GPU: no advice
    t2 = TraceBuilder()
    t2.step(1, 0, 100)
    t2.kernel("k", 0, 100)
    (tmp_path / "b").mkdir()
    assert run(tmp_path / "b", t2).advice == ()


def test_report_json_round_trip(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.sync(5, 17, name="cudaStreamSynchronize")
    t.kernel("k", 50, 50)
    r = run(tmp_path, t)
    back = Report.from_json(r.to_json())
    assert back == r
    assert back.to_json() == r.to_json()


def test_manifest_figures_overhead_throughput_memory(tmp_path):
    # GIVEN a 100 µs step, a manifest with 80 µs unprofiled steps, 32 samples per step, a memory peak
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k", 0, 50)
    cap = parse_paths([t.write(tmp_path / "m.pt.trace.json")])
    cap.meta["manifest"] = {
        "workload": "toy",
        "python": {"version": "3.12.3"},
        "unprofiled_step_ms": [0.08, 0.08, 0.09],
        "samples_per_step": 32,
        "peak_memory_bytes": 1 << 20,
    }
    r = analyze(cap)
    check_invariants(r)
    d = r.devices[0]
    # THEN overhead = 0.100 / 0.080 - 1, throughput = 32 samples / 100 µs
    assert r.profiler_overhead.overhead_ratio == pytest.approx(0.25)
    assert d.throughput_per_s == pytest.approx(320_000)
    assert d.peak_memory_bytes == 1 << 20
    assert r.capture["workload"] == "toy"


def test_check_invariants_catches_a_broken_report(tmp_path):
    from dataclasses import replace

    from tracekit.analysis.invariants import InvariantError

    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 20)
    t.kernel("k", 50, 50)
    capture = parse_paths([t.write(tmp_path / "r.pt.trace.json")])
    r = analyze(capture)
    # a sample whose causes no longer sum to its idle time
    d = r.devices[0]
    s = d.samples[0]
    bad = replace(s, idle_ns={**s.idle_ns, "sync": s.idle_ns["sync"] + 1})
    with pytest.raises(InvariantError, match="busy"):
        check_invariants(replace(r, devices=(replace(d, samples=(bad,)),)))
    # an idle piece moved onto a kernel
    idle = r.idle_intervals.copy()
    idle.loc[0, "ts_ns"] = 55_000
    with pytest.raises(InvariantError, match="overlaps"):
        check_invariants(replace(r, idle_intervals=idle, busy_intervals=r.busy_intervals.iloc[0:0]), capture)


def run_host(tmp_path: Path, t: TraceBuilder) -> Report:
    capture = parse_paths([t.write(tmp_path / "rank0.pt.trace.json")])
    report = analyze(capture)
    check_invariants(report, capture)
    return report


def test_busy_is_the_union_over_streams(tmp_path):
    # GIVEN kernels on two streams of device 0 that overlap and touch, and one on device 1
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("a", 10, 10, stream=7)  # [10, 20)
    t.kernel("b", 15, 10, stream=9)  # [15, 25)
    t.memcpy(25, 5, stream=7)  # [25, 30) touches
    t.kernel("c", 40, 5, stream=7)  # [40, 45)
    t.kernel("z", 50, 0, stream=7)  # zero length: nothing
    t.kernel("d", 12, 3, device=1, stream=3)
    # WHEN analysed THEN busy is the maximal intervals per device
    b = run_host(tmp_path, t).busy_intervals
    busy = sorted(zip(b["device"], b["ts_ns"], b["dur_ns"]))
    assert busy == [(0, 10_000, 20_000), (0, 40_000, 5_000), (1, 12_000, 3_000)]


def test_dispatch_gaps_between_top_level_ops_clipped_to_steps(tmp_path):
    # GIVEN   step 1 [0,50) step 2 [50,100); ops [10,20) ⊃ [12,15), [25,30), [45,60), [90,95); [120,130)
    t = TraceBuilder()
    t.step(1, 0, 50)
    t.step(2, 50, 100)
    t.op("a", 10, 10)
    t.op("a.child", 12, 3)
    t.op("b", 25, 5)
    t.op("c", 45, 15)
    t.op("d", 90, 5)
    t.op("e", 120, 10)  # the gap [95, 120) is clipped to [95, 100)
    t.op("other", 0, 200, tid=5)  # another thread: not the step thread
    # WHEN analysed THEN step 1 has [20,25) and [30,45); step 2 [60,90) and [95,100)
    h1, h2 = run_host(tmp_path, t).host.steps
    assert (h1.tid, h1.dispatch_gaps, h1.dispatch_gap_ns) == (100, 2, 20 * US)
    assert (h2.tid, h2.dispatch_gaps, h2.dispatch_gap_ns) == (100, 2, 35 * US)


def test_dispatch_gaps_are_clipped_to_steps_minus_backward(tmp_path):
    # GIVEN   step 1 [0,100): ops [10,20) [30,40) [90,95); engine op [50,80) on tid 200 (GPU backward)
    #         step 2 [100,200): op [110,120)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 200)
    for a, b in ((10, 20), (30, 40), (90, 95), (110, 120)):
        t.op("aten::add", a, b - a)
    t.op("autograd::engine::evaluate_function: AddBackward0", 50, 30, tid=200)
    # WHEN
    r = run_host(tmp_path, t)
    h1, h2 = r.host.steps
    # THEN step 1: [20,30) = 10, [40,90) minus the backward window [50,80) = 10 + 10, and [95,100) = 5
    # (the gap [95,110) crosses the step boundary: each step keeps its piece); step 2: [100,110) = 10
    assert (h1.dispatch_gaps, h1.dispatch_gap_ns) == (4, 35 * US)
    assert (h2.dispatch_gaps, h2.dispatch_gap_ns) == (1, 10 * US)
    assert h1.breakdown_ns["framework"] == (25 + 30) * US and h1.breakdown_ns["interpreter"] == 45 * US


def test_dispatch_gaps_leave_out_the_dataloader_fetch(tmp_path):
    # GIVEN   step [0,100): ops [10,20) [70,80) [90,95); a single-process DataLoader fetch [30,60)
    t = TraceBuilder()
    t.step(1, 0, 100)
    for a, b in ((10, 20), (70, 80), (90, 95)):
        t.op("aten::add", a, b - a)
    t.dataloader(30, 30)
    # WHEN
    r = run_host(tmp_path, t)
    (h,) = r.host.steps
    # THEN the gap [20,70) loses the fetch: [20,30) + [60,70), and [80,90): 3 pieces, 30 µs; the fetch
    # is dataloader time
    assert (h.dispatch_gaps, h.dispatch_gap_ns) == (3, 30 * US)
    assert h.breakdown_ns["dataloader"] == 30 * US and h.breakdown_ns["interpreter"] == 45 * US


def test_cpu_backward_on_the_step_thread_is_framework_only_inside_the_engine(tmp_path):
    # GIVEN a CPU step [0,200) on one thread: forward ops, loss, backward run by the engine on the
    #       calling thread (two engine ops, a gap between them), then an optimizer op
    #   main |lin 10-40| |lin 50-80| |sum 85-90| |ev 100-120| |ev 125-150|      |opt 170-180|
    #                                            |mm 102-118|
    t = TraceBuilder()
    t.step(1, 0, 200)
    t.op("aten::linear", 10, 30)
    t.op("aten::linear", 50, 30)
    t.op("aten::sum", 85, 5)
    t.op("autograd::engine::evaluate_function: AddmmBackward0", 100, 20)
    t.op("aten::mm", 102, 16)
    t.op("autograd::engine::evaluate_function: SumBackward0", 125, 25)
    t.op("aten::add_", 170, 10)
    # WHEN
    r = run_host(tmp_path, t)
    (h,) = r.host.steps
    # THEN the backward window [100,150) is framework (the engine's [120,125) too); the time between
    # forward ops is interpreter: [0,10) [40,50) [80,85) [90,100) [150,170) [180,200)
    assert h.breakdown_ns["framework"] == (30 + 30 + 5 + 50 + 10) * US
    assert h.breakdown_ns["interpreter"] == (10 + 10 + 5 + 10 + 20 + 20) * US
    # dispatch gaps: the same intervals but [0,10) and [180,200) (no op before / after them)
    assert (h.dispatch_gaps, h.dispatch_gap_ns) == (4, 45 * US)


def test_gpu_backward_on_an_engine_thread(tmp_path):
    # GIVEN the step thread blocked in backward() while engine thread 300 runs two ops; the engine
    #       launches the kernel that ends an idle gap
    #   main  |fwd 10-40| |sum 45-50| ....... backward() ........ |opt 130-140|
    #   T300                         |ev 60-80|   |ev 90-110|
    #                                                |L 95-97|
    #   GPU   [k0 0,60)        idle [60,100)          [k 100,150)
    t = TraceBuilder()
    t.step(1, 0, 150)
    t.op("aten::linear", 10, 30)
    t.op("aten::sum", 45, 5)
    t.op("autograd::engine::evaluate_function: AddmmBackward0", 60, 20, tid=300)
    t.op("autograd::engine::evaluate_function: SumBackward0", 90, 20, tid=300)
    t.launch(95, 2, corr=1, tid=300)
    t.op("aten::add_", 130, 10)
    t.kernel("k0", 0, 60)
    t.kernel("k", 100, 50, corr=1)
    # WHEN
    r = run_host(tmp_path, t)
    (h,) = r.host.steps
    # THEN step thread: framework = ops 30 + 5 + 10 and the backward window [60,110) = 50
    assert h.breakdown_ns["framework"] == 95 * US and h.breakdown_ns["interpreter"] == 55 * US
    # dispatch gaps: [40,45), [50,60), [110,130) ([140,150) has no op after it); none on the engine
    # thread
    assert (h.dispatch_gaps, h.dispatch_gap_ns) == (3, 35 * US)
    # the idle gap is sliced on the engine thread: framework between and in its ops, then launch
    assert idle(r) == {"framework": 35 * US, "launch": 5 * US}


def test_item_on_a_cpu_only_capture_is_not_sync(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::item", 10, 20)
    r = run(tmp_path, t)
    assert r.host.steps[0].breakdown_ns["sync"] == 0
    assert r.host.steps[0].breakdown_ns["framework"] == 20 * US


def test_multi_worker_dataloader_advice(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.dataloader(0, 80, kind="_MultiProcessingDataLoaderIter")
    t.kernel("k", 80, 20)
    r = run(tmp_path, t)
    assert r.dataloader.multi_worker is True
    (a,) = r.advice
    assert a.kind == "dataloader_workers" and "num_workers" in a.knob and "single-process" not in a.message
    # the trace alone cannot say how many workers keep up: the prediction is the bound of no loading at all
    assert a.whatif == ("--set", "dataloader=0") and a.bound and a.share == 0.8 and a.basis == "profiled"
