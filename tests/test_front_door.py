"""One front door per verb (tracekit.api): every command gives the same report of one capture, the
savings are a typed field of it, and the output flags do the same on every command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.clirun import run_main
from tracekit import api
from tracekit.analysis.model import Report
from tracekit.api import run
from tracekit.errors import TracekitError
from tracekit.scale.executor import LocalExecutor

ROOT = Path(__file__).resolve().parent.parent
SYNC = ROOT / "fixtures" / "h200_probe" / "sync.pt.trace.json.gz"
MLP = ROOT / "fixtures" / "h200_probe" / "mlp.pt.trace.json.gz"
H200 = ROOT / "fixtures" / "h200" / "sync_heavy"


@pytest.fixture(scope="module")
def sync_analysis():
    return api.analyze(SYNC)


def test_the_savings_are_a_typed_field_and_survive_the_json(sync_analysis):
    # GIVEN a one-rank capture analysed with the savings (the default)
    report = sync_analysis.report
    # THEN how they were found is the report's `savings`, not keys of its free-form parameters
    assert report.savings is not None and report.savings.computed
    assert report.savings.profiler_cost_us_per_event > 0
    assert not any(k.startswith("savings") for k in report.parameters)
    # and the JSON contract keeps its keys, read back into the same field
    doc = report.to_json()
    assert doc["parameters"]["savings_profiler_cost_source"] == report.savings.profiler_cost_source
    assert Report.from_json(json.loads(json.dumps(doc))).savings == report.savings


def test_a_job_analysed_by_ranks_says_its_savings_were_skipped(tmp_path, monkeypatch):
    # GIVEN a capture on disk with more ranks than are analysed whole (here: more than 0)
    capture = api.parse([SYNC], tmp_path / "c.parquet").output
    monkeypatch.setattr(run, "WHOLE_MAX_RANKS", 0)
    # WHEN it is analysed with the savings asked for, THEN it is analysed by ranks and says why it has none
    report = api.analyze(capture).report
    assert report.savings is not None and not report.savings.computed
    assert all(d.savings_ms_per_step is None for d in report.devices)
    assert "step time saved per cause: not computed" in api.analyze(capture).text()
    # without the savings asked for, nothing is said
    assert api.analyze(capture, savings=False).report.savings is None


def test_whole_or_rank_by_rank_is_one_rule_for_captures_and_trace_files(tmp_path, monkeypatch):
    """GIVEN the one rule (api.run.analyzed_whole) WHEN it is asked by hand THEN with the savings a job of
    up to WHOLE_MAX_RANKS ranks is whole, without them one rank on this machine only; AND a job given as
    trace files follows it as the same job given as a capture does."""

    class Remote:  # an executor elsewhere (Ray's stands in)
        workers = 4

        def map(self, fn, items):
            return map(fn, items)

    assert run.analyzed_whole(run.WHOLE_MAX_RANKS, True, None)
    assert not run.analyzed_whole(run.WHOLE_MAX_RANKS + 1, True, None)
    assert run.analyzed_whole(1, True, Remote())  # the savings need the whole job, wherever it runs
    assert run.analyzed_whole(1, False, None) and run.analyzed_whole(1, False, LocalExecutor(2))
    assert not run.analyzed_whole(1, False, Remote()) and not run.analyzed_whole(2, False, None)
    capture = api.parse([SYNC], tmp_path / "c.parquet").output
    monkeypatch.setattr(run, "WHOLE_MAX_RANKS", 0)
    for source in (capture, SYNC):
        report = api.analyze(source).report
        assert report.savings is not None and not report.savings.computed, source


def test_options_come_as_one_object_or_as_keywords_never_unknown_ones():
    assert (
        api.analyze(SYNC, savings=False).report == api.analyze(SYNC, api.AnalyzeOptions(savings=False)).report
    )
    with pytest.raises(TracekitError, match="unknown option saving"):
        api.analyze(SYNC, saving=False)
    with pytest.raises(TracekitError, match="either options or"):
        api.analyze(SYNC, api.AnalyzeOptions(), savings=False)


def test_the_tensorboard_report_is_the_one_analyze_prints(tmp_path):
    # GIVEN a run folder of a real H200 capture
    run = tmp_path / "sync_heavy"
    shutil.copytree(H200, run)
    # WHEN `tracekit tb` writes its event files
    from tracekit.export.tensorboard import TEXT_TAG, capture_of_run, read_events

    assert [done for _, done in api.tensorboard(tmp_path)] == ["wrote 1 event file"]
    # THEN its Markdown report is analyze's, savings columns included (it lacked them before the api)
    text = read_events(run)[1][TEXT_TAG]
    assert "saved if removed" in text
    assert text == api.analyze(capture_of_run(run)).markdown()


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", str(SYNC)],
        ["diff", str(MLP), str(SYNC)],
        ["whatif", str(SYNC), "--set", "sync=0"],
        ["info", str(SYNC)],
    ],
    ids=lambda c: c[0],
)
def test_the_output_flags_do_the_same_on_every_command(command, tmp_path, capsys):
    # --markdown to stdout and -o FILE.md write the same document
    code, markdown, _ = run_main([*command, "--markdown"], capsys)
    assert code == 0 and markdown.startswith("#")
    out = tmp_path / "out.md"
    code, stdout, err = run_main([*command, "-o", str(out)], capsys)
    assert code == 0 and stdout == "" and f"wrote {out}" in err
    assert out.read_text() == markdown
    # an existing file is kept without --force (one line, exit 2), replaced with it
    code, _, err = run_main([*command, "-o", str(out)], capsys)
    assert code == 2 and "pass --force" in err
    code, _, _ = run_main([*command, "-o", str(out), "--json", "--force"], capsys)
    assert code == 0 and json.loads(out.read_text())
    # both formats at once is one error, the same everywhere
    code, _, err = run_main([*command, "--json", "--markdown"], capsys)
    assert code == 2 and err.strip() == "tracekit: error: --json and --markdown both given; pick one"
    # --width pins the text's width
    code, text, _ = run_main([*command, "--width", "60"], capsys)
    assert code == 0 and max(len(line) for line in text.splitlines()) <= 60 or command[0] == "info"
