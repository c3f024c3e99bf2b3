"""The runtime-call table (tracekit.analysis.calls) and the `runtime` cause: host time blocked in a runtime
or driver call that neither launches work nor waits for the device is `runtime`, named by its call, never
`launch`; a blocking copy in any runtime is `sync`. Tiny synthetic traces with hand-computed answers in
CUDA runtime, CUDA driver and HIP vocabulary, and the real ROCm trace end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.calls import CALLS, CallKind, base_name, call_kind
from tracekit.analysis.causes import CAUSE_ROWS, CAUSES, HOST_STATES, SCALED_CAUSES
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.pipeline import analyze
from tracekit.api import analyze as api_analyze
from tracekit.cli import get_app
from tracekit.parse.parser import parse_paths
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.scenario import WhatIfOptions

ROOT = Path(__file__).resolve().parent.parent
ROCM = ROOT / "fixtures" / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
US = 1000


@pytest.mark.parametrize(
    "name, kind",
    [
        ("cudaLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("cudaLaunchKernel_ptsz", CallKind.KERNEL_LAUNCH),  # per-thread default stream
        ("cudaLaunchKernel_v7000", CallKind.KERNEL_LAUNCH),  # CUPTI's version suffix, unstripped
        ("cuLaunchKernelEx", CallKind.KERNEL_LAUNCH),
        ("hipLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("hipExtModuleLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("hipModuleLaunchKernel", CallKind.KERNEL_LAUNCH),
        ("hipLaunchKernel_spt", CallKind.KERNEL_LAUNCH),
        ("cudaGraphLaunch", CallKind.GRAPH_LAUNCH),
        ("cudaGraphLaunch_v10000", CallKind.GRAPH_LAUNCH),
        ("cuGraphLaunch_ptsz", CallKind.GRAPH_LAUNCH),
        ("hipGraphLaunch", CallKind.GRAPH_LAUNCH),
        ("cudaMemcpyAsync", CallKind.COPY_ASYNC),
        ("cudaMemcpyAsync_ptsz", CallKind.COPY_ASYNC),
        ("hipMemcpyAsync", CallKind.COPY_ASYNC),
        ("cudaMemsetAsync", CallKind.COPY_ASYNC),
        ("cudaMemcpy", CallKind.COPY),
        ("cudaMemcpy_ptds", CallKind.COPY),
        ("cuMemcpyDtoH_v2", CallKind.COPY),
        ("hipMemcpyWithStream", CallKind.COPY),
        ("hipMemcpy_spt", CallKind.COPY),
        ("cudaStreamSynchronize", CallKind.SYNC),
        ("cuStreamSynchronize", CallKind.SYNC),
        ("hipStreamSynchronize", CallKind.SYNC),
        ("hipEventSynchronize", CallKind.SYNC),
        ("cudaDeviceSynchronize", CallKind.DEVICE_SYNC),
        ("cuCtxSynchronize", CallKind.DEVICE_SYNC),
        ("hipDeviceSynchronize", CallKind.DEVICE_SYNC),
        ("cudaEventRecord", CallKind.STREAM_OP),
        ("cudaStreamWaitEvent", CallKind.STREAM_OP),
        ("hipStreamWaitEvent", CallKind.STREAM_OP),
        ("cudaStreamBeginCapture", CallKind.CAPTURE_BEGIN),
        ("cuStreamBeginCapture_v2", CallKind.CAPTURE_BEGIN),
        ("hipStreamBeginCapture", CallKind.CAPTURE_BEGIN),
        ("cudaStreamEndCapture", CallKind.CAPTURE_END),
        ("cudaGraphInstantiateWithFlags", CallKind.INSTANTIATE),
        ("cuGraphInstantiateWithFlags", CallKind.INSTANTIATE),
        ("hipGraphInstantiate", CallKind.INSTANTIATE),
        ("cudaMalloc", CallKind.OTHER),
        ("hipMalloc", CallKind.OTHER),
        ("hipGetDevicePropertiesR0600", CallKind.OTHER),
        ("cudaDeviceGetStreamPriorityRange", CallKind.OTHER),
        ("INVALID", CallKind.OTHER),  # Kineto's name for a callback id it cannot name
        ("cudaLaunchSomethingNew", CallKind.OTHER),  # unknown: never a launch
    ],
)
def test_call_kinds_by_the_names_kineto_writes(name, kind):
    assert call_kind(name) == kind


def test_the_table_holds_each_call_once_under_its_base_name():
    names = [c.name for c in CALLS]
    assert len(names) == len(set(names))
    assert all(base_name(n) == n for n in names)
    assert {c.runtime for c in CALLS} == {"CUDA runtime", "CUDA driver", "HIP"}
    for runtime in ("CUDA runtime", "CUDA driver", "HIP"):
        kinds = {c.kind for c in CALLS if c.runtime == runtime}
        assert kinds == set(CallKind) - {CallKind.OTHER}, runtime


def test_the_cause_table_is_the_one_list():
    assert tuple(c.name for c in CAUSE_ROWS) == CAUSES
    assert "runtime" in CAUSES and "runtime" in HOST_STATES and "runtime" in SCALED_CAUSES
    assert CAUSES.index("sync") < CAUSES.index("runtime") < CAUSES.index("launch")  # its priority


def _with_call(call: str, launch: str) -> TraceBuilder:
    """GIVEN  CPU  interp [0,10) |- CALL [10,40) -| interp [40,50) |- LAUNCH [50,55) -|
    GPU  [k0 0,5)                 idle                                [k1 60,100)"""
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 5)
    t.runtime(call, 10, 30)
    t.runtime(launch, 50, 5, corr=1)
    t.kernel("k1", 60, 40, corr=1)
    return t


@pytest.mark.parametrize(
    "call, launch",
    [
        ("cudaMalloc", "cudaLaunchKernel"),
        ("cuMemAlloc_v2", "cuLaunchKernel"),
        ("hipMalloc", "hipLaunchKernel"),
        ("hipGetDevicePropertiesR0600", "hipExtModuleLaunchKernel"),
        ("cudaSomeCallNoOneKnows", "cudaLaunchKernel_ptsz"),
        ("cudaGraphInstantiateWithFlags", "cudaLaunchKernel"),  # a graph capture's calls hold the host too
        ("cuStreamEndCapture", "cuLaunchKernel"),
    ],
)
def test_a_call_that_neither_launches_nor_waits_is_runtime_by_name(tmp_path, call, launch):
    # WHEN the gap [5,60) is sliced: interp [5,10), CALL [10,40), interp [40,50), launch [50,55) + [55,60)
    # issued, not yet started
    r = _analyze(tmp_path, _with_call(call, launch))
    # THEN 30 µs runtime, never launch; the call's name in the runtime table
    assert _idle(r) == {"runtime": 30 * US, "launch": 10 * US, "interpreter": 15 * US}
    (rc,) = r.runtime_calls
    assert (rc.call, rc.idle_ns, rc.gaps, rc.idle_ms_per_step) == (call, 30 * US, 1, pytest.approx(0.030))
    assert r.host.steps[0].breakdown_ns["runtime"] == 30 * US


@pytest.mark.parametrize(
    "copy, launch",
    [
        ("hipMemcpyWithStream", "hipLaunchKernel"),
        ("cudaMemcpy", "cudaLaunchKernel"),
        ("cuMemcpyHtoD_v2", "cuLaunchKernel"),
    ],
)
def test_a_blocking_copy_is_sync_not_launch(tmp_path, copy, launch):
    # GIVEN  CPU  interp [0,10) |- COPY [10,40) -| interp [40,50) |- LAUNCH [50,55) -|
    #        GPU  [k0 0,5)         [memcpy 30,38)                                  [k1 60,100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 5)
    t.runtime(copy, 10, 30, corr=2)
    t.memcpy(30, 8, corr=2)
    t.runtime(launch, 50, 5, corr=1)
    t.kernel("k1", 60, 40, corr=1)
    r = _analyze(tmp_path, t)
    # THEN gap [5,30): interp 5, sync 20 (the host is blocked in the copy); gap [38,60) starts while the
    # host is still blocked in the copy (rule 4, a drain): 22 sync. No launch time at all.
    assert _idle(r) == {"sync": 42 * US, "interpreter": 5 * US}
    assert [(s.call, s.idle_ns) for s in r.sync_sources] == [(copy, 42 * US)]
    # and the replay of it: the copy is issued when the call starts, so no cycle, and removing the wait
    # (sync=0) lets the call return after its own time
    rp = Replayer.of(parse_paths([tmp_path / "trace.pt.trace.json"]))
    assert rp.graph.diagnostics["cycles_broken"] == 0
    assert abs(rp.replayed.dur[0].mean() / rp.observed.dur[0].mean() - 1) <= 0.02


@pytest.mark.parametrize(
    "copy, launch", [("hipMemcpyWithStream", "hipLaunchKernel"), ("cudaMemcpy", "cudaLaunchKernel")]
)
def test_a_kernel_held_behind_a_blocking_copy_is_sync_not_launch(tmp_path, copy, launch):
    # GIVEN the pattern of an SGLang decode trace on an MI300X (ROCm): a kernel launched, then a blocking
    # copy; the kernel starts only near the copy's end, the device idle meanwhile
    #        CPU  |- LAUNCH [2,5) -|.. |-------- COPY [10,90) --------| interp
    #        GPU  [k0 0,1)                        [k1 80,85) [memcpy 86,88)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k0", 0, 1)
    t.runtime(launch, 2, 3, corr=1)
    t.runtime(copy, 10, 80, corr=2)
    t.kernel("k1", 80, 5, corr=1)
    t.memcpy(86, 2, corr=2)
    r = _analyze(tmp_path, t)
    # THEN gap [1,80), ended by k1 (issued at 5): interp [1,2), launch [2,5), then k1 pending [5,80):
    # launch latency while the host was not in the copy [5,10), sync while it was [10,80); gap [85,86)
    # (the copy's own) and the tail [88,100) begin with the host blocked in it: drains, sync 1 + 12.
    # Before, the 70 µs were launch.
    assert _idle(r) == {"interpreter": 1 * US, "launch": 8 * US, "sync": 83 * US}
    assert [(s.call, s.idle_ns) for s in r.sync_sources] == [(copy, 83 * US)]


def _pageable_step(copy_ts: float, copy_dur: float, call_end: float) -> TraceBuilder:
    """CPU  |- launch k0 [0,2) -|.. |---- cudaMemcpyAsync [10,call_end) ----| interp |- launch k1 -|
    GPU        [k0 5,50)                [Memcpy HtoD (Pageable -> Device) copy_ts..]     [k1 70,100)"""
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(0, 2, corr=1)
    t.kernel("k0", 5, 45, corr=1)
    t.runtime("cudaMemcpyAsync", 10, call_end - 10, corr=2)
    t.memcpy(copy_ts, copy_dur, corr=2, nbytes=4 << 20)
    t.launch(62, 2, corr=3)
    t.kernel("k1", 70, 30, corr=3)
    return t


def test_an_async_copy_from_pageable_memory_that_waited_is_sync(tmp_path):
    # GIVEN a cudaMemcpyAsync from pageable memory whose copy waited for k0 and ran [50,58) inside the
    #       call [10,60): CUDA stages a pageable copy, the call returns as it ends
    t = _pageable_step(50, 8, 60)
    r = _analyze(tmp_path, t)
    # THEN its 50 µs are the host's sync time (a blocking copy), not launch
    assert r.host.steps[0].breakdown_ns["sync"] == 50 * US
    assert r.host.steps[0].breakdown_ns["launch"] == 4 * US  # the two kernel launches
    # AND the replay issues the copy at the call's start and ends the call with it: k0 at half its time
    # ends at 27.5, the copy runs to 35.5 and the call returns then (its observed 2 µs before the copy's
    # end kept), so k1 and the step end 22.5 µs sooner; with the call's 50 µs as host work (a launch) the
    # step could not shorten
    rp = Replayer.of(parse_paths([tmp_path / "trace.pt.trace.json"]))
    assert rp.graph.diagnostics["cycles_broken"] == 0
    assert rp.replayed.dur[0].mean() == pytest.approx(rp.observed.dur[0].mean(), rel=0.02)
    res, _ = whatif(parse_paths([tmp_path / "trace.pt.trace.json"]), WhatIfOptions(kernels=["^k0$=0.5"]))
    (d,) = res.devices
    assert d.observed_step_ns[0] - d.predicted_step_ns[0] == pytest.approx(22.5 * US, abs=1.5 * US)


def test_a_pageable_copy_whose_call_returned_first_stays_a_launch(tmp_path):
    # GIVEN a small pageable copy, staged: its call [10,15) returned before its copy ran [50,52)
    t = _pageable_step(50, 2, 15)
    r = _analyze(tmp_path, t)
    # THEN the call queued the copy: launch, as its name says; no sync time
    assert r.host.steps[0].breakdown_ns["sync"] == 0
    assert r.host.steps[0].breakdown_ns["launch"] == 9 * US


def test_runtime_time_is_a_scenario_and_a_saving(tmp_path):
    t = _with_call("cudaMalloc", "cudaLaunchKernel")
    capture = parse_paths([t.write(tmp_path / "trace.pt.trace.json")])
    res, _ = whatif(capture, WhatIfOptions(set=["runtime=0"]), unprofiled_step_ms=0.1)
    (d,) = res.devices
    # WHEN the 30 µs call takes no time: the launch ends at 25, the kernel starts at 30 and ends at 70
    assert d.observed_step_ns[0] == 100 * US
    assert d.predicted_step_ns[0] == 70 * US
    saved = api_analyze(capture).report.devices[0].savings_ms_per_step
    assert saved is not None and saved["profiled"]["runtime"] == pytest.approx(0.030)


def test_rocm_trace_end_to_end(tmp_path):
    """The real MI250 trace (ROCm 6.2): its blocking hipMemcpyWithStream copies are sync, not launch; its
    hipDeviceSynchronize is sync; the HIP calls that neither launch nor wait are named runtime calls."""
    capture = parse_paths([ROCM])
    r = analyze(capture)
    check_invariants(r, capture)
    host = capture.table.to_pandas()
    copies = host[(host["name"] == "hipMemcpyWithStream") & (host["kind"] == "event")]
    assert len(copies) == 2
    # every idle slice that lies inside a blocking copy is sync (before the table: launch)
    inside = _idle_inside(r, copies)
    assert inside and set(inside) == {"sync"}
    doc = json.loads(json.dumps(r.to_json()))
    assert {c["call"] for c in doc["runtime_calls"]} <= {"hipGetDevicePropertiesR0600"}
    for d in r.devices:
        for s in d.samples:
            assert s.busy_ns + sum(s.idle_ns.values()) == s.dur_ns


def _idle_inside(r, calls) -> dict[str, int]:
    """Idle ns by cause of the report's idle pieces (its evidence) that lie inside the given host events."""
    pieces = r.idle_intervals
    out: dict[str, int] = {}
    for ts, dur in zip(calls["ts_ns"], calls["dur_ns"]):
        m = (pieces["ts_ns"] >= ts) & (pieces["ts_ns"] + pieces["dur_ns"] <= ts + dur)
        for cause, ns in pieces[m].groupby("cause", observed=True)["dur_ns"].sum().items():
            out[str(cause)] = out.get(str(cause), 0) + int(ns)
    return out


def _analyze(tmp_path: Path, t: TraceBuilder):
    capture = parse_paths([t.write(tmp_path / "trace.pt.trace.json")])
    r = analyze(capture)
    check_invariants(r, capture)
    return r


def _idle(r) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in r.devices[0].samples:
        for c, v in s.idle_ns.items():
            if v:
                out[c] = out.get(c, 0) + v
    return out


@pytest.mark.parametrize(
    "doc, where",
    [
        ("README.md", "the cause list"),
        ("docs/DESIGN.md", "rule 3"),
        ("docs/tensorboard.md", "the idle_ms tags"),
    ],
)
def test_the_docs_name_every_cause(doc, where):
    text = (ROOT / doc).read_text()
    missing = [c for c in CAUSES if f"`{c}`" not in text]
    assert not missing, f"{doc} ({where}) does not name {missing}: DESIGN.md 'Adding a cause', step 3"


def test_whatif_help_names_every_cause_it_sets():
    out = CliRunner().invoke(get_app(), ["whatif", "--help"], env={"COLUMNS": "400"}).output
    assert all(c in out for c in SCALED_CAUSES), out
