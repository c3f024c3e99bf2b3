"""`tracekit annotate`: the original trace, byte for byte, plus a track of labelled idle gaps."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracekit.analysis.pipeline import analyze
from tracekit.api import annotate
from tracekit.cli import get_app
from tracekit.errors import OutputExistsError, TracekitError
from tracekit.export.annotate import CATEGORY, TRACK_NAME, splice
from tracekit.parse.parser import load_capture, parse_to_file

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "h200_probe"


def load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read())


@pytest.fixture(scope="module")
def sync_annotated(tmp_path_factory):
    out = tmp_path_factory.mktemp("ann") / "sync.annotated.pt.trace.json.gz"
    done = annotate(PROBE / "sync.pt.trace.json.gz", out)
    return done, load(PROBE / "sync.pt.trace.json.gz"), load(out)


def idle_slices(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == CATEGORY]


def test_original_events_and_metadata_are_kept(sync_annotated):
    _, original, annotated = sync_annotated
    n = len(original["traceEvents"])
    assert annotated["traceEvents"][:n] == original["traceEvents"]
    assert {k: v for k, v in annotated.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }
    added = annotated["traceEvents"][n:]
    assert added and all(e.get("cat") == CATEGORY or e["ph"] == "M" for e in added)


def test_the_track_is_a_named_thread_of_the_gpu_process(sync_annotated):
    _, original, annotated = sync_annotated
    names = [e for e in annotated["traceEvents"] if e["ph"] == "M" and e["args"].get("name") == TRACK_NAME]
    (meta,) = names
    kernels = [e for e in original["traceEvents"] if e.get("cat") == "kernel"]
    assert meta["pid"] == kernels[0]["pid"]  # beside the device's streams
    assert meta["tid"] not in {e["tid"] for e in original["traceEvents"] if e.get("pid") == meta["pid"]}
    assert {(e["pid"], e["tid"]) for e in idle_slices(annotated)} == {(meta["pid"], meta["tid"])}


def test_gap_slices_sum_to_the_reports_idle_time_per_step(sync_annotated):
    done, _, annotated = sync_annotated
    report = analyze(load_capture(PROBE / "sync.pt.trace.json.gz"))
    gaps = [e for e in idle_slices(annotated) if e["name"].startswith("idle: ")]
    assert len(gaps) == done.gaps == sum(s.idle_gaps for d in report.devices for s in d.samples)
    per_step: dict[int, float] = defaultdict(float)
    for e in gaps:
        per_step[e["args"]["step"]] += e["dur"]
    for s in report.devices[0].samples:
        assert per_step[s.step] == pytest.approx(s.idle_total_ns / 1e3, abs=1e-3 * len(gaps))


def test_gaps_do_not_overlap_and_cause_pieces_nest_inside_their_gap(sync_annotated):
    _, original, annotated = sync_annotated
    slices = sorted(idle_slices(annotated), key=lambda e: (e["ts"], -e["dur"]))
    gaps = [e for e in slices if e["name"].startswith("idle: ")]
    for a, b in zip(gaps, gaps[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    pieces = [e for e in slices if not e["name"].startswith("idle: ")]
    assert pieces, "the sync probe has gaps split over several causes"
    for p in pieces:
        (parent,) = [
            g for g in gaps if g["ts"] - 1e-3 <= p["ts"] and p["ts"] + p["dur"] <= g["ts"] + g["dur"] + 1e-3
        ]
        assert p["args"]["step"] == parent["args"]["step"]
    # no gap overlaps a kernel (idle is never busy)
    kernels = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in original["traceEvents"] if e.get("cat") == "kernel"
    )
    for g in gaps:
        assert not any(s < g["ts"] + g["dur"] - 1e-3 and g["ts"] + 1e-3 < e for s, e in kernels)


def test_sync_gaps_carry_the_source_line_and_op(sync_annotated):
    _, _, annotated = sync_annotated
    drains = [e for e in idle_slices(annotated) if e["name"] == "idle: sync" and "sync_source" in e["args"]]
    assert drains
    a = drains[0]["args"]
    assert a["sync_op"] == "aten::item" and a["sync_call"].startswith("cuda")
    assert a["sync_source"].rsplit(":", 1)[1].isdigit()
    assert a["evidence"] == f"sync drain: after {a['sync_call']} in aten::item at {a['sync_source']}"


def test_dataloader_gaps_name_the_iterator(tmp_path):
    out = tmp_path / "dl.json"
    annotate(PROBE / "dataloader.pt.trace.json.gz", out)
    dl = [e for e in idle_slices(load(out)) if e["name"] == "idle: dataloader"]
    assert dl and all(e["args"]["dataloader_iterator"] == "_SingleProcessDataLoaderIter" for e in dl)
    assert "DataLoader _SingleProcessDataLoaderIter.__next__" in dl[0]["args"]["evidence"]


def test_the_annotated_trace_analyses_like_the_original(sync_annotated, tmp_path):
    done, _, _ = sync_annotated
    a = analyze(load_capture(PROBE / "sync.pt.trace.json.gz"))
    b = analyze(load_capture(done.output))
    assert [d.samples for d in a.devices] == [d.samples for d in b.devices]


def test_timestamps_are_exact_decimal_text(sync_annotated):
    done, _, _ = sync_annotated
    text = gzip.decompress(done.output.read_bytes()).decode()
    tail = text[text.index(f'"cat":"{CATEGORY}"') :]
    ts = tail.split('"ts":', 1)[1].split(",", 1)[0]
    whole, frac = ts.split(".")
    assert whole.isdigit() and len(frac) == 3


def test_splice_keeps_an_array_format_trace_an_array(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]\n')
    out = json.loads(splice(path, [{"ph": "i", "name": "b", "pid": 1, "tid": 1, "ts": 2}]))
    assert [e["name"] for e in out] == ["a", "b"]


def test_refuses_to_overwrite_and_to_annotate_several_ranks(tmp_path):
    out = tmp_path / "o.json"
    out.write_text("{}")
    with pytest.raises(OutputExistsError, match="--force"):
        annotate(PROBE / "sync.pt.trace.json.gz", out)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("mlp", "sync"):
        shutil.copy(PROBE / f"{name}.pt.trace.json.gz", run / f"{name}.pt.trace.json.gz")
    with pytest.raises(TracekitError, match="holds 2 trace files"):
        annotate(run, tmp_path / "x.json")


def test_parquet_capture_finds_its_trace_beside_it(tmp_path):
    run = tmp_path / "w" / "py3.11"
    run.mkdir(parents=True)
    shutil.copy(PROBE / "mlp.pt.trace.json.gz", run / "host.1.pt.trace.json.gz")
    parquet = parse_to_file([run], tmp_path / "w" / "py3.11.parquet").path
    done = annotate(parquet, tmp_path / "a.json.gz")
    assert done.source == run / "host.1.pt.trace.json.gz"
    (run / "host.1.pt.trace.json.gz").unlink()
    with pytest.raises(TracekitError, match="annotate the trace file itself"):
        annotate(parquet, tmp_path / "b.json.gz")


def test_cli(tmp_path):
    out = tmp_path / "sync.annotated.pt.trace.json.gz"
    runner = CliRunner()
    args = ["annotate", str(PROBE / "sync.pt.trace.json.gz"), "-o", str(out)]
    result = runner.invoke(get_app(), args)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and "idle gaps (sync " in result.output
    again = runner.invoke(get_app(), args)
    assert again.exit_code != 0


def test_cpu_only_trace_has_nothing_to_annotate(tmp_path):
    from tests.tracebuilder import TraceBuilder

    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 30)
    trace = t.write(tmp_path / "cpu.pt.trace.json")
    with pytest.raises(TracekitError, match="CPU-only trace"):
        annotate(trace, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_a_capture_finds_its_trace_by_digest(tmp_path):
    """GIVEN a capture parsed from the trace beside it WHEN the trace is unchanged THEN annotate finds
    it (by its xxh3_128; a capture written before records sha256, also checked); WHEN one byte of it
    changes (same size) THEN it is refused as changed."""
    import hashlib

    import pyarrow.parquet as pq
    import xxhash

    from tracekit.data.store import file_digest, read_meta, source_digest
    from tracekit.export.annotate import trace_of

    trace = tmp_path / "sync.pt.trace.json"
    trace.write_bytes(gzip.decompress((PROBE / "sync.pt.trace.json.gz").read_bytes()))
    capture = tmp_path / "c.parquet"
    parse_to_file([trace], capture)
    [src] = read_meta(capture)["sources"]
    assert source_digest(src) == ("xxh3_128", xxhash.xxh3_128(trace.read_bytes()).hexdigest())
    assert file_digest(trace, "sha256") == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert trace_of(capture) == trace

    old = tmp_path / "old.parquet"  # the same capture as written before: its source's sha256
    table = pq.read_table(capture)
    meta = read_meta(capture)
    meta["sources"][0]["sha256"] = hashlib.sha256(trace.read_bytes()).hexdigest()
    del meta["sources"][0]["xxh3_128"]
    pq.write_table(table.replace_schema_metadata({b"tracekit": json.dumps(meta).encode()}), old)
    assert trace_of(old) == trace

    data = bytearray(trace.read_bytes())
    at = data.index(b'"ts": ') + 6
    data[at] = ord("9") if data[at] != ord("9") else ord("8")
    trace.write_bytes(bytes(data))
    for cap in (capture, old):
        with pytest.raises(TracekitError, match="has changed"):
            trace_of(cap)
