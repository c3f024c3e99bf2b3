"""diff.py and comparable.py on Reports built from per-step values: the algebra (diff(A, A) = 0,
diff(A, B) = −diff(B, A)), the verdicts, and what makes captures not comparable."""

from __future__ import annotations

import math

import pytest
from diff_reports import cpu_report, gpu_report, manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis.model import CAUSES, HostReport, Report
from tracekit.compare.diff import diff, diff_pair, step_values
from tracekit.errors import NotComparableError

# -- strategies -------------------------------------------------------------------------------------------


@st.composite
def reports(draw, cpu: bool = False, steps=None):
    n = draw(st.integers(1, 8)) if steps is None else steps
    dur = draw(st.lists(st.floats(1.0, 100.0), min_size=n, max_size=n))
    fracs = {
        c: draw(st.lists(st.floats(0.0, 0.1), min_size=n, max_size=n))
        for c in (CAUSES if not cpu else ("framework", "dataloader"))
    }
    parts = {c: [f * d for f, d in zip(v, dur)] for c, v in fracs.items()}
    ops = {
        name: draw(st.lists(st.floats(1.0, 500.0), min_size=n, max_size=n))
        for name in ("aten::linear", "aten::relu", "aten::sum")
    }
    if cpu:
        return cpu_report(dur, parts, op_us=ops)
    return gpu_report(dur, parts, op_us=ops, peak_memory_bytes=draw(st.integers(1, 2**34)))


def _all(pair):
    return pair.figures + pair.ops


# -- algebra ----------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.one_of(reports(), reports(cpu=True)))
def test_diff_with_itself_is_zero_everywhere_and_never_significant(a):
    pair = diff([a, a]).pairs[0]
    assert pair.comparability.comparable
    for f in _all(pair):
        assert f.a == f.b, f.key
        assert f.estimate is not None, f.key
        assert f.estimate.shift == 0.0, f.key
        assert f.estimate.log_ratio in (None, 0.0), f.key
        assert not f.significant, f.key
        assert f.verdict in (
            "no significant change",
            "too few steps",
            "no interval (one value)",
        ), (f.key, f.verdict)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_diff_is_exactly_antisymmetric(data):
    cpu = data.draw(st.booleans())
    a, b = data.draw(reports(cpu=cpu)), data.draw(reports(cpu=cpu))
    ab = diff_pair(a, b)
    ba = diff_pair(b, a)
    assert [f.key for f in ab.figures] == [f.key for f in ba.figures]
    assert [f.key for f in ab.ops] == [f.key for f in ba.ops]
    for fab, fba in zip(_all(ab), _all(ba)):
        assert (fab.a, fab.b) == (fba.b, fba.a)
        if fab.estimate is None:
            assert fba.estimate is None
            continue
        assert fba.estimate == fab.estimate.reversed(), fab.key
        assert fab.significant == fba.significant
        if fab.direction:
            assert {fab.direction, fba.direction} == {"higher", "lower"}


# -- verdicts ---------------------------------------------------------------------------------------------

FAST = [9.0, 9.1, 9.2, 9.0, 9.1, 9.05]
SLOW = [10.0, 10.2, 10.1, 9.9, 10.3, 10.0]


def test_a_real_speedup_is_significant_and_better():
    a = gpu_report(SLOW, manifest=manifest("3.9.18"))
    b = gpu_report(FAST, manifest=manifest("3.11.7"))
    pair = diff([a, b]).pairs[0]
    step = pair.figure("step_time")
    assert step.significant and step.direction == "lower" and step.improved
    assert step.verdict == "lower (better)"
    assert step.change == pytest.approx(9.075 / 10.05 - 1, abs=0.01)
    low, high = step.change_ci
    assert low < step.change < high < 0
    thr = pair.figure("throughput")
    assert thr.direction == "higher" and thr.improved
    # throughput per step is samples / step time: its log ratio is exactly the step time's, negated
    assert thr.estimate.log_ratio == pytest.approx(-step.estimate.log_ratio, abs=1e-12)


def test_noise_is_no_significant_change():
    a = gpu_report([10.0, 10.3, 9.8, 10.1, 10.2, 9.9])
    b = gpu_report([10.1, 9.9, 10.2, 10.0, 9.8, 10.3])
    step = diff([a, b]).pairs[0].figure("step_time")
    assert not step.significant
    assert step.verdict == "no significant change"
    assert step.estimate.shift_ci.low < 0 < step.estimate.shift_ci.high


def test_three_steps_each_cannot_show_a_change():
    step = diff([gpu_report([10.0, 10.1, 10.2]), gpu_report([20.0, 20.1, 20.2])]).pairs[0].figure("step_time")
    assert not step.significant
    assert step.verdict == "too few steps"


def test_idle_cause_that_appears_is_a_shift_without_ratio():
    a = gpu_report(SLOW)
    b = gpu_report(SLOW, {"dataloader": [2.0, 2.1, 2.2, 2.0, 1.9, 2.0]})
    pair = diff([a, b]).pairs[0]
    f = pair.figure("idle.dataloader")
    assert f.a == 0.0 and f.b == pytest.approx(2.0, abs=0.05)
    assert f.change is None  # 0 → 2 ms has no ratio
    assert f.significant and f.verdict == "higher (worse)"
    util = pair.figure("gpu_util_mean")
    assert util.significant and util.direction == "lower"


def test_op_time_per_call_lists_the_largest_significant_change_first():
    same = [20.0, 21.0, 20.5, 20.2, 20.8, 20.1]
    a = gpu_report(SLOW, op_us={"aten::linear": same, "aten::relu": same, "aten::mm": same})
    b = gpu_report(
        SLOW,
        op_us={
            "aten::linear": [x * 0.7 for x in same],
            "aten::relu": [20.3, 20.9, 20.4, 20.6, 20.0, 21.0],
            "aten::mm": [x * 0.9 for x in same],
        },
    )
    ops = diff([a, b]).pairs[0].ops
    assert [o.label for o in ops] == ["aten::linear", "aten::mm", "aten::relu"]
    assert ops[0].significant and ops[0].change == pytest.approx(-0.3, abs=0.01)
    assert not ops[2].significant


def test_ops_below_the_share_threshold_are_not_listed():
    a = gpu_report(SLOW, op_us={"aten::tiny": [0.1] * 6})  # 10 calls x 0.1 µs per 10 ms step
    b = gpu_report(SLOW, op_us={"aten::tiny": [0.2] * 6})
    assert diff([a, b]).pairs[0].ops == ()


def test_three_captures_each_against_the_first():
    a, b, c = gpu_report(SLOW), gpu_report(FAST), gpu_report(SLOW)
    result = diff([a, b, c], ["a", "b", "c"])
    assert [(p.a.label, p.b.label) for p in result.pairs] == [("a", "b"), ("a", "c")]
    assert [c.label for c in result.compositions] == ["a", "b", "c"]


def test_composition_sums_to_the_mean_step():
    r = gpu_report(SLOW, {"sync": [1.0] * 6, "launch": [0.5] * 6})
    comp = diff([r, r]).compositions[0]
    assert comp.kind == "device"
    assert comp.total_ms == pytest.approx(sum(SLOW) / 6)
    assert dict(comp.parts)["sync"] == pytest.approx(1.0)


def test_cpu_only_captures_compare_host_states():
    a = cpu_report(SLOW, {"framework": [4.0] * 6})
    b = cpu_report(FAST, {"framework": [4.0, 4.1, 3.9, 4.0, 4.0, 4.05]})
    pair = diff([a, b]).pairs[0]
    keys = {f.key for f in pair.figures}
    assert "host.framework" in keys and "gpu_util_mean" not in keys and "idle.sync" not in keys
    assert not pair.figure("host.framework").significant
    assert pair.figure("host.interpreter").direction == "lower"


# -- errors -----------------------------------------------------------------------------------------------


def test_one_capture_is_an_error():
    with pytest.raises(NotComparableError, match="at least two"):
        diff([gpu_report(SLOW)])


def test_a_capture_without_steps_is_an_error():
    empty = Report(capture={"workload": "x"}, devices=(), host=HostReport())
    with pytest.raises(NotComparableError, match="no steps"):
        step_values(empty)


def test_bad_confidence_is_an_error():
    with pytest.raises(NotComparableError, match="confidence"):
        diff([gpu_report(SLOW), gpu_report(SLOW)], confidence=1.5)


# -- comparability ----------------------------------------------------------------------------------------


def test_python_version_is_what_is_compared_not_a_warning():
    c = diff_pair(
        gpu_report(SLOW, manifest=manifest("3.9.18")), gpu_report(SLOW, manifest=manifest("3.11.7"))
    )
    comp = c.comparability
    assert comp.comparable and not comp.blocking
    assert [d.label for d in comp.compared] == ["Python"]
    assert comp.summary() == "comparable (Python: 3.9.18 vs 3.11.7)"


@pytest.mark.parametrize(
    "change,label",
    [
        ({"knobs__num_workers": 4}, "knob num_workers: 0 vs 4"),
        ({"torch__version": "2.9.0"}, "torch: 2.8.0+cu128 vs 2.9.0"),
        ({"schedule__active": 5}, "schedule active: 3 vs 5"),
        ({"workload": "dataloader_train"}, "workload: heavy_mlp vs dataloader_train"),
        ({"device__name": "NVIDIA A10"}, "device: x86_64 vs NVIDIA A10"),
    ],
)
def test_differences_that_make_captures_not_comparable(change, label):
    a = gpu_report(SLOW, manifest=manifest())
    b = gpu_report(SLOW, manifest=manifest(**change))
    comp = diff_pair(a, b).comparability
    assert not comp.comparable
    assert comp.summary() == f"NOT comparable: {label}"


def test_host_name_is_a_note():
    comp = diff_pair(
        gpu_report(SLOW, manifest=manifest()), gpu_report(SLOW, manifest=manifest(host__name="other"))
    ).comparability
    assert comp.comparable and [d.label for d in comp.notes] == ["host"]


def test_without_manifests_different_op_mix_is_not_comparable():
    a = gpu_report(SLOW, op_us={"aten::linear": [20.0] * 6, "aten::relu": [5.0] * 6})
    b = gpu_report(SLOW, op_us={"aten::item": [20.0] * 6, "aten::relu": [5.0] * 6})
    comp = diff_pair(a, b).comparability
    assert not comp.comparable
    assert "overlap 33%" in comp.summary()  # relu 10 shared of 30 calls
    assert comp.unchecked and "no capture manifest in A and B" in comp.unchecked[0]


def test_gpu_against_cpu_only_is_not_comparable_and_keeps_common_figures():
    pair = diff_pair(gpu_report(SLOW), cpu_report(SLOW))
    assert not pair.comparability.comparable
    assert "device activity: GPU vs CPU only" in pair.comparability.summary()
    util = pair.figure("gpu_util_mean")
    assert util.b is None and util.estimate is None and util.verdict == "not in B"
    assert pair.figure("step_time").estimate is not None


def test_relative_change_display_is_derived_from_the_log_ratio():
    pair = diff_pair(gpu_report(SLOW), gpu_report([x * 1.25 for x in SLOW]))
    f = pair.figure("step_time")
    assert f.change == pytest.approx(0.25)
    assert f.estimate.log_ratio == pytest.approx(math.log(1.25))
    back = diff_pair(gpu_report([x * 1.25 for x in SLOW]), gpu_report(SLOW)).figure("step_time")
    assert back.change == pytest.approx(-0.2)  # +25 % one way is −20 % the other; the log ratio negates


def test_several_ranks_step_time_is_the_slowest_rank_and_idle_the_mean():
    from dataclasses import replace

    from tracekit.analysis.model import DeviceReport

    r0 = gpu_report([10.0, 10.0, 10.0, 10.0], {"sync": [1.0] * 4})
    r1 = gpu_report([12.0, 12.0, 12.0, 12.0], {"sync": [3.0] * 4})
    dev1 = r1.devices[0]
    dev1 = DeviceReport(
        rank=1,
        device=0,
        samples=tuple(replace(s, rank=1, collective_wait_ns=2_000_000) for s in dev1.samples),
        name=dev1.name,
    )
    both = Report(capture={}, devices=(r0.devices[0], dev1), host=r0.host)
    v = step_values(both)
    assert list(v.dur_ns) == [12e6] * 4
    assert list(v.idle_ns["sync"]) == [2e6] * 4
    assert list(v.collective_wait_ns) == [1e6] * 4
    pair = diff([both, both]).pairs[0]
    assert pair.figure("collective_wait").a == pytest.approx(1.0)
    assert pair.comparability.comparable
    # one rank against two: not comparable, and said so
    comp = diff_pair(r0, both).comparability
    assert not comp.comparable and "ranks: 1 vs 2" in comp.summary()


def test_what_the_comparison_varies_on_purpose_is_compared_not_blocking():
    a = gpu_report(SLOW, manifest=manifest())
    b = gpu_report(SLOW, manifest=manifest(knobs__num_workers=4, torch__version="2.9.0"))
    assert not diff_pair(a, b).comparability.comparable
    comp = diff_pair(a, b, compared=("num_workers",)).comparability
    assert not comp.comparable and comp.summary() == "NOT comparable: torch: 2.8.0+cu128 vs 2.9.0"
    comp = diff_pair(a, b, compared=("num_workers", "torch.version")).comparability
    assert comp.comparable
    assert comp.summary() == "comparable (torch: 2.8.0+cu128 vs 2.9.0; knob num_workers: 0 vs 4)"


def test_a_knob_added_later_and_left_at_its_default_is_a_note_not_a_blocker():
    # A: made before the tf32 knob existed; B: made after, tf32 at its default (not in knobs_set)
    older = manifest()
    newer = manifest(knobs__tf32=False)
    comp = diff_pair(gpu_report(SLOW, manifest=older), gpu_report(SLOW, manifest=newer)).comparability
    assert comp.comparable and [d.label for d in comp.notes] == ["knob tf32"]
    # the same knob set on purpose (in knobs_set) is a real difference
    chosen = manifest(knobs__tf32=True)
    chosen["knobs_set"] = {"tf32": "true"}
    comp = diff_pair(gpu_report(SLOW, manifest=older), gpu_report(SLOW, manifest=chosen)).comparability
    assert not comp.comparable and comp.summary() == "NOT comparable: knob tf32: (none) vs True"
