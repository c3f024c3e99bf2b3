"""Where a server had nothing to do (tracekit.analysis.no_work, issue 37): tiny server timelines with
hand-computed answers (µs in the timelines, ns in the answers)."""

from __future__ import annotations

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.events import load_frames
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths

US = 1000


def server(requests=((0, 100), (3000, 3100), (7000, 7100)), after: int = 0) -> TraceBuilder:
    """Requests (annotation 'request': an op launching a kernel inside), nothing between them but, with
    `after`, an op of `after` µs right after each request (its post-processing)."""
    t = TraceBuilder()
    for i, (a, b) in enumerate(requests):
        t.annotation("request", a, b - a)
        t.op("aten::mm", a + 10, b - a - 30)
        t.launch(a + 12, 3, corr=i + 1)
        t.kernel("gemm", a + 20, b - a - 20, corr=i + 1)
        if after:
            t.op("aten::copy_", b + 5, after)
    return t


def frames(tmp_path, t: TraceBuilder):
    return load_frames(parse_paths([t.write(tmp_path / "t.json")]).table)


def test_between_requests_is_no_work_in_no_step(tmp_path):
    # GIVEN three requests [0,100) [3000,3100) [7000,7100) µs, each one's kernel to its end
    fr = frames(tmp_path, server())
    # THEN each step is its request; the 2.9 ms and 3.9 ms between them are no work, in no step
    assert fr.steps["ts"].tolist() == [0, 3000 * US, 7000 * US]
    assert fr.steps["end"].tolist() == [100 * US, 3100 * US, 7100 * US]
    assert fr.steps["cycle"].tolist() == [0, 1, 2]  # each request its own timeline
    assert list(zip(fr.no_work["ts"], fr.no_work["end"])) == [(100 * US, 3000 * US), (3100 * US, 7000 * US)]


def test_a_server_report_has_no_idle_cause_for_the_time_between_requests(tmp_path):
    cap = parse_paths([server().write(tmp_path / "t.json")])
    report = analyze(cap)
    check_invariants(report, cap)
    (d,) = report.devices
    # each step: the kernel runs [20,100) of [0,100): 20 µs idle before it, no more
    assert [sum(s.idle_ns.values()) for s in d.samples] == [20 * US] * 3
    (n,) = report.no_work
    assert (n.stretches, n.no_work_ns, n.median_ns) == (2, 6800 * US, 3400 * US)
    assert report.to_json()["no_work"][0]["no_work_ns"] == 6800 * US


def test_work_after_a_request_stays_in_its_step(tmp_path):
    # GIVEN 5 µs of post-processing after each request (the requests still hold 70 of its 75 µs of ops)
    fr = frames(tmp_path, server(after=5))
    # THEN the stretch starts after it
    assert fr.steps["end"].tolist()[:2] == [110 * US, 3110 * US]
    assert fr.no_work["ts"].tolist() == [110 * US, 3110 * US]


def test_short_stretches_are_the_loop_s_own_time(tmp_path):
    # GIVEN requests 0.5 ms apart (below NO_WORK_MIN_NS): steps from one start to the next, as always
    fr = frames(tmp_path, server(requests=((0, 100), (600, 700), (1200, 1300))))
    assert fr.steps["end"].tolist()[:2] == [600 * US, 1200 * US] and len(fr.no_work) == 0


def test_a_training_loop_with_profiler_steps_has_none(tmp_path):
    t = TraceBuilder()
    for i in range(3):
        t.step(i + 1, 3000 * i, 3000 * i + 3000)
        t.annotation("forward", 3000 * i + 10, 30)
        t.op("aten::mm", 3000 * i + 15, 20)
    assert len(frames(tmp_path, t).no_work) == 0


@pytest.mark.parametrize("inside", [False, True])
def test_annotations_that_do_not_hold_the_work_say_nothing(tmp_path, inside):
    # GIVEN 'zero_grad' annotations (short) and the forward's ops (long) outside them, 3 ms apart
    t = TraceBuilder()
    for i in range(3):
        t.annotation("Optimizer.zero_grad#SGD.zero_grad", 3000 * i, 5 if not inside else 900)
        t.op("aten::mm", 3000 * i + 10, 800)
    fr = frames(tmp_path, t)
    # THEN no stretch is no work when the ops lie outside the annotations; inside them, the 2 ms
    # between one step's work and the next are
    assert len(fr.no_work) == (2 if inside else 0)


def test_the_replay_keeps_requests_apart(tmp_path):
    import tracekit as tk

    w = tk.whatif(server().write(tmp_path / "t.json"))
    (d,) = w.result.devices
    assert len(d.steps) == 3 and abs(d.replay_error) < 1e-9
    assert d.observed_step_ms == pytest.approx(0.1)
