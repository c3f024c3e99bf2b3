"""docs/results/advice.md's H100 table re-derived from the committed run folders (issue 39): make_table.py
parses each pair's A, replays the rule the pair checks, and must give the figures committed in
advice/data/predictions.json; the page holds the table they make, and explain.md the figures explain.py
reads from the traces."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ADVICE = ROOT / "docs" / "results" / "advice"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"advice_{name}", ADVICE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def derived(tmp_path_factory):
    make_table = _script("make_table")
    return make_table, make_table.table(make_table.DATA, tmp_path_factory.mktemp("captures"))


@pytest.mark.slow
def test_the_predictions_rederive_from_the_run_folders(derived):
    _, rows = derived
    committed = json.loads((ADVICE / "data" / "predictions.json").read_text())
    assert [(r["pair"], r["A"], r["B"], r["status"]) for r in rows] == [
        (r["pair"], r["A"], r["B"], r["status"]) for r in committed
    ]
    for got, want in zip(rows, committed):
        for key in ("measured_saved_ms", "A_ms", "B_ms", "error_ms"):
            if key in want:
                assert math.isclose(got[key], want[key], abs_tol=1e-6), (got["pair"], key)
        assert got.get("within_target") == want.get("within_target"), got["pair"]
        p, q = got.get("prediction") or {}, want.get("prediction") or {}
        assert p.get("whatif") == q.get("whatif") and p.get("bound") == q.get("bound"), got["pair"]
        for basis in ("profiled", "unprofiled"):
            if q.get("saved_ms"):
                assert math.isclose(p["saved_ms"][basis], q["saved_ms"][basis], abs_tol=1e-6)
                # a saving of the step it is a saving of: never above it
                assert p["saved_ms"][basis] <= p["step_ms"][basis]


@pytest.mark.slow
def test_the_published_table_is_the_derived_one(derived):
    make_table, rows = derived
    page = (ROOT / "docs" / "results" / "advice.md").read_text()
    for line in make_table.markdown(rows).splitlines():
        assert line in page, line


def test_explain_md_is_what_the_traces_say():
    assert _script("explain").markdown() == (ADVICE / "explain.md").read_text()
