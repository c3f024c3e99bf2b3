"""What torch-tb-profiler 0.4.3 shows for torch 2.x traces (docs/tensorboard.md states these facts).

Measured through the plugin's own HTTP API on the H200 probe traces, served by `tracekit view`. If a
plugin release fixes one of them, its test fails and docs/tensorboard.md must be updated with it.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import torch_tb_profiler

from tests.test_tensorboard import _get, make_logdir, start_view, stop_view, wait_for
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import load_capture

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "h200_probe"
STATIC = Path(torch_tb_profiler.__file__).parent / "static"


@pytest.fixture(scope="module")
def overview(tmp_path_factory):
    logdir = make_logdir(tmp_path_factory.mktemp("out"), ("dataloader",))
    proc, url = start_view(logdir)
    try:
        assert wait_for(
            lambda: _get(url + "data/plugin/pytorch_profiler/runs")["runs"] == ["probe/dataloader"]
        )
        q = urllib.parse.urlencode(
            {"run": "probe/dataloader", "worker": "h200.dataloader", "span": "default"}
        )
        yield _get(url + f"data/plugin/pytorch_profiler/overview?{q}")
    finally:
        stop_view(proc)


def _column(doc: dict, name: str) -> list[float]:
    names = [c.get("name") for c in doc["steps"]["columns"]]
    i = names.index(name)
    return [row[i] for row in doc["steps"]["rows"]]


def test_plugin_counts_every_step_twice(overview):
    steps = [row[0] for row in overview["steps"]["rows"]]
    report = analyze(load_capture(PROBE / "dataloader.pt.trace.json.gz"))
    ours = [str(s.step) for s in report.devices[0].samples]
    assert steps == [s for s in ours for _ in (0, 1)]  # 2, 2, 3, 3, 4, 4


def test_plugin_reports_zero_dataloader_and_runtime_time(overview):
    assert set(_column(overview, "DataLoader")) == {0}
    assert set(_column(overview, "Runtime")) == {0}
    # while tracekit finds the host in DataLoader.__next__ for most of each step
    report = analyze(load_capture(PROBE / "dataloader.pt.trace.json.gz"))
    assert report.devices[0].idle_ms_per_step["dataloader"] > 10


def test_plugin_pages_need_the_internet():
    index = (STATIC / "index.html").read_text(encoding="utf-8")
    # every view (Overview, Operator, Kernel, Trace) waits for Google Charts before it draws
    assert "https://www.gstatic.com/charts/loader.js" in index
    assert 'google.charts.load("current"' in index
    # the trace view imports catapult through the HTML-imports polyfill from a CDN
    embedding = (STATIC / "trace_embedding.html").read_text(encoding="utf-8")
    assert "https://cdnjs.cloudflare.com/ajax/libs/webcomponentsjs/" in embedding
