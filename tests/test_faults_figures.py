"""The fault table of docs/QUIRKS.md, figures (issue #41): a trace that would give wrong figures with
exit 0, or a traceback. An impossible duration is an outlier left out and named, never a figure;
Chrome's B/E duration events are paired, never dropped; a step without a duration is refused; damaged
metadata is counted, not a traceback; a prediction the capture cannot support says so."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.clirun import run_main
from tests.test_faults_user import one_line_error
from tests.tracebuilder import TraceBuilder
from tracekit.parse import begin_end


def four_steps(props=None) -> TraceBuilder:
    """GIVEN steps of 100 µs, each: aten::mm [10, 30), its launch [12, 17), gemm [30, 70) on the GPU."""
    t = TraceBuilder(device_properties=props if props is not None else [{"id": 0, "name": "GPU"}])
    for i in range(4):
        s = i * 100
        t.step(i + 1, s, s + 100)
        t.op("aten::mm", s + 10, 20)
        t.launch(s + 12, 5, corr=i + 1)
        t.kernel("gemm", s + 30, 40, corr=i + 1)
    return t


def _write(tmp_path: Path, doc: dict, name: str = "t.pt.trace.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _events(doc: dict, **match) -> list[dict]:
    return [e for e in doc["traceEvents"] if all(e.get(k) == v for k, v in match.items())]


def _report(tmp_path: Path, doc: dict, capsys, *extra: str) -> tuple[dict, str]:
    code, out, err = run_main(["analyze", str(_write(tmp_path, doc)), "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(out), err


# --- an impossible duration is an outlier, left out and named ----------------------------------------


@pytest.mark.parametrize("what", ["step", "kernel", "op"])
def test_an_impossible_duration_is_left_out_and_named(tmp_path, capsys, what):
    """One corrupted `dur` of an hour in a trace of 0.4 ms: a ProfilerStep gave "interpreter
    1,199,997.765 ms/step, 100 %", a kernel steps of 0.000 ms while a warning said the figures stay
    right. GIVEN the four steps above with one event lasting an hour
    THEN that event is named in a warning and left out: every remaining step is 0.1 ms, and the
    figures are those of the trace without it."""
    doc = four_steps().build()
    pick = {"step": dict(cat="user_annotation"), "kernel": dict(cat="kernel"), "op": dict(cat="cpu_op")}[what]
    victim = _events(doc, **pick)[1]
    victim["dur"] = 3600e6
    report, err = _report(tmp_path, doc, capsys, "--check")
    assert "1 event with an impossible time" in err and f"({victim['cat']}), 1.0 h long" in err
    assert any("impossible time" in w for w in report["capture"]["warnings"])
    dev = report["devices"][0]
    assert dev["step_ms"]["max"] == pytest.approx(0.1)
    assert dev["steps"] == (3 if what == "step" else 4)
    busy = sum(s["busy_ns"] for s in dev["samples"])
    assert busy == (3 if what == "kernel" else 4) * 40_000 - (40_000 if what == "step" else 0)
    code, out, err = run_main(["whatif", str(tmp_path / "t.pt.trace.json"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["devices"][0]["observed_step_ms"] == pytest.approx(0.1)


@pytest.mark.parametrize("what", ["op", "kernel"])
def test_an_impossible_start_is_left_out_and_named(tmp_path, capsys, what):
    """One corrupted `ts` (an op at 0: 53 years before the rest) made a trace without steps one step of
    53 years ("interpreter 1,682,725,898,144 ms/step"), and whatif an IndexError."""
    t = four_steps()
    doc = t.build()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 1_682_725_899_000_000  # epoch µs, as Kineto writes them
    victim = _events(doc, cat="cpu_op" if what == "op" else "kernel")[2]
    victim["ts"] = 0
    report, err = _report(tmp_path, doc, capsys)
    assert f"1 event with an impossible time (most: {victim['name']} ({victim['cat']}), starting" in err
    assert report["devices"][0]["step_ms"]["max"] < 1.0  # the trace's 0.37 ms, not 53 years
    code, _, err = run_main(["whatif", str(tmp_path / "t.pt.trace.json"), "--python-speedup", "0.5"], capsys)
    assert code == 0, err


def test_a_long_last_step_with_its_work_is_not_impossible(tmp_path, capsys):
    """A real long step (work recorded until its end) is a figure, not an outlier: the rule looks at
    when the rank's events start, not at how long a step is."""
    t = four_steps()
    t.step(5, 400, 60_000_400)  # a 60 s step
    t.op("aten::save", 59_000_000, 1_000_000)
    report, err = _report(tmp_path, t.build(), capsys)
    assert "impossible" not in err
    assert report["devices"][0]["step_ms"]["max"] == pytest.approx(60_000.0)


# --- steps without a duration ------------------------------------------------------------------------


@pytest.mark.parametrize("dur", [0, None, "x", 1e300])
def test_step_spans_without_a_duration_are_refused(tmp_path, capsys, dur):
    """Zero-length ProfilerStep spans beside their kernels said "0 steps … CPU-only capture", exit 0;
    so did every `dur` missing, a string or 1e300."""
    doc = four_steps().build()
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            e.pop("dur") if dur is None else e.update(dur=dur)
    code, _, err = run_main(["analyze", str(_write(tmp_path, doc))], capsys)
    one_line_error(code, err, "4 of its 4 step spans (ProfilerStep#1 first) have no duration")


# --- device activities of length 0 ---------------------------------------------------------------


def test_kernels_of_length_zero_are_a_warning_not_a_traceback(tmp_path, capsys):
    """Every kernel with `dur` 0 (integer-µs Kineto with sub-µs kernels): `ValueError: zero-size
    array` (analysis/partial.py). Now: busy 0, idle = the step, and a warning that the utilisation is
    understated."""
    doc = four_steps().build()
    for e in _events(doc, cat="kernel"):
        e["dur"] = 0
    report, err = _report(tmp_path, doc, capsys, "--check")
    assert "4 of 4 device activities last 0 µs" in err
    sample = report["devices"][0]["samples"][0]
    assert (sample["dur_ns"], sample["busy_ns"], sum(sample["idle_ns"].values())) == (100_000, 0, 100_000)
    for command in (["whatif"], ["diff", str(tmp_path / "t.pt.trace.json")]):
        code, _, err = run_main([command[0], str(tmp_path / "t.pt.trace.json"), *command[1:]], capsys)
        assert code == 0, err


# --- deviceProperties of the wrong shape -------------------------------------------------------------


@pytest.mark.parametrize("props", ["H100", ["H100"], [7, {"id": 0, "name": "GPU"}], {"id": 0}])
def test_device_properties_of_the_wrong_shape_are_counted(tmp_path, capsys, props):
    """`deviceProperties` as "H100" or ["H100"] was an AttributeError (analysis/merge.py)."""
    doc = four_steps(props=props).build()
    for command in ("analyze", "whatif", "info"):
        code, out, err = run_main([command, str(_write(tmp_path, doc))], capsys)
        assert code == 0, err
        assert "deviceProperties entries that are not objects" in err + out
    report, _ = _report(tmp_path, doc, capsys)
    assert report["capture"].get("device") == ("GPU" if isinstance(props, list) and len(props) == 2 else None)


# --- Chrome B/E duration events ------------------------------------------------------------------------


def _as_begin_end(doc: dict) -> dict:
    """The trace with every host span written as a B and an E event (Chromium's tracing writes so)."""
    events = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op", "cuda_runtime"):
            b = {k: v for k, v in e.items() if k != "dur"}
            events += [
                {**b, "ph": "B"},
                {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]},
            ]
        else:
            events.append(e)
    return {**doc, "traceEvents": events}


def test_begin_end_events_give_the_report_of_complete_events(tmp_path, capsys):
    """B/E events were dropped silently: one step, everything "interpreter". Paired per thread into
    complete events, the report is the one of the same trace written with X events."""
    doc = four_steps().build()
    want, _ = _report(tmp_path, doc, capsys)
    got, err = _report(tmp_path, _as_begin_end(doc), capsys)
    assert "warning" not in err
    for r in (want, got):
        r.pop("capture")
    assert got == want
    assert got["devices"][0]["steps"] == 4


def test_begin_end_nest_like_a_stack_and_strays_are_counted(tmp_path, capsys):
    """An E closes the latest B still open on its thread; a B never closed and an E with nothing open
    are skipped and counted."""
    evs = [
        {"ph": "E", "pid": 1, "tid": 1, "ts": 0},  # nothing open
        {"ph": "B", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "B", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2, "ts": 25},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 30},  # closes inner
        {"ph": "B", "cat": "cpu_op", "name": "inner2", "pid": 1, "tid": 1, "ts": 40},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 50},  # closes inner2
        {"ph": "E", "pid": 1, "tid": 2, "ts": 55},  # closes other thread
        {"ph": "E", "pid": 1, "tid": 1, "ts": 60},  # closes outer
        {"ph": "B", "cat": "cpu_op", "name": "cut", "pid": 1, "tid": 1, "ts": 70},  # never closed
    ]
    path = _write(tmp_path, {"traceEvents": evs})
    from tracekit.parse.parser import parse_paths

    with pytest.warns(Warning, match="1 B event never closed by an E, 1 E event without an open B"):
        cap = parse_paths([path])
    ev = cap.table.filter(pa.compute.equal(cap.table["kind"], "event")).to_pylist()
    spans = sorted((e["name"], e["ph"], e["ts_ns"] // 1000, e["dur_ns"] // 1000) for e in ev)
    assert spans == [
        ("inner", "X", 20, 10),
        ("inner2", "X", 40, 10),
        ("other thread", "X", 25, 30),
        ("outer", "X", 10, 50),
    ]


def test_pairing_keeps_the_other_rows_as_they_are():
    table = pa.table({"ph": ["X", "B", "E"], "pid": [1, 1, 1], "tid": [1, 1, 1], "ts_ns": [0, 5, 9],
                      "dur_ns": [3, 0, 0]})  # fmt: skip
    table = table.set_column(0, "ph", table["ph"].dictionary_encode())
    out, skipped = begin_end.pair(table)
    assert skipped == {}
    assert out.to_pylist() == [
        {"ph": "X", "pid": 1, "tid": 1, "ts_ns": 0, "dur_ns": 3},
        {"ph": "X", "pid": 1, "tid": 1, "ts_ns": 5, "dur_ns": 4},
    ]


# --- a prediction the capture cannot support says so --------------------------------------------------


def test_loader_workers_on_a_capture_that_never_timed_its_fetches_says_it_cannot_tell(tmp_path, capsys):
    """`whatif --loader-workers 8` on a trace predicted "+0.0 %" with no note."""
    path = _write(tmp_path, four_steps().build())
    code, out, err = run_main(["whatif", str(path), "--loader-workers", "8", "--json"], capsys)
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("--loader-workers 8: cannot tell: this capture never timed") for n in notes)
    code, out, err = run_main(["whatif", str(path), "--loader-workers", "8"], capsys)
    assert "cannot tell" in out


def test_loader_workers_on_a_capture_that_timed_its_fetches_has_no_such_note(tmp_path):
    from tests.test_whatif_loader import LOADER_BOUND, _replayer
    from tracekit.whatif.predict import whatif
    from tracekit.whatif.scenario import WhatIfOptions

    rp = _replayer(tmp_path, LOADER_BOUND)
    result, _ = whatif(rp.capture, WhatIfOptions(loader_workers=6), replayer=rp, attribute=False)
    assert not any("cannot tell" in n for n in result.notes)
    no_workers = {**LOADER_BOUND, "loader": {"dataloader": False}}
    rp = _replayer(tmp_path, no_workers)
    result, _ = whatif(rp.capture, WhatIfOptions(loader_workers=6), replayer=rp, attribute=False)
    assert any("not a DataLoader with a known worker count" in n for n in result.notes)
