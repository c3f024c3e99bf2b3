"""The diff's outputs: golden files for the terminal table (width pinned), JSON and Markdown, each read
back by its consumer (JSON against its schema, Markdown as a table, the PNG as an image).

Regenerate the golden files after an intended change with
``TRACEKIT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_diff_render.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from diff_reports import cpu_report, gpu_report, manifest

from tracekit.compare.diff import diff
from tracekit.render.diff import MarkdownRenderer, PlotRenderer, TerminalRenderer
from tracekit.render.json import JsonRenderer

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRACEKIT_UPDATE_GOLDEN") == "1"

SLOW = [10.0, 10.2, 10.1, 9.9, 10.3, 10.0]
FAST = [9.0, 9.1, 9.2, 9.0, 9.1, 9.05]
LINEAR = [20.0, 21.0, 20.5, 20.2, 20.8, 20.1]


def _result():
    """py3.9 against a faster py3.11 (less sync idle, a DataLoader stall appears, linear dispatch
    cheaper) and against a rerun of itself (noise only)."""
    a = gpu_report(
        SLOW,
        {"sync": [1.0, 1.1, 1.0, 0.9, 1.0, 1.05], "launch": [0.2] * 6},
        manifest=manifest("3.9.18", run="py3.9"),
        op_us={"aten::linear": LINEAR, "aten::relu": [5.0, 5.1, 5.2, 5.0, 4.9, 5.1]},
    )
    b = gpu_report(
        FAST,
        {"sync": [0.5, 0.6, 0.55, 0.5, 0.45, 0.5], "dataloader": [0.3, 0.2, 0.25, 0.3, 0.3, 0.2]},
        manifest=manifest("3.11.7", run="py3.11"),
        op_us={"aten::linear": [x * 0.8 for x in LINEAR], "aten::relu": [5.1, 5.0, 4.9, 5.2, 5.0, 5.0]},
    )
    c = gpu_report(
        [10.1, 10.0, 10.2, 10.3, 9.9, 10.1],
        {"sync": [1.0, 1.0, 1.1, 0.9, 1.0, 1.0], "launch": [0.2] * 6},
        manifest=manifest("3.9.18", run="py3.9-rerun"),
        op_us={"aten::linear": LINEAR[::-1], "aten::relu": [5.0, 5.0, 5.1, 5.2, 5.0, 4.9]},
    )
    return diff([a, b, c])


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with TRACEKIT_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: review, then TRACEKIT_UPDATE_GOLDEN=1"


def _render(renderer) -> str:
    out = io.StringIO()
    renderer.render(_result(), out)
    return out.getvalue()


def test_terminal_golden():
    text = _render(TerminalRenderer(width=120))
    _check_golden("diff_terminal.txt", text)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "\x1b[" not in text  # no colour codes when colour is off


def test_terminal_colour_marks_better_and_worse():
    text = _render(TerminalRenderer(width=120, color=True))
    assert "\x1b[32mlower (better)" in text  # green
    assert "\x1b[31mhigher (worse)" in text  # red


def test_json_golden_and_schema():
    text = _render(JsonRenderer())
    _check_golden("diff.json", text)
    doc = json.loads(text)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((GOLDEN / "diff.schema.json").read_text())
    jsonschema.validate(doc, schema)


def test_json_holds_what_the_result_holds():
    result = _result()
    doc = json.loads(json.dumps(result.to_json()))
    assert [p["b"] for p in doc["pairs"]] == ["py3.11", "py3.9-rerun"]
    step = next(f for f in doc["pairs"][0]["figures"] if f["key"] == "step_time")
    fig = result.pairs[0].figure("step_time")
    assert step["shift"] == fig.estimate.shift
    assert step["log_ratio_ci"] == [fig.estimate.log_ratio_ci.low, fig.estimate.log_ratio_ci.high]
    assert step["significant"] is True and step["direction"] == "lower"
    rerun = doc["pairs"][1]
    assert rerun["comparable"] is True
    assert not any(f["significant"] for f in rerun["figures"] + rerun["ops"])


def test_markdown_golden_and_tables_are_well_formed():
    text = _render(MarkdownRenderer())
    _check_golden("diff.md", text)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows
    widths = {line.replace("\\|", "").count("|") for line in rows}
    assert widths == {7}  # six columns in every row


def test_unbounded_intervals_are_null_in_json_and_words_in_text():
    result = diff([gpu_report([10.0, 10.1, 10.2]), gpu_report([20.0, 20.1, 20.2])])
    step = next(f for f in result.to_json()["pairs"][0]["figures"] if f["key"] == "step_time")
    assert step["shift_ci"] == [None, None] and step["significant"] is False
    out = io.StringIO()
    TerminalRenderer(width=120).render(result, out)
    assert "too few steps" in out.getvalue()
    assert "capture more steps" in out.getvalue()


def test_png_reads_back_as_an_image(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    path = PlotRenderer().render_to(_result(), tmp_path / "diff.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(path)
    height, width = pixels.shape[:2]
    assert width >= 400 and height >= 300
    assert pixels[..., :3].std() > 0.05  # bars, not a blank canvas


def test_png_of_cpu_only_captures(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    a = cpu_report(SLOW, {"framework": [4.0] * 6})
    b = cpu_report(FAST, {"framework": [3.0] * 6})
    path = PlotRenderer().render_to(diff([a, b], ["a", "b"]), tmp_path / "cpu.png")
    assert image.imread(path).shape[0] >= 300
