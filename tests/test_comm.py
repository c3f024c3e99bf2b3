"""Communication on each rank (tracekit.analysis.comm) and its what-ifs, on tiny synthetic traces with
hand-computed answers (µs as the trace builder takes them), then on the real fixtures: a 2-rank gloo DDP
capture on the CPU (fixtures/cpu_gloo) and the 2-rank H200 DDP capture (fixtures/h200/ddp_slow_rank1).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.comm import waits_on_thread
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import Report
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.scenario import WhatIfOptions

ROOT = Path(__file__).resolve().parent.parent
US = 1000
GLOO_TID = 99


def gloo_job() -> tuple[TraceBuilder, TraceBuilder]:
    """Two CPU ranks under DDP with gloo, one all-reduce each in a 100 µs step:

        rank 0  step T  |fwd 0-20|ar 20-22|......... wait .........|copy 82-90|..|
                gloo T'          |===== gloo:all_reduce 21-80 =====|
        rank 1  step T  |slow_rank 0-40 ....|fwd 40-58|ar 58-60|.wait.|copy 81-90|..|
                gloo T'                                    |= 60-80 =|

    rank 1 arrives at 60: rank 0 waits 39 µs of its span for it (21-60), then both transfer 20 µs."""
    r0 = TraceBuilder(rank=0, world_size=2, pid=100, tid=100)
    r0.step(1, 0, 100)
    r0.op("aten::linear", 0, 20)
    r0.op("c10d::allreduce_", 20, 2)
    r0.annotation("gloo:all_reduce", 21, 59, tid=GLOO_TID)
    r0.op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 82, 8)
    r1 = TraceBuilder(rank=1, world_size=2, pid=101, tid=101)
    r1.step(1, 0, 100)
    r1.annotation("tracekit.slow_rank", 0, 40)
    r1.op("aten::linear", 40, 18)
    r1.op("c10d::allreduce_", 58, 2)
    r1.annotation("gloo:all_reduce", 60, 20, tid=GLOO_TID)
    r1.op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 81, 9)
    return r0, r1


def _paths(tmp_path: Path, *builders: TraceBuilder) -> list[Path]:
    return [b.write(tmp_path / f"rank{i}.pt.trace.json") for i, b in enumerate(builders)]


def run(tmp_path: Path, *builders: TraceBuilder) -> Report:
    capture = parse_paths(_paths(tmp_path, *builders))
    report = analyze(capture)
    check_invariants(report, capture)
    return report


def test_a_gloo_wait_is_the_collective_state_not_python(tmp_path):
    # GIVEN the gloo job WHEN analysed THEN rank 0's step thread waits 22-80 (58 µs, within its
    # all-reduce's span), is in ops 30 µs and runs Python 12 (80-82, 90-100)
    r = run(tmp_path, *gloo_job())
    h0 = next(h for h in r.host.steps if h.rank == 0)
    assert h0.breakdown_ns["collective"] == 58 * US
    assert h0.breakdown_ns["framework"] == 30 * US
    assert h0.breakdown_ns["interpreter"] == 12 * US
    # the wait is not a dispatch gap (Python between framework calls): 80-82 is (after the last op
    # nothing follows in this trace)
    assert (h0.dispatch_gaps, h0.dispatch_gap_ns) == (1, 2 * US)
    # rank 1 waits 60-80 for the transfer; its 40 µs of sleep before the forward is interpreter
    h1 = next(h for h in r.host.steps if h.rank == 1)
    assert h1.breakdown_ns["collective"] == 20 * US
    assert h1.breakdown_ns["interpreter"] == 51 * US


def test_exposed_communication_splits_into_waiting_and_transfer(tmp_path):
    # GIVEN the gloo job WHEN analysed THEN per rank (ms per step):
    r = run(tmp_path, *gloo_job())
    c = r.communication
    assert c is not None and c.matched == 1 and not c.clock_skew
    r0, r1 = c.ranks
    assert (r0.rank, r0.device, r1.rank, r1.device) == (0, -1, 1, -1)
    (s0,) = r0.steps
    # rank 0: in flight 21-80 (59), exposed 22-80 (58; 21-22 it was still issuing: hidden 1), of which
    # 22-60 waits for rank 1 (38) and 60-80 is the transfer (20); compute = step - exposed
    assert (s0.comm_ns, s0.exposed_ns, s0.hidden_ns) == (59 * US, 58 * US, 1 * US)
    assert (s0.exposed_wait_ns, s0.exposed_transfer_ns, s0.compute_ns) == (38 * US, 20 * US, 42 * US)
    (s1,) = r1.steps
    assert (s1.comm_ns, s1.exposed_ns, s1.exposed_wait_ns) == (20 * US, 20 * US, 0)
    # the bucket: rank 0 waited 39 µs (21-60) of its span, then 20 µs of transfer
    (b0,) = r0.buckets
    assert (b0.name, b0.index, b0.elements) == ("gloo:all_reduce", 0, None)
    assert (b0.wait_ms, b0.transfer_ms, b0.exposed_ms) == pytest.approx((0.039, 0.020, 0.058))
    # the slow rank is 1, and why: its host's Python (51 µs against rank 0's 12)
    assert (r0.straggler_rank, r1.straggler_rank) == (1, None)
    assert c.slow_rank is not None and c.slow_rank.rank == 1
    assert c.slow_rank.figure == "host: interpreter"
    assert (c.slow_rank.value_ms_per_step, c.slow_rank.others_ms_per_step) == pytest.approx((0.051, 0.012))
    assert c.slow_rank.waited_on_ms_per_step == pytest.approx(0.038)


def test_a_gpu_collective_under_compute_is_hidden(tmp_path):
    # GIVEN one GPU: compute kernels 0-30 and 50-60, an NCCL all-reduce 20-45 (one rank: no wait)
    t = TraceBuilder()
    t.step(1, 0, 70)
    t.launch(0, 1, corr=1)
    t.kernel("gemm", 2, 28, corr=1)
    t.launch(1, 1, corr=2)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32", 20, 25, corr=2, stream=9)
    t.launch(2, 1, corr=3)
    t.kernel("gemm", 50, 10, corr=3)
    r = run(tmp_path, t)
    (rank,) = r.communication.ranks
    (s,) = rank.steps
    # THEN comm 25, hidden 10 (20-30), exposed 15 (30-45), compute 38 (2-30, 50-60); no wait (one rank)
    assert (s.comm_ns, s.hidden_ns, s.exposed_ns, s.compute_ns) == (25 * US, 10 * US, 15 * US, 38 * US)
    assert s.exposed_wait_ns == 0 and r.communication.slow_rank is None


def test_a_thread_that_resumed_long_before_a_collective_ended_did_not_wait():
    # GIVEN a thread busy 0-10 and 12-30 and 31-40: gaps 10-12, 30-31 and from 40; a collective 5-35
    busy = (np.array([0, 12, 31]) * US, np.array([10, 30, 40]) * US)
    spans = (np.array([5]) * US, np.array([35]) * US)
    # WHEN it most overlaps the gap 10-12, which ended 23 µs before it: THEN no wait within 5 µs
    ws, we = waits_on_thread(*busy, *spans, tolerance_ns=5 * US)
    assert ws.size == 0
    # and with a tolerance of 30 µs, it is that gap's wait
    ws, we = waits_on_thread(*busy, *spans, tolerance_ns=30 * US)
    assert (ws.tolist(), we.tolist()) == ([10 * US], [12 * US])


def test_the_straggler_made_fast_shortens_both_ranks(tmp_path):
    # GIVEN the gloo job (rank 1's 40 µs region `tracekit.slow_rank` before its forward)
    rp = Replayer.of(parse_paths(_paths(tmp_path, *gloo_job())))
    result, _ = whatif(rp.capture, WhatIfOptions(), replayer=rp, attribute=False)
    assert [d.predicted_step_ms * 1000 for d in result.devices] == [100.0, 100.0]
    # WHEN the region is removed: rank 1 issues at 18-20 and its gloo thread starts at 20; rank 0's
    # started at 21: both end at 21 + 20 = 41; rank 0 resumes 2 µs after (82 - 80), copies 8, ends 10
    # later: 61; rank 1 resumes 1 µs after, copies 9, ends 10 later: 61
    fast = WhatIfOptions(ops=[r"^tracekit\.slow_rank$=0"])
    result, _ = whatif(rp.capture, fast, replayer=rp, attribute=False)
    assert [d.predicted_step_ms * 1000 for d in result.devices] == [61.0, 61.0]
    # WHEN there is no communication: rank 0 no longer waits (its wait 22-80 takes nothing): 100 - 58;
    # rank 1's wait for its own transfer (60-80) goes too: 100 - 20
    result, _ = whatif(rp.capture, WhatIfOptions(comm=0), replayer=rp, attribute=False)
    assert [d.predicted_step_ms * 1000 for d in result.devices] == [42.0, 80.0]
    # WHEN the transfer takes half as long: both end at 60 + 10
    result, _ = whatif(rp.capture, WhatIfOptions(comm=0.5), replayer=rp, attribute=False)
    assert [d.predicted_step_ms * 1000 for d in result.devices] == [90.0, 90.0]


def test_the_h200_ddp_capture_names_rank_1_and_its_idle_python():
    # GIVEN the real 2-rank H200 DDP run, rank 1 sleeping 20 ms per step
    from tracekit.api import analyze as api_analyze

    r = api_analyze(ROOT / "fixtures" / "h200" / "ddp_slow_rank1", savings=False).report
    c = r.communication
    r0, r1 = c.ranks
    # THEN rank 0's exposed communication is mostly waiting for rank 1 (its sleep: 20 ms per step)
    assert 15.0 < r0.ms_per_step("exposed_wait_ns") < 22.0
    assert r1.ms_per_step("exposed_wait_ns") == 0.0
    assert c.slow_rank.rank == 1 and c.slow_rank.figure == "idle: interpreter"
    # the buckets carry their sizes (record_param_comms around the launch): a first bucket of 1 MiB of
    # fp32 (DDP's first bucket), then 64 MiB ones
    assert r0.buckets[0].elements == 2097664 and r0.buckets[1].elements == 16781312
    for rank in c.ranks:
        for s in rank.steps:
            assert 0 <= s.exposed_wait_ns <= s.exposed_ns <= s.comm_ns <= s.step_ns
            assert s.hidden_ns + s.exposed_ns == s.comm_ns


GLOO = ROOT / "fixtures" / "cpu_gloo"


def _report(name: str) -> Report:
    from tracekit.api import analyze as api_analyze

    return api_analyze(GLOO / name, savings=False).report


def test_the_cpu_gloo_capture_with_a_slow_rank():
    # GIVEN 2 CPU ranks of heavy_mlp under DDP (gloo), rank 1 sleeping 20 ms per step
    r = _report("ddp_slow_rank1")
    c = r.communication
    r0, r1 = c.ranks
    # THEN rank 0's step thread waits for rank 1 about as long as rank 1 sleeps, and the report says so
    assert 18.0 < r0.ms_per_step("exposed_wait_ns") < 23.0
    assert r1.ms_per_step("exposed_wait_ns") < 1.0
    assert c.slow_rank.rank == 1 and c.slow_rank.figure == "host: interpreter"
    assert c.slow_rank.value_ms_per_step - c.slow_rank.others_ms_per_step > 18.0
    # rank 0's host waits in the collective state, not in Python
    host0 = [h for h in r.host.steps if h.rank == 0]
    assert sum(h.breakdown_ns["collective"] for h in host0) > 10 * sum(
        h.breakdown_ns["interpreter"] for h in host0
    )
    # gloo's spans carry no sizes: the buckets say so rather than guess
    assert all(b.elements is None for b in r0.buckets)


@pytest.mark.parametrize("name", ["ddp", "fsdp", "fsdp_script"])
def test_a_cpu_gloo_job_without_a_straggler(name):
    # GIVEN DDP, FSDP2 (heavy_mlp's parallel=fsdp) and a user's own FSDP2 script on 2 CPU ranks
    c = _report(name).communication
    assert c is not None and len(c.ranks) == 2 and c.matched > 0
    # THEN a rank is slow only where its peer waited for it at least 5 % of the step: not in DDP's and
    # FSDP's runs; in the script's, rank 0 waited for rank 1 just over the bar (rank 1 waited < 1 ms)
    waited = {r.straggler_rank: r.ms_per_step("exposed_wait_ns") / r.ms_per_step("step_ns") for r in c.ranks}
    if name == "fsdp_script":
        assert c.slow_rank is not None and c.slow_rank.rank == 1 and 0.05 <= waited[1] < 0.06
        assert waited[0] < 0.01
    else:
        assert c.slow_rank is None and max(waited.values()) < 0.05
    for rank in c.ranks:
        assert rank.ms_per_step("comm_ns") > 0
        for s in rank.steps:
            assert 0 <= s.exposed_wait_ns <= s.exposed_ns <= s.comm_ns <= s.step_ns
            assert s.compute_ns + s.exposed_ns == s.step_ns


def test_fsdp_all_gathers_and_reduces_are_buckets_of_their_own():
    # GIVEN FSDP2 over 4 Linear layers (each sharded) THEN the buckets are all-gathers (forward and
    # backward) and all-reduces (gloo's reduce-scatter), each its own row
    buckets = _report("fsdp").communication.ranks[0].buckets
    names = {b.name for b in buckets}
    assert names == {"gloo:all_gather", "gloo:all_reduce"}


def test_the_communication_table_fits_an_80_column_terminal():
    # GIVEN the slow-rank capture's report rendered as text 80 columns wide
    import io

    from tracekit.render.sections import comm_sections
    from tracekit.render.text import make_console, print_sections

    out = io.StringIO()
    print_sections(make_console(out, 80, False), comm_sections(_report("ddp_slow_rank1")))
    lines = out.getvalue().splitlines()
    # THEN every column is there, the rank each waits on included (rich drops a column that does not fit)
    header = next(line for line in lines if "rank:dev" in line)
    assert header.split() == [
        "rank:dev",
        "step",
        "compute",
        "hidden",
        "exposed",
        "waiting",
        "transfer",
        "waits",
        "on",
    ]
    row0 = next(line for line in lines if line.split()[:1] == ["0:host"])
    assert row0.split()[-1] == "1"  # rank 0 waits on rank 1


@pytest.mark.parametrize("late", [0, 1])
def test_two_ranks_that_each_name_the_other_are_told_apart_by_their_waits(late):
    # GIVEN two CPU ranks each naming the other as its straggler (both waited at some collective), the
    # `late` rank's peer waiting 2 ms per 10 ms step for it, the late rank waiting 0.5 ms for the peer
    from types import SimpleNamespace

    from tracekit.analysis.comm import slow_rank
    from tracekit.analysis.model import CommRank, CommStep

    def rank(r: int, wait_ms: float) -> CommRank:
        w = int(wait_ms * 1e6)
        step = CommStep(
            step=1, step_ns=10_000_000, compute_ns=10_000_000 - w, comm_ns=w, hidden_ns=0, exposed_ns=w
        )
        return CommRank(rank=r, device=-1, steps=(replace(step, exposed_wait_ns=w),), straggler_rank=1 - r)

    ranks = [rank(late, 0.5), rank(1 - late, 2.0)]
    states = {"framework": 3_000_000, "interpreter": 1_000_000}
    host = [
        SimpleNamespace(rank=r, breakdown_ns={**states, "interpreter": 1_000_000 + 1_500_000 * (r == late)})
        for r in (0, 1)
    ]
    sr = slow_rank(sorted(ranks, key=lambda r: r.rank), host, [])
    # THEN the slow rank is the one waited for longest, whichever its number, and why
    assert sr.rank == late and sr.waited_on_ms_per_step == pytest.approx(2.0)
    assert sr.figure == "host: interpreter"


def test_a_slow_rank_above_the_others_in_no_figure_gets_no_reason():
    # GIVEN rank 0 waiting 2 ms of its 10 ms step for rank 1, whose host states are the same as rank 0's
    from types import SimpleNamespace

    from tracekit.analysis.comm import slow_rank
    from tracekit.analysis.model import CommRank, CommStep

    step = CommStep(
        step=1, step_ns=10_000_000, compute_ns=8_000_000, comm_ns=2_000_000, hidden_ns=0, exposed_ns=2_000_000
    )
    ranks = [
        CommRank(rank=0, device=-1, steps=(replace(step, exposed_wait_ns=2_000_000),), straggler_rank=1),
        CommRank(rank=1, device=-1, steps=(step,), straggler_rank=None),
    ]
    host = [
        SimpleNamespace(rank=r, breakdown_ns={"framework": 3_000_000, "interpreter": 1_000_000})
        for r in (0, 1)
    ]
    sr = slow_rank(ranks, host, [])
    # THEN rank 1 is slow, and no figure is named as why (not a state where both have 0.000)
    assert sr.rank == 1 and sr.waited_on_ms_per_step == pytest.approx(2.0)
    assert sr.figure == "" and sr.value_ms_per_step == sr.others_ms_per_step == 0.0
