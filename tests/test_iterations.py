"""Steps of traces without ProfilerStep (tracekit.parse.iterations, issue 37): tiny timelines with
hand-computed answers (times in ns unless a TraceBuilder's µs), a property over random repeated blocks,
and end to end on CPU traces made without markers (fixtures/cpu_nomarkers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit as tk
from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.options import STEP, AnalyzeOptions
from tracekit.analysis.pipeline import analyze
from tracekit.compare.options import DiffOptions
from tracekit.errors import TracekitError
from tracekit.flags import flags_of
from tracekit.parse.iterations import ANNOTATION, MODULE, OP, Units, find
from tracekit.parse.parser import parse_paths
from tracekit.whatif.scenario import WhatIfOptions

ROOT = Path(__file__).resolve().parent.parent
NOMARKERS = ROOT / "fixtures" / "cpu_nomarkers"
US = 1000


def units(events: list[tuple]) -> Units:
    """(kind, name, ts, end[, tid]) -> Units on pid 1 (tid 1 unless given)."""
    names = sorted({e[1] for e in events})
    code = {n: i for i, n in enumerate(names)}
    return Units(
        pid=np.ones(len(events), np.int64),
        tid=np.array([e[4] if len(e) > 4 else 1 for e in events], np.int64),
        ts=np.array([e[2] for e in events], np.int64),
        end=np.array([e[3] for e in events], np.int64),
        kind=np.array([e[0] for e in events], np.int8),
        code=np.array([code[e[1]] for e in events], np.int64),
        names=names,
    )


def ops(names: str, start: int = 0, width: int = 10) -> list[tuple]:
    """Back-to-back top-level ops, one per letter of `names`, `width` ns each from `start`."""
    return [(OP, c, start + i * width, start + (i + 1) * width - 1) for i, c in enumerate(names)]


# -- the rules --------------------------------------------------------------------------------------------


def test_a_repeated_annotation_starts_each_step_at_its_earliest_marker():
    # GIVEN  |fetch|..ops..|opt.step| x4, one every 100 ns; the ops in between vary (data-dependent)
    ev = []
    for i in range(4):
        t = 100 * i
        ev += [(ANNOTATION, "fetch", t, t + 10), (OP, "aten::mm" if i % 2 else "aten::add", t + 20, t + 60)]
        ev += [(ANNOTATION, "opt.step", t + 70, t + 90)]
    # WHEN
    it = find(units(ev))
    # THEN four steps from each fetch; the last ends with the last unit of its median period (100 ns)
    assert it.rule == "annotation" and it.marker == "fetch"
    assert it.starts.tolist() == [0, 100, 200, 300]
    assert it.ends.tolist() == [100, 200, 300, 390]


def test_twenty_identical_forward_passes_are_twenty_steps():
    # GIVEN a set-up op, then 20 passes of 12 ops in which 'l' (a layer's op) repeats 4 times
    ev = ops("S")
    block = "eabllllhtzqr"  # e.g. embedding, add, 4 layer ops, head, ...: 'e' once per pass
    ev += ops(block * 20, start=1000)
    it = find(units(ev))
    assert it.rule == "op_sequence" and it.steps == 20 and it.units == 12
    assert it.marker == "e" and it.starts[0] == 1000 and np.all(np.diff(it.starts) == 120)


def test_identical_layers_inside_a_pass_are_not_steps():
    # GIVEN 4 passes of: embedding, 3 identical layers (a, b), head: the layers repeat 12 times
    it = find(units(ops("e" + "ab" * 3 + "h" + "e" + "ab" * 3 + "h" + ("e" + "ab" * 3 + "h") * 2)))
    # THEN the pass is the step, not the layer
    assert it.steps == 4 and it.units == 8


def test_a_different_first_window_is_a_step_unless_much_longer():
    # GIVEN a prefill with two extra ops, then 4 identical decode steps
    it = find(units(ops("axybc" + "abc" * 4)))
    assert it.steps == 5 and it.starts.tolist()[:2] == [0, 50]
    # GIVEN a first window more than twice as long as the others (set-up work inside it)
    it = find(units(ops("axyzwvbc" + "abc" * 4)))
    # THEN the set-up is in no step: the steps start after it, every one 3 ops long
    assert it.steps == 5 and it.starts[0] == 60 and np.all(np.diff(it.starts) == 30)


def test_a_trace_that_begins_inside_the_loop_starts_each_step_at_its_pass():
    # GIVEN 20 ResNet-like passes and nothing before them: conv, bn, relu (c, b, r) repeat inside a pass,
    # the max-pool 'm' is the first op that occurs once per pass
    it = find(units(ops("cbrmcbrcbrpfl" * 20)))
    # THEN every step is one whole pass from its first op, the last one too
    assert it.steps == 20 and it.units == 13 and it.marker == "c"
    assert it.starts[0] == 0 and np.all(np.diff(it.starts) == 130) and it.ends[-1] == 20 * 130 - 1


def test_the_loops_exit_after_the_last_pass_is_no_step():
    # GIVEN generate: set-up 's' and 'u', a prefill 'kkabcd', then 5 tokens of |u: append|zz: stopping
    # check|abcd: decode forward|, and after the last token's append only its stopping check
    it = find(units(ops("su" + "kkabcd" + "uzzabcd" * 5 + "uzz")))
    # THEN one step per forward: the prefill's and the 5 decodes'; the last 'uzz' (3 of 7 units) is none
    assert it.steps == 6 and it.marker == "u"
    assert it.starts.tolist() == [10 + 70 * i for i in range(6)] and it.ends[-1] == 430
    # GIVEN 4 steps |fetch|op|opt.step| and the epoch's last fetch (StopIteration) with nothing after it
    ev = []
    for i in range(5):
        t = 100 * i
        ev += [(ANNOTATION, "fetch", t, t + 10)]
        if i < 4:
            ev += [(OP, "aten::mm", t + 20, t + 60), (ANNOTATION, "opt.step", t + 70, t + 90)]
    it = find(units(ev))
    # THEN the last fetch is no step
    assert it.rule == "annotation" and it.steps == 4 and it.ends[-1] == 400
    # GIVEN 4 iterations whose marker follows the forward: |6 forward ops|zero_grad|backward 30..95|
    ev = []
    for i in range(4):
        t = 100 * i
        ev += [(OP, "aten::linear", t + 2 * j, t + 2 * j + 1) for j in range(6)]
        ev += [(ANNOTATION, "zero_grad", t + 20, t + 25), (OP, "backward", t + 30, t + 95)]
    it = find(units(ev))
    # THEN the last window, without a forward (2 of 8 units) but with most of a step's time, is a step
    assert it.rule == "annotation" and it.steps == 4 and it.ends[-1] == 395


def test_nothing_repeated_is_one_window_and_says_so():
    it = find(units(ops("abcdefgh")))
    assert it.rule == "none" and it.steps == 0
    assert "cannot tell" in it.says()
    # two repeats are not enough to call it a loop (MIN_REPEATS), nor three that differ
    assert find(units(ops("abab"))).rule == "none"
    assert find(units(ops("abcabdabe"))).rule == "none"


def test_modules_find_the_steps_when_ops_vary():
    # GIVEN with_stack: the outermost module per pass; its ops differ (data-dependent control flow)
    ev = []
    for i, inner in enumerate(["ab", "abb", "a", "abbb"]):
        t = 1000 * i
        ev += [(MODULE, "nn.Module: Net_0", t, t + 500)]
        ev += [(OP, c, t + 10 + 20 * j, t + 20 + 20 * j) for j, c in enumerate(inner)]
    it = find(units(ev))
    assert it.rule == "module" and it.marker == "nn.Module: Net_0" and it.steps == 4


def test_the_autograd_engine_thread_is_not_the_step_thread():
    # GIVEN the main thread: 3 passes of 2 ops; the engine thread (tid 2): many more ops
    ev = [(OP, c, t, t + 5, 1) for t, c in zip(range(0, 60, 10), "fgfgfg")]
    ev += [(OP, "autograd::engine::evaluate_function: MmBackward0", t, t + 2, 2) for t in range(0, 60, 3)]
    it = find(units(ev))
    assert (it.tid, it.steps) == (1, 3)


def test_a_window_never_spans_two_trace_files():
    # GIVEN two files (cycles): 3 passes at 0, 100, 200, then 3 at 10000, 10100, 10200
    ev = ops("abc", 0, 30) + ops("abc", 100, 30) + ops("abc", 200, 30)
    ev += ops("abc", 10000, 30) + ops("abc", 10100, 30) + ops("abc", 10200, 30)
    it = find(units(ev), breaks=[0, 10000])
    assert it.steps == 6
    assert it.ends.tolist() == [100, 200, 289, 10100, 10200, 10289]


def test_the_marker_names_the_step():
    # GIVEN 'fwd' record_functions, one nested inside another (a sub-module's): outermost only
    ev = [(ANNOTATION, "fwd", 0, 50), (ANNOTATION, "fwd.inner", 10, 20), (ANNOTATION, "fwd", 100, 150)]
    ev += [(ANNOTATION, "fwd", 200, 250), (OP, "aten::mm", 160, 190)]
    it = find(units(ev), re.compile(r"^fwd"))
    assert (it.rule, it.marker, it.starts.tolist(), it.ends.tolist()) == (
        "marker",
        "^fwd",
        [0, 100, 200],
        [100, 200, 250],
    )


def test_a_marker_that_matches_nothing_is_one_line_naming_what_repeats():
    ev = [(ANNOTATION, "Optimizer.step#SGD.step", t, t + 5) for t in (0, 10, 20)]
    with pytest.raises(TracekitError, match=r"--step 'nope' matches no .*Optimizer\.step#SGD\.step \(3\)"):
        find(units(ev), re.compile("nope"))


# -- a property: a block repeated k times is found k times (times its own inner period) ------------------


def _period(block: list[int]) -> int:
    """The smallest p dividing len(block) with block == block[:p] * (len/p)."""
    m = len(block)
    return next(p for p in range(1, m + 1) if m % p == 0 and block == block[:p] * (m // p))


@settings(max_examples=60, deadline=None)
@given(
    block=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    k=st.integers(3, 7),
    prefix=st.lists(st.integers(10, 12), max_size=3),
)
def test_a_repeated_block_is_found_at_its_period(block, k, prefix):
    seq = prefix + block * k
    it = find(units(ops("".join(chr(ord("a") + x) for x in seq))))
    p = _period(block)
    whole = k * len(block) // p
    assert it.rule == "op_sequence"
    # an anchor that is not a pass's first unit leaves the set-up's part of the first pass out; a last
    # window of under half a pass is then no step
    assert whole - 1 <= it.steps <= whole
    assert np.all(np.diff(it.starts) == 10 * p)  # every window is one period
    assert np.all(it.ends[:-1] == it.starts[1:]) and it.ends[-1] > it.starts[-1]
    if not prefix:  # the trace begins with the loop: every pass is a step, from its first unit
        assert it.steps == whole and it.starts[0] == 0


def test_a_pass_with_no_op_of_its_own_is_found_by_the_pair_where_passes_meet():
    # GIVEN 20 passes of Linear, ReLU, Linear, ReLU, Linear: no op occurs once per pass
    it = find(units(ops("lrlrl" * 20)))
    # THEN the pair (l, l) marks where a pass begins, and the first pass is found before it
    assert it.steps == 20 and it.starts[0] == 0 and it.units == 5


# -- through the parser and the analysis ----------------------------------------------------------------


def test_the_parser_stores_the_steps_found_and_the_rule(tmp_path):
    # GIVEN  main thread: 5 x |fetch 0..5|op 10..30|, 40 µs apart; a kernel from each op
    t = TraceBuilder()
    for i in range(5):
        base = 40 * i
        t.dataloader(base, 5)
        t.op("aten::mm", base + 10, 20)
        t.launch(base + 12, 3, corr=i + 1)
        t.kernel("gemm", base + 16, 30, corr=i + 1)
    path = t.write(tmp_path / "t.pt.trace.json")
    cap = parse_paths([path])
    rows = [r for r in cap.table.to_pylist() if r["kind"] == "step"]
    assert [r["ts_ns"] for r in rows] == [40 * i * US for i in range(5)]
    assert cap.meta["traces"][0]["step_rule"]["rule"] == "annotation"
    report = analyze(cap)
    check_invariants(report, cap)
    (rule,) = report.step_rules
    assert (rule.rule, rule.steps) == ("annotation", 5)
    # each kernel runs 16..46 µs into its 40 µs window: the device's period is the step, 40 µs
    d = report.devices[0]
    assert [s.dur_ns for s in d.samples][1:4] == [40 * US] * 3


@pytest.mark.parametrize(
    ("name", "steps", "rule"),
    [("forward20", 20, "op_sequence"), ("generate16", 16, "op_sequence"), ("once", 1, "none")],
)
def test_cpu_traces_without_markers(name, steps, rule, tmp_path):
    cap = parse_paths([NOMARKERS / f"{name}.pt.trace.json.gz"])
    report = analyze(cap)
    check_invariants(report, cap)
    (found,) = report.step_rules
    assert found.rule == rule
    assert len(report.host.steps) == steps
    doc = report.to_json()
    assert doc["step_rules"][0]["rule"] == rule
    json.dumps(doc)


# -- a CUDA graph capture is named, not read as a device waiting on its host ----------------------------


def test_a_graph_capture_is_named_with_its_recorded_launches(tmp_path):
    # GIVEN  host |BeginCapture 10..11|launch 20|launch 30|launch 40|EndCapture 50..51|Instantiate 60..80|
    #        device: one kernel before the capture (0..5), nothing during it; the step is [0, 100)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(1, 1, corr=1)
    t.kernel("before", 2, 3, corr=1)
    t.runtime("cudaStreamBeginCapture", 10, 1)
    for i, at in enumerate((20, 30, 40)):
        t.launch(at, 2, corr=10 + i)  # recorded: no kernel ever runs for them
    t.runtime("cudaStreamEndCapture", 50, 1)
    t.runtime("cudaGraphInstantiateWithFlags", 60, 20)
    cap = parse_paths([t.write(tmp_path / "t.json")])
    report = analyze(cap)
    check_invariants(report, cap)
    # THEN one capture span [10, 80) µs: 70 % of the step, 3 launches recorded
    (g,) = report.graph_captures
    assert (g.captures, g.capture_ns, g.launches, g.call) == (1, 70 * US, 3, "cudaStreamBeginCapture")
    assert g.share_of_steps == pytest.approx(0.7)
    assert [a.kind for a in report.advice] == ["graph_capture"]
    assert report.to_json()["graph_captures"][0]["launches"] == 3


def test_no_capture_no_capture_info(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(1, 1, corr=1)
    t.kernel("k", 2, 3, corr=1)
    report = analyze(parse_paths([t.write(tmp_path / "t.json")]))
    assert report.graph_captures == () and report.to_json()["graph_captures"] == []


# -- --step on the commands that read steps --------------------------------------------------------------

FORWARD20 = str(NOMARKERS / "forward20.pt.trace.json.gz")


@pytest.mark.parametrize("command", ["analyze", "whatif", "info"])
def test_step_names_the_marker_on_every_command(command, capsys):
    extra = ["--no-savings"] if command == "analyze" else []
    code, out, err = run_main([command, FORWARD20, "--step", "^aten::arange$", "--json", *extra], capsys)
    assert code == 0, err
    doc = json.loads(out)
    if command == "analyze":
        assert doc["step_rules"][0]["rule"] == "marker" and len(doc["host"]["steps"]) == 20
    elif command == "whatif":
        assert doc["devices"][0]["steps"] == 20
    else:
        assert len(doc["steps"]) == 20 and doc["traces"][0]["step_rule"]["rule"] == "marker"


def test_diff_with_a_step_marker(capsys):
    code, out, err = run_main(["diff", FORWARD20, FORWARD20, "--step", "^aten::arange$", "--json"], capsys)
    assert code == 0, err
    assert "step" in out


@pytest.mark.parametrize(
    ("regex", "says"),
    [
        ("nope", r"--step 'nope' matches no annotation, module or op name; names that repeat: aten::"),
        ("(", r"--step '\(' is not a regular expression"),
        ("", r"--step '': give a regex"),
    ],
)
def test_a_bad_step_is_one_line_and_exit_2(regex, says, capsys):
    code, out, err = run_main(["analyze", FORWARD20, "--step", regex, "--no-savings"], capsys)
    assert code == 2 and out == ""
    assert re.search(says, err) and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_stored_analysis_is_reused_only_with_the_same_steps(tmp_path, capsys):
    capture = tmp_path / "f.parquet"
    assert run_main(["parse", FORWARD20, "-o", str(capture)], capsys)[0] == 0
    assert (
        run_main(["analyze", str(capture), "--store", "--no-savings", "--step", "^aten::arange$"], capsys)[0]
        == 0
    )
    # diff reuses a stored analysis: not the --step one for a diff without --step
    report = tk.analyze(capture, reuse_stored=True, savings=False).report
    assert report.step_rules[0].rule == "op_sequence"
    report = tk.analyze(capture, reuse_stored=True, savings=False, step="^aten::arange$").report
    assert report.step_rules[0].rule == "marker"


def test_step_is_one_flag_that_every_command_reading_steps_takes(capsys):
    for cls in (AnalyzeOptions, DiffOptions, WhatIfOptions):
        assert [flag for f, flag in flags_of(cls) if f.name == "step"] == [STEP]
        with pytest.raises(TracekitError, match=r"--step '\(' is not a regular expression"):
            cls(step="(")
    for command in ("analyze", "whatif", "diff", "info", "tb", "annotate"):
        code, out, _ = run_main([command, "--help"], capsys)
        assert code == 0 and "--step" in out and "REGEX" in out, command
