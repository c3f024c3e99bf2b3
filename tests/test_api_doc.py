"""docs/api.md is run as written: each ```python block, in order, in one namespace, must print exactly the
```text block that follows it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```python\n(.*?)```\n+```text\n(.*?)```", re.S)


def test_the_walk_through_prints_what_the_doc_shows(monkeypatch):
    monkeypatch.chdir(ROOT)
    pairs = BLOCK.findall((ROOT / "docs" / "api.md").read_text())
    assert len(pairs) >= 6
    namespace: dict = {}
    for code, shown in pairs:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "docs/api.md", "exec"), namespace)
        assert buf.getvalue().rstrip() == shown.rstrip(), code


def test_analysis_and_comparison_show_as_html_tables():
    import tracekit as tk

    a = tk.analyze(ROOT / "fixtures" / "h200" / "sync_heavy")
    page = a._repr_html_()
    assert "<table" in page and "sync" in page and "_train.py:48" in page
    d = tk.diff(a, ROOT / "fixtures" / "h200" / "heavy_mlp")
    assert "<table" in d._repr_html_() and "step time" in d._repr_html_()
    # the API's tables are views of the report: the causes sum to the step time
    causes = a.causes()
    per_device = causes.groupby(["rank", "device"])["ms_per_step"].sum()
    steps = a.steps()
    assert per_device.iloc[0] == pytest.approx(steps["step_ms"].mean(), rel=1e-9)


def test_bad_input_is_a_tracekit_error_not_a_traceback(tmp_path):
    import tracekit as tk
    from tracekit.errors import NotComparableError, TracekitError

    with pytest.raises(TracekitError):
        tk.load(tmp_path / "missing.parquet")
    with pytest.raises(TracekitError):
        tk.load()
    with pytest.raises(NotComparableError):
        tk.diff(ROOT / "fixtures" / "h200" / "heavy_mlp")
