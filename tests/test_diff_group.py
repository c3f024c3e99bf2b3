"""Pooling repeats of one configuration into one side of a diff (`tracekit diff A1,A2 B1,B2`)."""

from __future__ import annotations

import pytest
from diff_reports import cpu_report, gpu_report, manifest

from tracekit.diff import diff, step_values
from tracekit.diff_group import STEP_OFFSET, group_label, merge_reports
from tracekit.errors import NotComparableError

SLOW = [10.0, 10.2, 10.1, 9.9, 10.3, 10.0]
FAST = [9.0, 9.1, 9.2, 9.0, 9.1, 9.05]


def _run(dur, run, python="3.9.18", **kw):
    m = manifest(python, run=run)
    m["unprofiled_step_ms"] = [d * 0.9 for d in dur]
    return gpu_report(dur, manifest=m, op_us={"aten::linear": [20.0] * len(dur)}, **kw)


def test_group_label():
    assert group_label(["py3.9-1", "py3.9-2", "py3.9-3"]) == "py3.9 ×3"
    assert group_label(["a", "a"]) == "a ×2"
    assert group_label(["x", "y"]) == "x ×2"


def test_merged_steps_are_the_runs_steps_one_after_another():
    a1, a2 = _run(SLOW, "py3.9-1"), _run(FAST, "py3.9-2")
    merged = merge_reports([a1, a2])
    v = step_values(merged)
    assert len(v.steps) == 12 and v.steps[6] == STEP_OFFSET + 1
    assert list(v.dur_ns / 1e6) == pytest.approx(SLOW + FAST)
    assert list(v.unprofiled_step_ns / 1e6) == pytest.approx([d * 0.9 for d in SLOW + FAST])
    assert merged.capture["run"] == "py3.9 ×2"
    assert merged.capture["group"] == ["py3.9-1", "py3.9-2"]
    assert len(v.ops_per_call_ns["aten::linear"]) == 12


def test_pooled_repeats_against_themselves_change_nothing():
    a = merge_reports([_run(SLOW, "py3.9-1"), _run(FAST, "py3.9-2")])
    pair = diff([a, a]).pairs[0]
    assert all(f.estimate.shift == 0.0 and not f.significant for f in pair.figures + pair.ops)


def test_pooling_widens_the_interval_when_runs_disagree():
    # one run per side: the rank test sees 6 steps each, nothing else
    one = diff([_run(SLOW, "a"), _run([x * 0.95 for x in SLOW], "b", python="3.11.7")]).pairs[0]
    # two runs per side whose levels differ by 20 % from run to run: the same 5 % change is now noise
    a = merge_reports([_run(SLOW, "a-1"), _run([x * 1.2 for x in SLOW], "a-2")])
    b = merge_reports(
        [
            _run([x * 0.95 * 1.2 for x in SLOW], "b-1", python="3.11.7"),
            _run([x * 0.95 for x in SLOW], "b-2", python="3.11.7"),
        ]
    )
    two = diff([a, b]).pairs[0]

    def width(pair):
        ci = pair.figure("step_time").estimate.log_ratio_ci
        return ci.high - ci.low

    assert one.figure("step_time").significant
    assert width(two) > 2 * width(one)


def test_only_repeats_of_one_configuration_are_pooled():
    with pytest.raises(
        NotComparableError, match="not repeats of one configuration.*Python: 3.9.18 vs 3.11.7"
    ):
        merge_reports([_run(SLOW, "a"), _run(SLOW, "b", python="3.11.7")])
    with pytest.raises(NotComparableError, match="device activity"):
        merge_reports([gpu_report(SLOW), cpu_report(SLOW)])
