"""`tracekit info`: what a capture holds, as text and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "fixtures" / "h200_probe" / "mlp.pt.trace.json.gz"


def test_info_json_of_a_parsed_capture(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    assert run_main(["parse", str(PROBE), "-o", str(out)], capsys)[0] == 0
    code, stdout, _ = run_main(["info", str(out), "--json"], capsys)
    assert code == 0
    doc = json.loads(stdout)
    assert doc["schema_version"] == 1 and doc["manifest"] is None
    assert doc["ranks"] == [0] and doc["devices"] == [{"rank": 0, "device": 0}]
    assert [s["name"] for s in doc["steps"]] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # dispatch gaps: the step thread's only (the autograd engine thread runs no Python: no rows)
    assert doc["rows_by_kind"] == {"event": 2405, "step": 3}
    assert doc["events_by_cat"]["kernel"] == 237 and doc["events_by_cat"]["cpu_op"] == 1170
    [trace] = doc["traces"]
    assert trace["device_names"] == ["NVIDIA H200"] and trace["cuda_runtime_version"] == 13000
    assert doc["sources"][0]["path"] == PROBE.name


def test_info_text(tmp_path, capsys):
    for r in (0, 1):
        t = TraceBuilder(rank=r, world_size=2)
        t.step(5, 0, 1000)
        t.step(6, 1000, 3000)
        t.kernel("k", 10, 20)
        t.write(tmp_path / f"rank{r}.json")
    code, stdout, _ = run_main(["info", str(tmp_path)], capsys)
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0] == str(tmp_path)  # parsed on the fly: no schema line
    assert "manifest: none (parsed from profiler traces, not captured by tracekit)" in lines
    assert "ranks: 0, 1" in lines
    assert "devices: rank 0 device 0, rank 1 device 0" in lines
    assert "steps: 4" in lines
    assert (
        "  rank 1: 2 step(s), ProfilerStep#5 .. ProfilerStep#6; step time mean 1.500 ms, min 1.000, "
        "max 2.000; found by ProfilerStep spans (prof.step())" in lines
    )
    assert "rows by kind: event 8, step 4" in lines


def test_info_cpu_only_and_errors(tmp_path, capsys):
    t = TraceBuilder()
    t.op("aten::add", 0, 5)
    trace = t.write(tmp_path / "cpu.json")
    code, stdout, _ = run_main(["info", str(trace)], capsys)
    assert code == 0 and "devices: none (no device activity: a CPU-only capture)" in stdout
    code, _, err = run_main(["info", str(tmp_path / "missing.parquet")], capsys)
    assert (
        code == 2
        and err.strip() == f"tracekit: error: {tmp_path / 'missing.parquet'}: no such file or folder"
    )


def test_info_names_the_manifest_of_a_tracekit_capture(tmp_path, capsys):
    """GIVEN a real H200 run folder with manifest.json WHEN parsed and shown THEN it reads in words."""
    from pathlib import Path

    run = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "heavy_mlp"
    out = tmp_path / "c.parquet"
    main(["parse", str(run), "-o", str(out)])
    capsys.readouterr()
    main(["info", str(out)])
    text = capsys.readouterr().out
    assert "manifest: workload heavy_mlp, run heavy_mlp, device NVIDIA H200, python 3.12.3" in text
    assert "{" not in text.split("manifest:")[1].splitlines()[0]


def _two_rank_traces(folder: Path) -> Path:
    for r in (0, 1):
        t = TraceBuilder(rank=r, world_size=2)
        t.step(5, 0, 1000)
        t.step(6, 1000, 3000)
        t.kernel("k", 10, 20)
        t.kernel("k2", 30, 40, stream=8)
        t.op("aten::add", 100, 5)
        t.write(folder / f"rank{r}.json")
    return folder


def test_summary_from_disk_equals_the_summary_of_the_loaded_capture(tmp_path, capsys):
    """GIVEN captures of every form: a file of two ranks, a folder, a real file, and both after
    `analyze --store` (the file then rewritten whole: row groups of mixed kinds; the folder with idle
    parts) WHEN summarised from disk (row-group statistics, a few columns) THEN the document is the one
    of the capture read whole into memory."""
    from tracekit.data.store import read_capture, read_meta
    from tracekit.data.summary import summarize

    (tmp_path / "run").mkdir()
    traces = _two_rank_traces(tmp_path / "run")
    captures = {
        "file": tmp_path / "c.parquet",
        "folder": tmp_path / "c",
        "real": tmp_path / "real.parquet",
    }
    assert run_main(["parse", str(traces), "-o", str(captures["file"])], capsys)[0] == 0
    assert run_main(["parse", str(traces), "-o", f"{captures['folder']}/"], capsys)[0] == 0
    assert run_main(["parse", str(PROBE), "-o", str(captures["real"])], capsys)[0] == 0
    for stored in (False, True):
        for name, path in captures.items():
            if stored:
                assert run_main(["analyze", str(path), "--store", "--no-savings"], capsys)[0] == 0, name
            expected = read_capture(path).summary()
            assert summarize(path, read_meta(path)) == expected, (name, stored)
            assert list(summarize(path, read_meta(path))["rows_by_kind"]) == list(expected["rows_by_kind"])
        assert "idle" in read_capture(captures["folder"]).summary()["rows_by_kind"] or not stored
    folder = summarize(captures["folder"], read_meta(captures["folder"]))
    assert folder["ranks"] == [0, 1] and folder["devices"] == [
        {"rank": 0, "device": 0},
        {"rank": 1, "device": 0},
    ]
    assert [(s["rank"], s["name"]) for s in folder["step_rows"]] == [
        (0, "ProfilerStep#5"),
        (0, "ProfilerStep#6"),
        (1, "ProfilerStep#5"),
        (1, "ProfilerStep#6"),
    ]
    assert folder["events_by_cat"]["kernel"] == 4 and folder["events_by_cat"]["cpu_op"] == 2


def test_info_of_a_capture_never_reads_it_whole(tmp_path, capsys, monkeypatch):
    """`tracekit info` of a capture reads row groups, a few columns each, never the whole table (it
    used to load it: 2.4 GiB per GB of trace)."""
    import pyarrow.parquet as pq

    out = tmp_path / "c.parquet"
    assert run_main(["parse", str(PROBE), "-o", str(out)], capsys)[0] == 0

    def refuse(*a, **k):
        raise AssertionError("info read the whole capture")

    monkeypatch.setattr(pq, "read_table", refuse)
    monkeypatch.setattr(pq.ParquetFile, "read", refuse)
    code, stdout, _ = run_main(["info", str(out), "--json"], capsys)
    assert code == 0 and json.loads(stdout)["rows_by_kind"]["event"] == 2405


def _groups_read(monkeypatch) -> list[tuple[str, tuple]]:
    """Record every row group `tracekit info` reads: (its kind by its statistics, the columns)."""
    import pyarrow.parquet as pq

    from tracekit.data.summary import only_value

    read: list[tuple[str, tuple]] = []
    original = pq.ParquetFile.read_row_group

    def recording(self, i, columns=None, **kw):
        read.append((only_value(self.metadata.row_group(i), "kind"), tuple(columns or ())))
        return original(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", recording)
    return read


def test_info_of_a_parsed_capture_reads_only_its_step_rows(tmp_path, capsys, monkeypatch):
    """GIVEN a capture parsed by the decode workers (a trace of several chunks: each worker summarises
    the rows it encodes) and a folder capture WHEN `tracekit info` describes them THEN it reads the
    summary the writer stored in the footer and the step row groups, no event row (constant time in the
    capture's size), and says what reading every row says."""
    import gzip

    from tracekit.data.store import read_capture, read_meta
    from tracekit.data.summary import summarize
    from tracekit.parse import parser

    trace = ROOT / "fixtures" / "hta" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    with gzip.open(trace) as fh:
        assert len(fh.read()) >= parser.CHUNK_BYTES // 2  # decoded and encoded by the pool
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    (tmp_path / "run").mkdir()
    captures = [tmp_path / "hta.parquet", tmp_path / "c.parquet", tmp_path / "folder"]
    assert run_main(["parse", str(trace), "-o", str(captures[0])], capsys)[0] == 0
    assert (
        run_main(["parse", str(_two_rank_traces(tmp_path / "run")), "-o", str(captures[1])], capsys)[0] == 0
    )
    assert run_main(["parse", str(tmp_path / "run"), "-o", f"{captures[2]}/"], capsys)[0] == 0
    for capture in captures:
        expected = read_capture(capture).summary()
        read = _groups_read(monkeypatch)
        assert summarize(capture, read_meta(capture)) == expected
        assert read and {kind for kind, _ in read} == {"step"}, capture
        monkeypatch.undo()
        monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    assert expected["events_by_cat"]["kernel"] == 4 and expected["ranks"] == [0, 1]


def test_info_reads_the_rows_when_the_stored_summary_does_not_count_them(tmp_path, capsys, monkeypatch):
    """GIVEN a capture file rewritten by another tool with its footer's metadata kept but rows left out
    (the stored summary counts more rows than the file holds) WHEN described THEN the stored figures are
    not believed: the rows are read, and the figures are those of the rows there are."""
    import pyarrow.parquet as pq

    from tracekit.data.store import read_capture, read_meta
    from tracekit.data.summary import ROWS_KEY, summarize

    out = tmp_path / "c.parquet"
    assert run_main(["parse", str(PROBE), "-o", str(out)], capsys)[0] == 0
    footer = pq.read_metadata(out).metadata
    assert ROWS_KEY in footer
    pq.write_table(pq.read_table(out).slice(0, 1000).replace_schema_metadata(footer), out)
    assert pq.read_metadata(out).metadata[ROWS_KEY] == footer[ROWS_KEY]
    read = _groups_read(monkeypatch)
    doc = summarize(out, read_meta(out))
    assert doc == read_capture(out).summary() and doc["rows_by_kind"] == {"event": 1000}
    assert read and ("cat" in read[0][1] or "kind" in read[0][1])


def test_info_imports_neither_pandas_nor_pydantic_nor_the_parser(tmp_path, capsys):
    """`tracekit info CAPTURE` as a user runs it imports no pandas, no pydantic (Typer's coercion:
    tracekit.cli `_coerce_lazily`, whose None defaults build no adapter), not numpy.ma (np.unique's
    import of it) and not the parser: each was start-up time of the command."""
    import subprocess
    import sys

    out = tmp_path / "c.parquet"
    assert run_main(["parse", str(PROBE), "-o", str(out)], capsys)[0] == 0
    code = f"""
import sys
sys.argv = ["tracekit", "info", {str(out)!r}, "--json"]
from tracekit.__main__ import main
main()
print(*sorted(sys.modules), sep=chr(10), file=sys.stderr)
"""
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["rows_by_kind"]["event"] == 2405
    imported = run.stderr.splitlines()
    assert "tracekit.data.summary" in imported  # the check sees the command's imports
    assert not [m for m in imported if m.split(".")[0] in ("pandas", "pydantic", "pydantic_core")]
    # the parse stage's options (what `tracekit parse`'s flags are) but no parser
    parsing = [m for m in imported if m.startswith("tracekit.parse.") and m != "tracekit.parse.options"]
    assert not parsing and "numpy.ma" not in imported
