"""The replay on tiny synthetic traces with hand-computed answers: one test per dependency kind and per
scenario. Times in µs as the trace builder takes them; answers in µs.

Each test reads GIVEN (the timeline), WHEN (the scenario), THEN (the predicted step and where each
piece went). The step ends when both its host window and the device work launched in it are done.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import parse_paths
from tracekit.whatif.graph import COLL, JOIN, MEET, WAIT, XSTREAM
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.profiler import DEFAULT_COST_US, MAX_COST_US, MEASURED_RANGE_US, estimate_cost
from tracekit.whatif.scenario import WhatIfOptions

US = 1000


def replayer(tmp_path: Path, *builders: TraceBuilder) -> Replayer:
    paths = [b.write(tmp_path / f"rank{i}.pt.trace.json") for i, b in enumerate(builders)]
    return Replayer.of(parse_paths(paths))


def predict(rp: Replayer, **flags) -> list[float]:
    """Predicted mean step (µs) per device."""
    result, _ = whatif(rp.capture, WhatIfOptions(**flags), replayer=rp, attribute=False)
    return [d.predicted_step_ms * 1000 for d in result.devices]


def observed(rp: Replayer) -> list[float]:
    return [float(d.mean()) / US for d in rp.observed.dur]


def replayed(rp: Replayer) -> list[float]:
    return [float(d.mean()) / US for d in rp.replayed.dur]


def op_with_launch() -> TraceBuilder:
    # GIVEN  CPU  interp [0,10) |- aten::add [10,30) -| (launch [15,20) inside)  interp [30,100)
    #        GPU                          [k1 25,45)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::add", 10, 20)
    t.launch(15, 5, corr=1)
    t.kernel("k1", 25, 20, corr=1)
    return t


def test_unchanged_replay_is_the_observed_step(tmp_path):
    rp = replayer(tmp_path, op_with_launch())
    assert observed(rp) == [100.0]
    assert replayed(rp) == [100.0]
    assert predict(rp) == [100.0]


def test_interpreter_removed_host_chain_and_launch_edge(tmp_path):
    rp = replayer(tmp_path, op_with_launch())
    # WHEN interpreter=0: the op runs [0,20), its launch [5,10), the kernel 5 µs after it (the observed
    # launch → start lag, kept) [15,35); the host window ends at 20
    # THEN the step ends when the kernel does: 35
    assert predict(rp, set=["interpreter=0"]) == [35.0]
    # interpreter halved: op [5,25), launch [10,15), kernel [20,40), window 5 + 20 + 35 = 60
    assert predict(rp, set=["interpreter=0.5"]) == [60.0]
    # --python-speedup 2 is interpreter=1/2
    assert predict(rp, python_speedup=2.0) == [60.0]


def test_framework_and_launch_scale_their_own_segments(tmp_path):
    rp = replayer(tmp_path, op_with_launch())
    # framework=0: the op's own time [10,15) and [20,30) goes; the launch call stays: window 100 - 15
    assert predict(rp, set=["framework=0"]) == [85.0]
    # launch=0: the launch call's 5 µs goes: 95
    assert predict(rp, set=["launch=0"]) == [95.0]


def sync_trace() -> TraceBuilder:
    # GIVEN  CPU  launch [10,15) | cudaDeviceSynchronize [20,125) | interp [125,200)
    #        GPU                 [k 20,120)      (the sync returns 5 µs after the kernel ends)
    t = TraceBuilder()
    t.step(1, 0, 200)
    t.launch(10, 5, corr=1)
    t.kernel("gemm", 20, 100, corr=1)
    t.sync(20, 105)
    return t


def test_sync_waits_for_the_work_it_awaits(tmp_path):
    rp = replayer(tmp_path, sync_trace())
    assert (rp.graph.kind == WAIT).sum() == 1
    # WHEN the kernel takes half: it ends at 70, the sync 5 µs later (75), the rest of the step 75 µs
    # THEN 150
    assert predict(rp, kernels=["gemm=0.5"]) == [150.0]


def test_sync_zero_keeps_the_work_not_the_wait(tmp_path):
    rp = replayer(tmp_path, sync_trace())
    # WHEN sync=0: the call keeps its own overhead (3 µs default: too few samples to measure) and
    # returns at 23; the host window ends at 98, the kernel still at 120
    # THEN the step ends with the kernel: 120
    assert predict(rp, set=["sync=0"]) == [120.0]


def test_stream_order_keeps_the_observed_gap(tmp_path):
    # GIVEN two kernels on one stream; k2 was launched early and waited for k1 (1 µs gap)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(10, 2, corr=1)
    t.kernel("k1", 15, 50, corr=1)
    t.launch(20, 2, corr=2)
    t.kernel("k2", 66, 20, corr=2)
    rp = replayer(tmp_path, t)
    # WHEN k1 takes half: [15,40); k2 follows 1 µs after it: [41,61); the host window still ends at 100
    assert predict(rp, kernels=["^k1$=0.5"]) == [100.0]
    # WHEN both take 3x: k1 [15,165), k2 [166,226): the device sets the step
    assert predict(rp, kernels=["k=3"]) == [226.0]


def test_cross_stream_wait_inferred_from_timing(tmp_path):
    # GIVEN k2 on stream 8 starts at 70, 48 µs after its launch, 5 µs after k1 on stream 7 ended
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(10, 2, corr=1)
    t.kernel("k1", 15, 50, corr=1, stream=7)
    t.launch(20, 2, corr=2)
    t.kernel("k2", 70, 20, corr=2, stream=8)
    rp = replayer(tmp_path, t)
    assert (rp.graph.kind == XSTREAM).sum() == 1
    assert "inferred 1" in rp.graph.diagnostics["stream_waits"]
    # WHEN k1 takes 2x: [15,115); k2 5 µs later [120,140): the step ends at 140
    assert predict(rp, kernels=["^k1$=2"]) == [140.0]


def test_backward_on_the_engine_thread_joins_the_step_thread(tmp_path):
    # GIVEN  step thread  |- mm [0,10) -| interp |.. in backward() ..| interp |- add_ [65,70) -| interp
    #        engine (200)                            |- evaluate_function [20,60) -|
    t = TraceBuilder()
    t.step(1, 0, 80)
    t.op("aten::mm", 0, 10)
    t.op("autograd::engine::evaluate_function: MmBackward0", 20, 40, tid=200)
    t.op("aten::add_", 65, 5)
    rp = replayer(tmp_path, t)
    assert (rp.graph.kind == JOIN).sum() == 1
    # WHEN framework=0.5: mm [0,5), interp [5,15), the engine op starts when backward() is called (15)
    # and takes 20: [15,35); the step thread resumes at 35, interp 5, add_ [40,42.5), interp 10
    # THEN 52.5
    assert predict(rp, set=["framework=0.5"]) == [52.5]


def test_dataloader_removed(tmp_path):
    # GIVEN a DataLoader fetch [0,60) (with a collate op inside), then mm [60,70) launching k [66,86)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.dataloader(0, 60)
    t.op("aten::stack", 10, 10)
    t.op("aten::mm", 60, 10)
    t.launch(62, 2, corr=1)
    t.kernel("k", 66, 20, corr=1)
    rp = replayer(tmp_path, t)
    # WHEN dataloader=0: everything inside the fetch goes (its ops too): mm [0,10), launch [2,4), k [6,26);
    # the window ends at 40
    assert predict(rp, set=["dataloader=0"]) == [40.0]


def test_collective_ends_after_the_last_rank_starts(tmp_path):
    # GIVEN rank 0 starts its all-reduce at 15 and waits; rank 1 (slow host) starts it at 85; both end
    # at 100 (the transfer after the last arrival: 15 µs)
    r0 = TraceBuilder(rank=0, world_size=2)
    r0.step(1, 0, 120)
    r0.launch(10, 2, corr=1)
    r0.kernel("ncclDevKernel_AllReduce", 15, 85, corr=1)
    r1 = TraceBuilder(rank=1, world_size=2, pid=101)
    r1.step(1, 0, 120)
    r1.launch(80, 2, corr=1)
    r1.kernel("ncclDevKernel_AllReduce", 85, 15, corr=1, device=1)
    rp = replayer(tmp_path, r0, r1)
    # every rank's start → every rank's end: its own (COLL) and the other's (MEET)
    assert (rp.graph.kind == COLL).sum() == 2 and (rp.graph.kind == MEET).sum() == 2
    # WHEN rank 1's host is twice as fast: its launch [40,41), the kernel 3 µs later [44, ...);
    # both ranks end at 44 + 15 = 59; rank 1's host window ends at 60 (its tail shrinks to 19)
    result, _ = whatif(rp.capture, WhatIfOptions(rank_host=["1=0.5"]), replayer=rp, attribute=False)
    ends = {d.rank: d.predicted_step_ms * 1000 for d in result.devices}
    # rank 0's host window is unchanged (120): its step stays 120; rank 1's: max(60, 59) = 60
    assert ends == {0: 120.0, 1: 60.0}
    dev0 = rp.graph.device
    rep = rp.run(WhatIfOptions(rank_host=["1=0.5"]))
    end_nodes = rp.graph.device_base + 2 * dev0.index.to_numpy() + 1
    assert sorted(rep[end_nodes] - rep[end_nodes].min()) == [0, 0]
    assert (rep[end_nodes] - rp.graph.obs[end_nodes]).tolist() == [-41 * US, -41 * US]
    # WHEN the transfer is halved: both end at 85 + 7.5
    rep = rp.run(WhatIfOptions(comm=0.5))
    assert (rep[end_nodes] - rp.graph.obs[end_nodes]).tolist() == [-7500, -7500]
    # WHEN there is no communication: no rank waits for the other, each all-reduce takes nothing
    rep = rp.run(WhatIfOptions(comm=0))
    assert (rep[end_nodes] - rp.graph.obs[end_nodes]).tolist() == [-85 * US, -15 * US]


def test_profiler_cost_fitted_to_the_unprofiled_step(tmp_path):
    # GIVEN ten 5 µs ops 5 µs apart: 20 segments of 5 µs, each right after one event boundary
    t = TraceBuilder()
    t.step(1, 0, 100)
    for i in range(10):
        t.op("aten::relu", 5 + 10 * i, 5)
    rp = replayer(tmp_path, t)
    # WHEN the step without the profiler took 60 µs: each segment loses c/2, 20 x (5 - c/2) = 60
    # THEN c = 4 µs per event
    result, _ = whatif(rp.capture, WhatIfOptions(), replayer=rp, unprofiled_step_ms=0.060, attribute=False)
    u = result.unprofiled
    assert u.source == "flag"
    assert u.profiler_cost_us_per_event == pytest.approx(4.0, abs=0.05)
    assert u.replayed_step_ms == pytest.approx(0.060, rel=0.01)
    # and the scenario's unprofiled prediction uses it: framework=0 leaves 10 interpreter segments
    result, _ = whatif(
        rp.capture,
        WhatIfOptions(set=["framework=0"]),
        replayer=rp,
        unprofiled_step_ms=0.060,
        attribute=False,
    )
    assert result.unprofiled.predicted_step_ms == pytest.approx(0.030, rel=0.02)


def test_a_cost_above_the_measured_range_is_clipped_one_below_it_is_kept():
    # GIVEN a replayed step of 100 µs with one recorded event per segment boundary: 1 event (a step
    #       100 µs less c), or 100 events (100 µs less 100 c)
    def one(c_us: float) -> float:
        return (100.0 - c_us) / 1000

    def many(c_us: float) -> float:
        return (100.0 - 100 * c_us) / 1000

    # WHEN the unprofiled step asks for 22 µs/event: more than the profiler costs on real captures
    high = estimate_cost(one, 0.078)
    assert high.cost_us == MEASURED_RANGE_US[1] and "lacks a dependency" in high.note
    assert not high.fitted
    # WHEN it asks for 0.08: the profiled step is hardly slower than the unprofiled one; only that cost
    # replays the capture at its unprofiled step (clipped up to 1.5 the replay would take 0.085 ms)
    low = estimate_cost(many, 0.092)
    assert low.cost_us == pytest.approx(0.08, abs=0.002) and low.fitted
    assert "0.08 µs/event, below the" in low.note and "ran faster while profiled" in low.note


def test_without_unprofiled_time_the_default_cost_is_said(tmp_path):
    rp = replayer(tmp_path, op_with_launch())
    result, _ = whatif(rp.capture, WhatIfOptions(), replayer=rp, attribute=False)
    assert result.unprofiled.source == "default"
    assert "default profiler cost" in result.unprofiled.note


def test_predicted_idle_is_attributed_on_the_predicted_timeline(tmp_path):
    rp = replayer(tmp_path, op_with_launch())
    # WHEN interpreter=0 the host window is [0,20): the device is idle [0,15) (10 framework-ish lead-in:
    # [0,5) fw, [5,10) launch call, [10,15) launch pending) and busy [15,20)
    result, _ = whatif(rp.capture, WhatIfOptions(set=["interpreter=0"]), replayer=rp)
    idle = {k: v / US for k, v in result.devices[0].predicted_idle_ns_per_step.items() if v}
    assert idle == {"framework": 5.0, "launch": 10.0}


def item_trace() -> TraceBuilder:
    # GIVEN  CPU  |- aten::add [10,30) -| (launch [15,20))  |- aten::item [40,140) ------------------|  interp
    #                                                         memcpy launch [45,50)  cudaStreamSync [50,135)
    #        GPU            [k1 25,125) [memcpy 126,128)  (the sync returns 7 µs after the copy)
    t = TraceBuilder()
    t.step(1, 0, 200)
    t.op("aten::add", 10, 20)
    t.launch(15, 5, corr=1)
    t.kernel("k1", 25, 100, corr=1)
    t.op("aten::item", 40, 100)
    t.runtime("cudaMemcpyAsync", 45, 5, corr=2)
    t.memcpy(126, 2, corr=2)
    t.sync(50, 85, name="cudaStreamSynchronize")
    return t


def test_ops_removed_take_their_host_time_waits_and_device_work(tmp_path):
    rp = replayer(tmp_path, item_trace())
    # WHEN aten::item=0: its own time, its copy's launch, its sync (own time and wait) and the copy go:
    # the host reaches 40 and then runs its 60 µs of Python (window end 100); k1 still ends at 125 and
    # the zero-length copy follows it 1 µs later (the observed stream gap)
    # THEN the step ends with the device: 126
    assert predict(rp, ops=["aten::item=0"]) == [126.0]
    # sync=0 alone keeps the op's own work and its copy: 40 + 5 + 5 + 3 (the call's own time) + 5, then
    # 60 µs of Python: 118; the copy still ends at 128
    assert predict(rp, set=["sync=0"]) == [128.0]


def test_ops_pattern_must_name_an_op(tmp_path):
    from tracekit.whatif.scenario import ScenarioError

    rp = replayer(tmp_path, item_trace())
    with pytest.raises(ScenarioError, match="no framework op"):
        predict(rp, ops=["aten::nothing=0"])


def test_an_unprofiled_step_at_the_devices_pace_gives_the_cost_a_lower_bound_only():
    # GIVEN a replayed step of 100 µs less 10 µs per µs/event removed, until the device's 60 µs
    def step(c_us: float) -> float:
        return max(100.0 - 10 * c_us, 60.0) / 1000

    # WHEN the unprofiled step took 61 µs: within FLOOR_MARGIN of the device's pace, any cost from
    #      about 3.9 µs/event replays it: the measured default (5.3) is kept, not the knee
    at_floor = estimate_cost(step, 0.061)
    assert at_floor.cost_us == DEFAULT_COST_US and not at_floor.fitted
    assert at_floor.low_us == pytest.approx(3.87, abs=0.02) and at_floor.high_us == MAX_COST_US
    assert "the replay's device alone takes 0.060 ms, within 2% of it" in at_floor.note
    # WHEN it took 70 µs: the host paces it, and the cost is fitted (3 µs/event)
    paced = estimate_cost(step, 0.070)
    assert paced.fitted and paced.cost_us == pytest.approx(3.0, abs=0.05)


def queue_bound_step(wait_after_kernel_us: float = 3) -> TraceBuilder:
    """GIVEN a host far ahead of its device, the launch queue full: k1 [0,200) runs; the host's launch of
    k2 at 10 blocks until k1 ends and returns `wait_after_kernel_us` later; k2 [200,400); the launch of k3
    at 205 blocks until k2 ends; k3 [400,600). The host's step ends as the last launch returns; the step
    is the device's: 600 µs."""
    t = TraceBuilder()
    t.step(1, 0, 405 + wait_after_kernel_us)
    t.launch(0, 5, corr=1)
    t.kernel("k1", 0, 200, corr=1)
    t.launch(10, 190 + wait_after_kernel_us, corr=2)
    t.kernel("k2", 200, 200, corr=2)
    t.launch(205, 195 + wait_after_kernel_us, corr=3)
    t.kernel("k3", 400, 200, corr=3)
    return t


def test_a_launch_that_waited_for_the_full_launch_queue_ends_with_the_device(tmp_path):
    rp = replayer(tmp_path, queue_bound_step())
    # THEN both long launches waited for the kernel before theirs; the unchanged replay is the trace
    assert rp.graph.diagnostics["queue_waits"] == 2
    assert replayed(rp) == pytest.approx(observed(rp))
    # WHEN the kernels take half their time: each launch returns as its slot frees, 3 µs after the kernel
    # before it ends (its kernel started as the slot freed, before the call returned, as in the trace):
    # the device paces the step, 300 µs; with the calls' 190 µs as host work the host would have held it
    # at 400 (its two calls) + 100 (k3)
    assert predict(rp, kernels=["^k=0.5"]) == [pytest.approx(300.0, abs=1)]


def test_a_long_launch_no_kernel_ended_in_is_host_work(tmp_path):
    # GIVEN the same step whose long launches return 40 µs after the kernel before theirs ended (beyond
    #       QUEUE_WAKE_MAX_NS: the call did something else, e.g. loaded a module)
    rp = replayer(tmp_path, queue_bound_step(wait_after_kernel_us=40))
    assert rp.graph.diagnostics["queue_waits"] == 0
