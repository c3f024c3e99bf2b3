"""docs/results/ddp_cpu.md's tables are what docs/results/ddp/ab.py derives from the committed results
(docs/results/ddp/ddp_cpu.json: each run's analysis and what-if figures), and those figures are possible."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "ddp" / "ddp_cpu.json"
PAGE = ROOT / "docs" / "results" / "ddp_cpu.md"


def _ab():
    spec = importlib.util.spec_from_file_location("ab", ROOT / "docs" / "results" / "ddp" / "ab.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_page_holds_the_tables_the_results_give():
    ab = _ab()
    doc = json.loads(RESULTS.read_text())
    # the checks re-derived from the runs (NaN compares equal as JSON text)
    assert json.dumps(ab._checks(doc["runs"])) == json.dumps(doc["checks"])
    by_session: dict[str, dict] = {}
    for key, rec in doc["runs"].items():
        by_session.setdefault(key.split("/")[0], {})[key] = rec
    assert json.dumps({k: ab._checks(v) for k, v in by_session.items()}) == json.dumps(doc["sessions"])
    assert json.dumps(ab._phase_rows(doc["runs"])) == json.dumps(doc["phases"])
    page = PAGE.read_text()
    for table in ab.markdown(doc).split("\n\n"):
        assert table.strip() in page


def test_the_results_are_possible():
    doc = json.loads(RESULTS.read_text())
    arms = {rec["arm"] for rec in doc["runs"].values()}
    assert {"base", "slow", "nocomm", "accum", "bucket"} <= arms
    for key, rec in doc["runs"].items():
        assert rec["unprofiled_ms"] > 0, key
        c = rec["comm"]
        if "step" in c:  # a run with communication: its parts within its step
            assert 0 <= c["exposed"] <= c["comm"] + 1e-9 and c["exposed"] <= c["step"], key
            assert 0 <= c["exposed_wait"] <= c["exposed"] + 1e-9, key
            assert c["hidden"] >= 0 and c["compute"] <= c["step"] + 1e-9, key
        for k in ("pred_comm0", "pred_accum", "pred_straggler_removed"):
            for v in rec.get(k, ()):
                assert v > 0, (key, k)
        if rec["arm"] == "slow":  # the injected straggler is named, by its own rank
            assert c["slow_rank"]["rank"] == 1, key
        if rec["arm"] == "nocomm":
            assert "step" not in c, key  # no collective in a comm-free run
