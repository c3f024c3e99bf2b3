"""The capture schema against its golden file, and a written capture's Parquet schema against schema.py."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from tests.tracebuilder import TraceBuilder
from tracekit.data.schema import COLUMNS, ROW_KINDS, SCHEMA, SCHEMA_VERSION
from tracekit.data.store import write_capture
from tracekit.parse.parser import parse_paths

GOLDEN = Path(__file__).parent / "golden" / "schema.txt"


def render_schema() -> str:
    lines = [f"schema_version {SCHEMA_VERSION}", f"row kinds: {', '.join(ROW_KINDS)}", ""]
    for c in COLUMNS:
        unit = f" [{c.unit}]" if c.unit else ""
        lines.append(f"{c.name}: {c.type}{unit}  <- {c.source}  # {c.doc}")
    return "\n".join(lines) + "\n"


def test_schema_matches_golden():
    """Changing a column is a schema change: bump SCHEMA_VERSION, then regenerate with
    TRACEKIT_UPDATE_GOLDEN=1 pytest tests/test_parse_schema.py."""
    text = render_schema()
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_written_capture_has_exactly_the_schema(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 10)
    t.op("a", 1, 2)
    t.kernel("k", 3, 4)
    out = write_capture(parse_paths([t.write(tmp_path / "t.json")]), tmp_path / "c.parquet")
    assert pq.read_schema(out).remove_metadata() == SCHEMA
