"""Pooling repeats of one configuration into one side of a diff (`tracekit diff A1,A2 B1,B2`)."""

from __future__ import annotations

import pytest
from diff_reports import cpu_report, gpu_report, manifest

from tracekit.compare.diff import diff, step_values
from tracekit.compare.group import STEP_OFFSET, group_label, merge_reports
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


def _group(levels, name, python="3.9.18"):
    return merge_reports([_run([x * lv for x in SLOW], f"{name}-{i}", python) for i, lv in enumerate(levels)])


def test_pooled_sides_are_compared_run_against_run():
    # one run per side: 6 steps each and a 5 % shift is significant...
    one = diff([_run(SLOW, "a"), _run([x * 0.95 for x in SLOW], "b", python="3.11.7")]).pairs[0]
    assert one.figure("step_time").significant
    # ...but when the runs of one configuration differ by 20 % among themselves, the same 5 % is noise
    a = _group([1.0, 1.2, 1.1, 0.9], "a")
    b = _group([0.95 * lv for lv in (1.2, 1.0, 0.9, 1.1)], "b", python="3.11.7")
    step = diff([a, b]).pairs[0].figure("step_time")
    assert step.estimate.method == "median over runs"
    assert (step.estimate.n_a, step.estimate.n_b) == (4, 4)
    assert not step.significant and step.verdict == "no significant change"


def test_every_run_of_b_beyond_every_run_of_a_is_significant_with_four_runs_each():
    a = _group([1.0, 1.02, 0.98, 1.01], "a")
    b = _group([0.9, 0.91, 0.89, 0.92], "b", python="3.11.7")
    pair = diff([a, b]).pairs[0]
    for key in ("step_time", "total_time", "throughput", "gpu_util_mean", "op:aten::linear"):
        assert pair.figure(key).estimate.method == "median over runs", key
    assert pair.figure("step_time").significant and pair.figure("step_time").direction == "lower"
    assert pair.figure("unprofiled_step_time").significant


def test_two_runs_each_are_too_few_runs():
    a = _group([1.0, 1.02], "a")
    b = _group([0.5, 0.51], "b", python="3.11.7")
    step = diff([a, b]).pairs[0].figure("step_time")
    assert not step.significant and step.verdict == "too few runs"


def test_only_repeats_of_one_configuration_are_pooled():
    with pytest.raises(
        NotComparableError, match="not repeats of one configuration.*Python: 3.9.18 vs 3.11.7"
    ):
        merge_reports([_run(SLOW, "a"), _run(SLOW, "b", python="3.11.7")])
    with pytest.raises(NotComparableError, match="device activity"):
        merge_reports([gpu_report(SLOW), cpu_report(SLOW)])


def test_pooled_json_matches_the_schema():
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema")

    a = _group([1.0, 1.02, 0.98, 1.01], "a")
    b = _group([0.9, 0.91, 0.89, 0.92], "b", python="3.11.7")
    doc = json.loads(json.dumps(diff([a, b]).to_json()))
    schema = json.loads((Path(__file__).parent / "golden" / "diff.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["captures"][0]["label"] == "a ×4" and doc["captures"][0]["steps"] == 24
    methods = {f["method"] for f in doc["pairs"][0]["figures"]}
    assert "median over runs" in methods
