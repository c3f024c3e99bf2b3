"""docs/results/whatif.md's predictions re-derived from the committed H200 captures (issue 11, item 7):
`docs/results/whatif_predict.py` replays every pair's A with its scenarios; the numbers must be those
committed in whatif/predictions.json, and the page's table the one they make."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def _script():
    spec = importlib.util.spec_from_file_location("whatif_predict", RESULTS / "whatif_predict.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def derived():
    return _script().predictions(RESULTS / "whatif")


@pytest.mark.slow
def test_predictions_rederive_from_the_captures(derived):
    committed = json.loads((RESULTS / "whatif" / "predictions.json").read_text())
    assert [(r["pair"], r["round"], r["A"], r["B"]) for r in derived] == [
        (r["pair"], r["round"], r["A"], r["B"]) for r in committed
    ]
    for got, want in zip(derived, committed):
        for key in ("profiled", "unprofiled"):
            assert math.isclose(got["measured"][key], want["measured"][key], abs_tol=1e-9)
        assert got["predicted"].keys() == want["predicted"].keys()
        for label, p in got["predicted"].items():
            q = want["predicted"][label]
            assert p["flags"] == q["flags"], (got["A"], label)
            for key in ("profiled", "unprofiled"):
                assert math.isclose(p[key], q[key], abs_tol=1e-6), (got["A"], label, key)
            assert abs(p["replay_error"]) <= 0.02


@pytest.mark.slow
def test_the_published_table_is_the_derived_one(derived):
    page = (RESULTS / "whatif.md").read_text()
    for line in _script().summary_table(derived):
        assert line in page, line


def test_the_default_schedule_table_is_the_derived_one():
    """whatif.md's check on captures made the default way (two profiler cycles, fixtures/h200_default)."""
    spec = importlib.util.spec_from_file_location("default_schedule", RESULTS / "default_schedule.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    page = (RESULTS / "whatif.md").read_text()
    lines = mod.rows()
    assert len(lines) > 8
    for line in lines:
        assert line in page, line
