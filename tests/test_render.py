"""Renderers: golden files for text / JSON / Markdown (terminal width pinned), the JSON read back against
its schema and into a Report, and the Markdown tables well formed.

Regenerate the golden files after an intended change with `UPDATE_GOLDEN=1 pytest tests/test_render.py`.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import jsonschema
import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import Report
from tracekit.api import analyze  # what `tracekit analyze` renders: the analysis and its savings
from tracekit.parse.parser import parse_paths
from tracekit.render.base import Renderer
from tracekit.render.registry import get_renderer, renderers
from tracekit.render.schema import PATH as SCHEMA_PATH
from tracekit.render.schema import report_schema_defs

GOLDEN = Path(__file__).parent / "golden"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "h200_probe"
SCHEMA = json.loads((Path(__file__).parent.parent / "tracekit" / "render" / "report.schema.json").read_text())
WIDTH = 100


def small_trace() -> TraceBuilder:
    """Two steps: a DataLoader stall, a sync drain from .item() at train.py:57, tiny kernels."""
    t = TraceBuilder(device_properties=[{"id": 0, "name": "Test GPU", "totalGlobalMem": 1 << 30}])
    t.python("train.py(50): main", 0, 400, py_id=1)
    corr = 0
    for n, base in ((1, 0), (2, 200)):
        t.step(n, base, base + 200)
        t.dataloader(base + 1, 60)
        t.op("aten::linear", base + 70, 30)
        for k in range(3):
            corr += 1
            t.launch(base + 72 + 8 * k, 4, corr=corr)
            t.kernel("gemm_kernel", base + 80 + 10 * k, 8, corr=corr)
        t.python("train.py(57): main", base + 105, 40, py_id=10 + n, parent=1)
        t.op("aten::item", base + 106, 38)
        t.op("aten::_local_scalar_dense", base + 107, 36)
        corr += 1
        t.runtime("cudaMemcpyAsync", base + 108, 3, corr=corr)
        t.memcpy(base + 112, 2, corr=corr)
        t.sync(base + 112, 30, name="cudaStreamSynchronize")
        corr += 1
        t.launch(base + 160, 4, corr=corr)
        t.kernel("relu_kernel", base + 170, 20, corr=corr)
    return t


@pytest.fixture(scope="module")
def small_report(tmp_path_factory) -> Report:
    path = small_trace().write(tmp_path_factory.mktemp("small") / "small.pt.trace.json")
    report = analyze(parse_paths([path])).report
    check_invariants(report)
    return report


@pytest.fixture(scope="module")
def sync_report() -> Report:
    report = analyze(parse_paths([FIXTURES / "sync.pt.trace.json.gz"])).report
    check_invariants(report)
    return report


def render(report: Report, fmt: str) -> str:
    out = io.StringIO()
    opts = {"width": WIDTH, "color": False} if fmt == "text" else {}
    get_renderer(fmt, **opts).render(report, out)
    return out.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_golden_small(small_report, fmt):
    check_golden(f"analyze_small{renderers()[fmt].suffix}", render(small_report, fmt))


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_golden_h200_sync(sync_report, fmt):
    check_golden(f"analyze_h200_sync{renderers()[fmt].suffix}", render(sync_report, fmt))


@pytest.mark.parametrize("which", ["small_report", "sync_report"])
def test_json_validates_and_reads_back(request, which):
    report = request.getfixturevalue(which)
    doc = json.loads(render(report, "json"))
    jsonschema.validate(doc, SCHEMA)
    assert Report.from_json(doc) == report


def test_schema_rejects_a_broken_report(small_report):
    doc = json.loads(render(small_report, "json"))
    del doc["devices"][0]["idle_ms_per_step"]["sync"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_schema_names_the_causes_of_the_cause_table():
    """The schema's lists of causes and host states are the cause table's (a new cause: regenerate them
    with UPDATE_GOLDEN=1 and review the diff)."""
    path = SCHEMA_PATH
    defs = report_schema_defs()
    if os.environ.get("UPDATE_GOLDEN"):
        doc = json.loads(path.read_text())
        doc["$defs"] = {**doc.get("$defs", {}), **defs}
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    stored = json.loads(path.read_text()).get("$defs", {})
    assert {k: stored.get(k) for k in defs} == defs, "report.schema.json's $defs: run with UPDATE_GOLDEN=1"


def test_markdown_tables_are_well_formed(small_report):
    lines = render(small_report, "markdown").splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    assert table
    blocks: list[list[str]] = []
    prev = False
    for ln in lines:
        is_row = ln.startswith("|")
        if is_row and not prev:
            blocks.append([])
        if is_row:
            blocks[-1].append(ln)
        prev = is_row
    for block in blocks:
        widths = {ln.replace("\\|", "").count("|") for ln in block}
        assert len(widths) == 1, block
        assert set(block[1].strip("|").split("|")) <= {"---", "---:"}


def test_text_report_names_causes_and_evidence(small_report):
    text = render(small_report, "text")
    for word in ("idle: dataloader", "idle: sync", "sync sources", "train.py:57", "aten::item", "advice"):
        assert word in text
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def test_every_renderer_declares_name_and_suffix():
    for name, cls in renderers().items():
        assert cls.name == name and cls.suffix.startswith(".")


def test_the_registry_imports_a_result_types_renderers_only_when_asked():
    """Each result type's renderers load by name, and the registry itself imports none of them (the
    what-if and diff renderers bring numba and pandas; `tracekit info` must not pay for them)."""
    import subprocess
    import sys

    from tracekit.analysis.model import Report
    from tracekit.compare.diff import DiffResult
    from tracekit.data.describe import CaptureDescription
    from tracekit.whatif.model import WhatIfResult

    expected = {
        Report: {"text", "json", "markdown"},
        DiffResult: {"text", "json", "markdown", "png"},
        WhatIfResult: {"text", "json", "markdown"},
        CaptureDescription: {"text", "json", "markdown"},
    }
    for kind, names in expected.items():
        assert set(renderers(kind)) == names, kind
        assert all(isinstance(get_renderer(n, kind), Renderer) for n in names if n != "png")
    code = (
        "import sys, tracekit.render.registry\n"
        "print(sorted(m for m in ('numba', 'pandas', 'tracekit.whatif') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
