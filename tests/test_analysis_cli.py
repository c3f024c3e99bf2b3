"""`tracekit analyze` as users run it: CliRunner in-process, plus one subprocess run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracekit.analysis.model import Report
from tracekit.analysis.store import stored_report
from tracekit.cli import get_app
from tracekit.data.store import read_capture
from tracekit.errors import TracekitError
from tracekit.parse.parser import parse_to_file

FIXTURE = Path(__file__).parent.parent / "fixtures" / "h200_probe" / "sync.pt.trace.json.gz"


def invoke(*args: str):
    return CliRunner().invoke(get_app(), ["analyze", *args])


@pytest.fixture()
def capture_file(tmp_path) -> Path:
    out = tmp_path / "sync.parquet"
    parse_to_file([FIXTURE], out)
    return out


def test_json_from_a_trace_file():
    result = invoke(str(FIXTURE), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tracekit_report"] == 1 and doc["devices"][0]["idle_ms_per_step"]["sync"] > 0


def test_text_and_check(capture_file):
    result = invoke(str(capture_file), "--check", "--width", "100")
    assert result.exit_code == 0, result.output
    assert "idle: sync" in result.stdout
    assert "ok: idle never overlaps busy" in result.stderr


def test_markdown():
    result = invoke(str(FIXTURE), "--markdown")
    assert result.exit_code == 0
    assert result.stdout.startswith("# tracekit analysis")


def test_store_writes_idle_rows_and_report(capture_file):
    result = invoke(str(capture_file), "--store", "--json")
    assert result.exit_code == 0, result.output
    cap = read_capture(capture_file)
    kinds = cap.table.column("kind").to_pylist()
    idle = [i for i, k in enumerate(kinds) if k == "idle"]
    assert idle
    doc = json.loads(result.stdout)
    stored = stored_report(cap)
    assert stored == Report.from_json(doc)
    # idle rows carry the causes, and sum to the report's idle time
    causes = cap.table.column("cause").to_pylist()
    durs = cap.table.column("dur_ns").to_pylist()
    total_sync = sum(durs[i] for i in idle if causes[i] == "sync")
    assert total_sync == sum(s.idle_ns["sync"] for d in stored.devices for s in d.samples)
    # storing again replaces the rows, it does not add to them
    assert invoke(str(capture_file), "--store").exit_code == 0
    assert read_capture(capture_file).table.column("kind").to_pylist().count("idle") == len(idle)


def test_output_file_format_follows_suffix(tmp_path):
    out = tmp_path / "report.md"
    assert invoke(str(FIXTURE), "-o", str(out)).exit_code == 0
    assert out.read_text().startswith("# tracekit analysis")
    again = invoke(str(FIXTURE), "-o", str(out))
    assert isinstance(again.exception, TracekitError) and "--force" in str(again.exception)


def test_store_needs_a_parquet_capture():
    result = invoke(str(FIXTURE), "--store")
    assert isinstance(result.exception, TracekitError) and "tracekit parse" in str(result.exception)


def test_missing_input_is_one_line_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", str(tmp_path / "nope.parquet")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "nope.parquet" in proc.stderr and "Traceback" not in proc.stderr
