"""Where a server had nothing to do (tracekit.analysis.no_work, issue 37): tiny server timelines with
hand-computed answers (µs in the timelines, ns in the answers)."""

from __future__ import annotations

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.events import load_frames
from tracekit.analysis.no_work import no_work_spans
from tracekit.parse.parser import parse_paths

US = 1000


def server(requests=((0, 100), (300, 400), (700, 800)), outside_op: bool = False) -> TraceBuilder:
    """Requests (annotation 'request', an op and a kernel inside), nothing between them."""
    t = TraceBuilder()
    for i, (a, b) in enumerate(requests):
        t.annotation("request", a, b - a)
        t.op("aten::mm", a + 10, b - a - 30)
        t.launch(a + 12, 3, corr=i + 1)
        t.kernel("gemm", a + 20, b - a - 20, corr=i + 1)
    if outside_op:
        t.op("aten::add", 150, 20)  # work outside the requests (scheduling on the host)
    return t


def spans(tmp_path, t: TraceBuilder) -> list[tuple[int, int]]:
    fr = load_frames(parse_paths([t.write(tmp_path / "t.json")]).table)
    got = no_work_spans(fr.host, fr.steps, fr.step_rules)
    return list(zip(got["ts"].tolist(), got["end"].tolist()))


def test_between_requests_is_no_work(tmp_path):
    # GIVEN three requests [0,100) [300,400) [700,800) µs: steps from each to the next (the last: to 800)
    # THEN the thread had no work in [100,300) and [400,700)
    assert spans(tmp_path, server()) == [(100 * US, 300 * US), (400 * US, 700 * US)]


def test_a_training_loop_with_profiler_steps_has_none(tmp_path):
    t = TraceBuilder()
    for i in range(3):
        t.step(i + 1, 100 * i, 100 * i + 100)
        t.annotation("forward", 100 * i + 10, 30)
        t.op("aten::mm", 100 * i + 15, 20)
    assert spans(tmp_path, t) == []


def test_annotations_that_do_not_hold_the_work_say_nothing(tmp_path):
    # GIVEN 'zero_grad' annotations (short) and the forward's ops outside them: the ops are work too
    t = TraceBuilder()
    for i in range(3):
        t.annotation("Optimizer.zero_grad#SGD.zero_grad", 100 * i, 5)
        t.op("aten::mm", 100 * i + 10, 80)
    assert spans(tmp_path, t) == []
