"""The savings `tracekit analyze` shows beside each cause (issue 11, item 6): the step time saved if that
cause alone were removed, from the replay, on hand-computed timelines (µs as the trace builder takes them),
and what the report, its JSON and the notebook API carry."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.test_whatif import op_with_launch, sync_trace
from tests.tracebuilder import TraceBuilder
from tracekit.analysis.model import Report
from tracekit.api import analyze
from tracekit.parse.parser import parse_paths
from tracekit.whatif.predict import Replayer
from tracekit.whatif.savings import cause_savings

SCHEMA = json.loads((Path(__file__).parent.parent / "tracekit" / "render" / "report.schema.json").read_text())


def capture(tmp_path: Path, t: TraceBuilder):
    return parse_paths([t.write(tmp_path / "t.pt.trace.json")])


def test_each_cause_removed_alone(tmp_path):
    # GIVEN  CPU  interp [0,10) |- aten::add [10,30) -| (launch [15,20) inside)  interp [30,100)
    #        GPU                          [k1 25,45)
    s = cause_savings(Replayer.of(capture(tmp_path, op_with_launch())))
    profiled = s.per_device[(0, 0)]["profiled"]
    # THEN interpreter=0: the step ends with the kernel at 35 (saves 65); framework=0: the op's own 15 µs;
    # launch=0: the launch call's 5 µs; nothing waits, nothing fetches
    assert profiled == pytest.approx(
        {
            "interpreter": 0.065,
            "framework": 0.015,
            "launch": 0.005,
            "runtime": 0.0,
            "sync": 0.0,
            "dataloader": 0.0,
        }
    )


def test_savings_need_not_match_idle_shares(tmp_path):
    # GIVEN  CPU  interp [0,10) launch [10,15) interp [15,20) cudaDeviceSynchronize [20,125) interp [125,200)
    #        GPU                                [k 20,120)
    a = analyze(capture(tmp_path, sync_trace()))
    d = a.report.devices[0]
    # the device idles [0,20) (interpreter 10, launch 5 + issued 5) and [120,200) (a sync drain: 80)
    assert d.idle_ms_per_step == pytest.approx(
        {
            "queued": 0,
            "dataloader": 0,
            "sync": 0.080,
            "collective": 0,
            "runtime": 0,
            "launch": 0.010,
            "framework": 0,
            "interpreter": 0.010,
        }
    )
    saved = d.savings_ms_per_step["profiled"]
    # WHEN sync=0: the call returns after its own 3 µs (23), Python ends the window at 98, the kernel
    # at 120: THEN 80 saved, the sync idle
    assert saved["sync"] == pytest.approx(0.080)
    # WHEN interpreter=0: launch [0,5), kernel [10,110), the sync starts at 5 and returns 5 µs after the
    # kernel (115), nothing after it: THEN 85 saved, far more than the interpreter's 10 µs of idle
    assert saved["interpreter"] == pytest.approx(0.085)
    # WHEN launch=0: everything 5 µs earlier: THEN 5 saved, half the launch idle
    assert saved["launch"] == pytest.approx(0.005)
    assert saved["framework"] == saved["dataloader"] == saved["runtime"] == 0.0
    causes = a.causes().set_index("cause")
    assert causes.loc["interpreter", "saved_ms_per_step"] == pytest.approx(0.085)
    assert causes["saved_ms_per_step"].isna().loc[["busy", "queued"]].all()


def test_json_carries_savings_and_reads_back(tmp_path):
    a = analyze(capture(tmp_path, op_with_launch()))
    doc = json.loads(json.dumps(a.to_json()))
    jsonschema.validate(doc, SCHEMA)
    dev = doc["devices"][0]
    assert set(dev["savings_ms_per_step"]) == {"profiled", "unprofiled"}
    assert dev["savings_ms_per_step"]["profiled"]["interpreter"] == pytest.approx(0.065)
    assert doc["parameters"]["savings_profiler_cost_source"] == "default"
    assert Report.from_json(doc).devices[0].savings_ms_per_step == dev["savings_ms_per_step"]


def test_no_savings_leaves_the_report_as_the_analysis_made_it(tmp_path):
    a = analyze(capture(tmp_path, op_with_launch()), savings=False)
    assert a.report.devices[0].savings_ms_per_step is None
    assert "saved if removed" not in a.text()
    assert a.to_json()["devices"][0]["savings_ms_per_step"] is None


def test_an_untrusted_replay_shows_no_savings(tmp_path):
    # GIVEN a kernel that starts 65 µs after its launch with nothing in the trace to say why: the
    # replay drops that wait, and misses the observed step (the device work ends it) by far
    t = TraceBuilder()
    t.step(1, 0, 30)
    t.op("aten::add", 5, 15)
    t.launch(10, 5, corr=1)
    t.kernel("k1", 80, 15, corr=1)
    a = analyze(capture(tmp_path, t))
    assert a.report.devices[0].savings_ms_per_step is None
    text = a.text()
    assert "not shown" in text and "2 %" in text


@pytest.mark.parametrize("name", ["sync_heavy", "ddp_slow_rank1", "dataloader_slow"])
def test_the_graph_from_the_analysis_frames_is_the_graph(name):
    """`analyze` builds the graph from its own frames and host threads, after attributing with them:
    the same graph as `whatif` builds from a fresh load."""
    import numpy as np

    from tracekit.analysis.pipeline import analyze as attribute
    from tracekit.analysis.pipeline import prepare
    from tracekit.api import load

    cap = load(Path(__file__).parent.parent / "fixtures" / "h200" / name)
    ctx = prepare(cap, 2000)
    attribute(cap, context=ctx)
    shared, fresh = Replayer.of(cap, ctx.fr, ctx.threads).graph, Replayer.of(cap).graph
    for field in ("obs", "src", "dst", "w", "kind", "state", "cost", "lb", "order", "host_start_node"):
        assert np.array_equal(getattr(shared, field), getattr(fresh, field)), field


@pytest.mark.parametrize("name", ["sync_heavy", "ddp_slow_rank1"])
def test_a_capture_analysed_in_process_from_its_columns_alone(tmp_path, name):
    """GIVEN a real capture WHEN `tracekit analyze` analyses it in this process (reading only the
    analysis' and the replay's columns, letting the table go once the frames are built) THEN the
    report, savings included, is the one of the whole table analysed with every column kept."""
    from tracekit.api import analyze
    from tracekit.api.options import AnalyzeOptions
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_capture
    from tracekit.parse.parser import parse_to_file

    capture = tmp_path / "c.parquet"
    parse_to_file([Path(__file__).resolve().parent.parent / "fixtures" / "h200" / name], capture)
    assert set(loaded_columns(True)) < set(read_capture(capture).table.column_names)
    lean = analyze(capture, AnalyzeOptions(savings=True))
    full = analyze(capture, AnalyzeOptions(savings=True, check=True))  # check keeps the whole table
    assert lean.capture.table.num_rows < full.capture.table.num_rows
    loaded = read_capture(capture)
    rows = loaded.table.num_rows
    assert analyze(loaded, AnalyzeOptions(savings=True)).report.to_json() == lean.report.to_json()
    assert loaded.table.num_rows == rows  # a capture the caller loaded is the caller's: untouched
    assert any(d.savings_ms_per_step for d in lean.report.devices)
    unchecked = {k: v for k, v in full.report.to_json().items() if k != "checked"}
    assert {k: v for k, v in lean.report.to_json().items() if k != "checked"} == unchecked


def test_the_sync_records_are_all_the_graph_reads_of_the_table():
    """GIVEN a real trace with "Stream Wait Event" records (HTA's AlexNet sample) WHEN the table is cut
    down to its sync records THEN the graph's stream waits are the same, and only cuda_sync rows stay."""
    import pyarrow as pa

    from tracekit.whatif.graph import recorded_stream_waits, sync_records

    table = parse_paths(
        [
            Path(__file__).resolve().parent.parent
            / "fixtures"
            / "hta"
            / "benchmark_result_2869224_1695835535_trace.json.gz"
        ]
    ).table
    kept = sync_records(table)
    waits = recorded_stream_waits(table)
    assert len(waits) > 0 and 0 < kept.num_rows < table.num_rows
    assert set(kept["cat"].cast(pa.string()).to_pylist()) == {"cuda_sync"}
    assert recorded_stream_waits(kept).equals(waits)
    assert sync_records(table.slice(0, 0)).num_rows == 0


@pytest.mark.parametrize("name", ["sync_heavy", "ddp_slow_rank1", "dataloader_slow"])
def test_replays_batched_in_one_pass_equal_each_replay(name):
    """GIVEN a real capture's graph WHEN the savings' scenarios (each cause removed, with and without a
    profiler cost, sync=0 dropping waits) are replayed a few per pass THEN every node time equals that
    scenario's own replay; AND the savings equal those of one replay per scenario."""
    import numpy as np

    from tracekit.analysis.causes import SCALED_CAUSES
    from tracekit.analysis.steps import median_ns
    from tracekit.api import load
    from tracekit.whatif.replay import REPLAY_BATCH, replay, replay_many, weights
    from tracekit.whatif.scenario import WhatIfOptions

    rp = Replayer.of(load(Path(__file__).parent.parent / "fixtures" / "h200" / name))
    af = rp.check(WhatIfOptions())
    scenarios = [WhatIfOptions()] + [WhatIfOptions(set={c: 0.0}) for c in SCALED_CAUSES]
    ws = [weights(rp.graph, sc, cost, af) for sc in scenarios for cost in (0.0, 7300.0)]
    assert len(ws) > REPLAY_BATCH  # several passes, the last one partial
    for w, rep in zip(ws, replay_many(rp.graph, ws)):
        assert np.array_equal(rep, replay(rp.graph, w))
    s = cause_savings(rp, unprofiled_step_ms=None)
    for key, by_label in s.per_device.items():
        for label, cost_us in (("profiled", 0.0), ("unprofiled", s.profiler_cost_us_per_event)):
            base = rp.steps.times(replay(rp.graph, weights(rp.graph, WhatIfOptions(), cost_us * 1000.0, af)))
            for cause in SCALED_CAUSES:
                sc = WhatIfOptions(set={cause: 0.0})
                pred = rp.steps.times(replay(rp.graph, weights(rp.graph, sc, cost_us * 1000.0, af)))
                i = pred.keys.index(key)
                # the savings are differences of median steps (tracekit.analysis.steps.median_ns)
                one_by_one = (median_ns(base.dur[i]) - median_ns(pred.dur[i])) / 1e6
                assert by_label[label][cause] == pytest.approx(one_by_one, abs=1e-9), (key, label, cause)


@pytest.mark.parametrize("name", ["sync_heavy", "dataloader_slow"])
def test_the_unchanged_replay_made_in_the_savings_passes_is_the_unchanged_replay(name):
    """GIVEN a capture WHEN the savings make the unchanged replay in one of their passes
    (`Replayer.of(unchanged=False)`, as `analyze` builds it) THEN their figures and the replay's
    self-check equal those of a Replayer that made it on its own; AND a Replayer that nobody gave it
    makes it on first use."""
    import numpy as np

    from tracekit.api import load

    cap = load(Path(__file__).parent.parent / "fixtures" / "h200" / name)
    eager = Replayer.of(cap)
    deferred = Replayer.of(cap, unchanged=False)
    assert deferred.unchanged is None
    assert cause_savings(deferred) == cause_savings(eager)
    assert deferred.unchanged is not None
    for a, b in zip(deferred.replayed.dur, eager.replayed.dur):
        assert np.array_equal(a, b)
    lazy = Replayer.of(cap, unchanged=False)
    for a, b in zip(lazy.replayed.dur, eager.replayed.dur):
        assert np.array_equal(a, b)
