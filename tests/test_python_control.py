"""Comparing Python versions on a noisy host: the machine-speed control in the diff (in the trace and from
the calibrations), the build note, `diff --by python`, and the calibrated interpreter factors of
`whatif --python-from` / `--python-speedup` (hand-computed)."""

from __future__ import annotations

import json
import math

import pytest
from diff_reports import cpu_report, manifest

from tracekit.compare.comparable import build_difference
from tracekit.compare.control import KEY_INTERPRETER_NORMALISED, KEY_OP_CONTROL, calibration_values
from tracekit.compare.diff import diff
from tracekit.compare.group import _natural, find_runs, group_runs, merge_reports
from tracekit.errors import NotComparableError
from tracekit.whatif.python import from_manifests, from_speedup
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions

DUR = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0]


def _cal(loop=40.0, builtin=20.0, call=2000.0, aten=15000.0, scale=1.0):
    figs = {"python_loop": loop, "builtin_call": builtin, "torch_call": call, "aten_cpu": aten}
    doc = {"figures": {k: {"ns": v * scale * 1.1, "min_ns": v * scale, "n": 10} for k, v in figs.items()}}
    return {"version": 1, "before": doc, "after": doc}


def _report(python, interp_ms, op_us, cal=None, run=None):
    """A CPU capture: host interpreter time per step, the rest framework; one op at `op_us` per call."""
    host = {"framework": [d - i for d, i in zip(DUR, interp_ms)]}
    m = manifest(python, run=run or f"py{python}")
    if cal is not None:
        m["calibration"] = cal
    return cpu_report(DUR, host, manifest=m, op_us={"aten::add": op_us})


def test_a_drift_larger_than_the_effect_is_said_plainly():
    # GIVEN B's interpreter time 10 % lower, but every aten op 30 % slower (the machine drifted)
    a = _report("3.10.13", [4.0] * 6, [10.0, 10.1, 9.9, 10.0, 10.05, 9.95])
    b = _report("3.11.7", [3.6] * 6, [13.0, 13.1, 12.9, 13.0, 13.05, 12.95])
    pair = diff([a, b]).pairs[0]
    control = pair.figure(KEY_OP_CONTROL)
    assert control.change == pytest.approx(0.30, abs=0.01) and control.significant
    # THEN normalised by the control, interpreter time fell by 1 - 0.9/1.3 = 31 %
    norm = pair.figure(KEY_INTERPRETER_NORMALISED)
    assert norm.change == pytest.approx(0.9 / 1.3 - 1, abs=0.01)
    assert "moved +30.0% [+28.9%, +31.2%] from A to B" in pair.control_notes[0]
    assert "drift is larger than the change in interpreter time (−10.0%)" in pair.control_notes[1]
    assert "normalised by the control, interpreter time changed −30.8%" in pair.control_notes[1]


def test_a_steady_machine_leaves_the_effect_standing():
    a = _report("3.10.13", [4.0] * 6, [10.0, 10.1, 9.9, 10.0, 10.05, 9.95])
    b = _report("3.11.7", [3.0] * 6, [10.0, 10.05, 9.95, 10.1, 9.9, 10.0])
    notes = diff([a, b]).pairs[0].control_notes
    assert "smaller than the change in interpreter time (−25.0%), and its interval stays below" in notes[1]


def test_a_control_that_varies_as_much_as_the_effect_is_said_too():
    # GIVEN aten ops that vary ±15 % from step to step on both sides, and interpreter time 10 % lower
    noisy = [10.0, 11.5, 8.5, 10.0, 11.5, 8.5]
    a = _report("3.10.13", [4.0] * 6, noisy)
    b = _report("3.11.7", [3.6] * 6, noisy[::-1])
    notes = diff([a, b]).pairs[0].control_notes
    assert "the machine's speed varied as much as the change in interpreter time (−10.0%)" in notes[1]


def test_no_control_between_runs_of_one_python_without_calibration():
    a, b = _report("3.11.7", [4.0] * 6, [10.0] * 6), _report("3.11.7", [4.0] * 6, [10.0] * 6, run="x")
    pair = diff([a, b]).pairs[0]
    assert pair.control_notes == () and not [f for f in pair.figures if f.key.startswith("control.")]


def test_calibration_drift_between_sides_and_per_run_values_of_a_pooled_side():
    a = [
        _report("3.10.13", [4.0] * 6, [10.0] * 6, _cal(scale=s), f"py3.10-{i}")
        for i, s in enumerate((1, 1.02))
    ]
    b = [
        _report("3.11.7", [3.0] * 6, [10.0] * 6, _cal(loop=28.0, scale=s), f"py3.11-{i}")
        for i, s in enumerate((1.2, 1.22))
    ]
    ma, mb = merge_reports(a), merge_reports(b)
    # each run: the mean of its before and after medians (ns = 1.1 x min here)
    assert list(calibration_values(ma.capture, "aten_cpu")) == pytest.approx([16500.0, 16830.0])
    pair = diff([ma, mb]).pairs[0]
    aten = pair.figure("control.aten_cpu")
    assert aten.a == pytest.approx((16.5 + 16.83) / 2) and aten.change == pytest.approx(0.2, abs=0.01)
    assert pair.figure("control.python_loop").change == pytest.approx(28 * 1.2 / 40 - 1, abs=0.01)
    assert aten.estimate.method == "median over runs"


def test_a_build_difference_is_a_note():
    a = manifest(
        "3.12.1", python__build={"pgo": False, "lto": False, "shared_libpython": True, "compiler": "GCC 12"}
    )
    b = manifest(
        "3.12.3", python__build={"pgo": None, "lto": None, "shared_libpython": True, "compiler": "GCC 13"}
    )
    d = build_difference(a, b)
    assert d.role.value == "note"
    assert d.describe().startswith(
        "the interpreters were built differently (PGO no vs cannot tell; LTO no vs"
    )
    assert "compiler GCC 12 vs GCC 13" in d.describe()
    assert build_difference(a, a) is None and build_difference(a, manifest("3.9")) is None
    pair = diff([cpu_report(DUR, manifest=a), cpu_report(DUR, manifest=b)]).pairs[0]
    assert pair.comparability.comparable and any(n.field == "python.build" for n in pair.comparability.notes)


def test_runs_grouped_by_python_in_natural_order(tmp_path):
    for run, py in (
        ("py3.9-1", "3.9.18"),
        ("py3.10-1", "3.10.13"),
        ("py3.10-2", "3.10.13"),
        ("py3.9-2", "3.9.18"),
    ):
        (tmp_path / run).mkdir()
        (tmp_path / run / "manifest.json").write_text(json.dumps(manifest(py, run=run)))
    (tmp_path / "notes").mkdir()  # a folder without a manifest is not a run
    runs = find_runs(tmp_path)
    groups = group_runs(runs, "python")
    assert [(v, [p.rsplit("/", 1)[1] for p in paths]) for v, paths in groups] == [
        ("3.9.18", ["py3.9-1", "py3.9-2"]),
        ("3.10.13", ["py3.10-1", "py3.10-2"]),
    ]
    assert [v for v, _ in group_runs(runs, "batch_size")] == ["256"]  # a knob name
    assert _natural("3.10.1") > _natural("3.9.18")
    with pytest.raises(NotComparableError, match=r"--by no\.such: .* has no no\.such in its manifest"):
        group_runs(runs, "no.such")


def _m(cal):
    return {"calibration": cal}


def test_python_from_scales_interpreter_time_by_the_torch_call_ratio_less_the_machine_drift():
    # GIVEN B: torch op from Python 1800 vs 2000 ns, bytecode loop 28 vs 40 ns, on a machine 10 % slower
    a = _m(_cal())
    b = _m(_cal(loop=28.0, call=1800.0, scale=1.1))  # measured 10 % slower everywhere
    model = from_manifests(a, [b], "py3.11")
    assert model.figures["machine_ratio"] == pytest.approx(1.1)
    assert model.interpreter_factor == pytest.approx(0.9)  # 1800/2000
    assert model.bound_factor == pytest.approx(0.7)  # 28/40
    assert WhatIfOptions(python=model.to_json()).cause_factor("interpreter") == pytest.approx(0.9)
    assert WhatIfOptions(python=model.to_json()).cause_factor("framework") == 1.0
    with pytest.raises(ScenarioError, match=r"--python-from py3\.11: py3\.11's manifest has no calibration"):
        from_manifests(a, [{}], "py3.11")


def test_python_speedup_speeds_up_only_the_bytecode_part_of_the_host_path():
    # GIVEN 20 of the 2000 ns of a torch op called from Python are bytecode (a call of a C builtin)
    model = from_speedup(_m(_cal()), 1.45)
    p = 20 / 2000
    assert model.interpreter_factor == pytest.approx(1 - p * (1 - 1 / 1.45))
    assert model.bound_factor == pytest.approx(1 / 1.45)
    # WITHOUT a calibration only the bound is known, and it is used
    plain = from_speedup({}, 2.0)
    assert plain.interpreter_factor == 0.5 and not plain.calibrated
    assert math.isclose(WhatIfOptions(python=plain.to_json()).cause_factor("interpreter"), 0.5)


def test_interpreter_figures_are_divided_by_the_control_of_the_same_calibration():
    # GIVEN a run whose host switched to a 1.65x slower state between its before and after calibrations
    fast, slow = _cal()["before"], _cal(scale=1.65)["before"]
    m = _m({"version": 1, "before": fast, "after": slow})
    # THEN raw figures differ by 1.65x, and the loop in units of the aten control does not
    assert list(calibration_values(m, "python_loop", stat="min_ns")) == pytest.approx([40.0, 66.0])
    assert list(calibration_values(m, "python_loop", stat="min_ns", per="aten_cpu")) == pytest.approx(
        [40 / 15000] * 2
    )
    # AND against a steady run of the same interpreter the calibrated factor is 1
    assert from_manifests(_m(_cal()), [m], "B").interpreter_factor == pytest.approx(1.0)
