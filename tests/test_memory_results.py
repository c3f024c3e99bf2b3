"""docs/results/memory.md's tables re-derived from the committed H100 runs (fixtures/h100_memory) by
docs/results/memory/table.py: the page must hold the tables they make, and the targets it reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("memory_table", ROOT / "docs/results/memory/table.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table():
    mod = _script()
    return mod, mod.derive(mod.DATA)


@pytest.mark.slow
def test_the_published_tables_are_the_derived_ones(table):
    mod, fig = table
    page = (ROOT / "docs/results/memory.md").read_text()
    for line in mod.render(fig):
        assert line in page, line


@pytest.mark.slow
def test_the_targets_the_page_reports(table):
    _, fig = table
    # every baseline's categories sum to its peak, which is the allocator's own within 1 %
    for c in fig["checks"]:
        assert sum(c["categories"].values()) == c["peak"]
        assert abs(c["peak"] / c["allocator"] - 1) <= 0.01
    # most measured peaks predicted within 10 %; a miss is marked in the table and its run explained in
    # the prose after it (not hidden); the runs that did not finish say why
    page = (ROOT / "docs/results/memory.md").read_text()
    prose = page[page.index("## What the tables say") :]
    within = 0
    for r in fig["rows"]:
        if r["missing"]:
            assert r["measured_peak"] is None and ("crashed" in r["missing"] or "exited" in r["missing"])
        elif abs(r["predicted_peak"] / r["measured_peak"] - 1) < 0.10:
            within += 1
        else:
            miss = r["predicted_peak"] / r["measured_peak"] - 1
            assert f"{miss * 100:+.1f}% ✗" in page and r["run"] in prose, r["run"]
    assert within >= 0.9 * len(fig["rows"])
    # under bf16 the measured peak lies in the predicted range (within 10 % of its ends)
    for r in fig["rows"]:
        if r["predicted_upper"] is not None and r["measured_peak"]:
            assert 0.9 * r["predicted_peak"] <= r["measured_peak"] <= 1.1 * r["predicted_upper"], r["run"]
