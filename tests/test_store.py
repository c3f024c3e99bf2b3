"""Capture files: parse → Parquet → read loses nothing; atomic writes; version and ownership checks."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.data.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION
from tracekit.data.store import read_capture, read_meta, write_capture
from tracekit.errors import CaptureFileError, InputNotFound, OutputExistsError
from tracekit.parse.parser import parse_paths

ROOT_DIR = Path(__file__).resolve().parent.parent

# Times with up to three decimals, as Kineto writes them, up to ~1.7e15 µs (epoch µs).
TIMES = st.decimals(min_value=0, max_value=1_800_000_000_000_000, places=3, allow_nan=False)
DURS = st.decimals(min_value=0, max_value=10_000_000, places=3, allow_nan=False)
# A step lasts (a step span without a duration is refused by the parser, parse/sanity.py).
STEP_DURS = st.decimals(min_value="0.001", max_value=10_000_000, places=3, allow_nan=False)


# Within a trace, times an hour apart at most: a device clock hours from the host's is refused by the
# parser (parse/sanity.py), as is a step number repeated; the base still spans the epoch range.
OFFSETS = st.decimals(min_value=0, max_value=3_000_000_000, places=3, allow_nan=False)


@st.composite
def traces(draw) -> TraceBuilder:
    t = TraceBuilder(rank=draw(st.none() | st.integers(0, 64)))
    corr = 0
    base = draw(TIMES)
    for n in draw(st.lists(st.integers(0, 10**6), max_size=3, unique=True)):
        a = base + draw(OFFSETS)
        t.step(n, a, a + draw(STEP_DURS))
    seen = set()
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["op", "kernel", "launch", "memory", "python"]))
        ts, dur = base + draw(OFFSETS), draw(DURS)
        if (kind, ts) in seen:  # an exact copy of an event is refused by the parser (parse/sanity.py)
            continue
        seen.add((kind, ts))
        if kind == "op":
            t.op(draw(st.text(min_size=1, max_size=6)), ts, dur, tid=draw(st.sampled_from([None, 7])))
        elif kind == "kernel":
            t.kernel(
                "k", ts, dur, corr=corr, device=draw(st.integers(0, 7)), stream=draw(st.integers(0, 2**40))
            )
        elif kind == "launch":
            t.launch(ts, dur, corr=corr)
        elif kind == "memory":
            t.memory(ts, draw(st.integers(-(2**40), 2**40)), draw(st.integers(0, 2**50)))
        else:
            t.python("f.py(1): g", ts, dur, py_id=draw(st.integers(0, 10**6)))
    return t


def _write(t: TraceBuilder, path: Path) -> Path:
    # Write the Decimal times as JSON numbers with their exact text.
    doc = t.build()
    text = json.dumps(doc, default=lambda d: f"@@{d}@@").replace('"@@', "").replace('@@"', "")
    path.write_text(text)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=traces())
def test_parse_write_read_loses_nothing(tmp_path, t):
    trace = _write(t, tmp_path / "t.pt.trace.json")
    capture = parse_paths([trace])
    out = write_capture(capture, tmp_path / "c.parquet", force=True)
    back = read_capture(out)
    assert back.table.schema.remove_metadata() == SCHEMA
    assert back.table.to_pylist() == capture.table.cast(SCHEMA).to_pylist()
    assert back.meta["sources"] == capture.meta["sources"]
    assert back.meta["traces"] == json.loads(json.dumps(capture.meta["traces"]))
    assert back.meta["schema_version"] == SCHEMA_VERSION
    # and the times are the exact decimal text × 1000
    want = sorted(int(e["ts"] * 1000) for e in t.events if e["ph"] != "M")
    got = sorted(r["ts_ns"] for r in back.table.to_pylist() if r["kind"] == "event" and r["ph"] != "M")
    assert got == want


def _capture(tmp_path: Path):
    t = TraceBuilder()
    t.step(1, 0, 10)
    t.kernel("k", 1, 2)
    return parse_paths([t.write(tmp_path / "t.pt.trace.json")])


def test_existing_output_is_kept_without_force(tmp_path):
    out = tmp_path / "c.parquet"
    out.write_bytes(b"precious")
    with pytest.raises(OutputExistsError, match="--force"):
        write_capture(_capture(tmp_path), out)
    assert out.read_bytes() == b"precious"
    write_capture(_capture(tmp_path), out, force=True)
    assert read_capture(out).table.num_rows > 0


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "c.parquet"

    def boom(*args, **kwargs):
        Path(args[1]).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(KeyboardInterrupt):
        write_capture(_capture(tmp_path), out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["t.pt.trace.json"]  # no temp file left


def _rewrite_meta(path: Path, **changes) -> None:
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta.update(changes)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)


def test_newer_schema_version_names_the_version(tmp_path):
    out = write_capture(_capture(tmp_path), tmp_path / "c.parquet")
    _rewrite_meta(out, schema_version=SCHEMA_VERSION + 7)
    with pytest.raises(CaptureFileError, match=f"version {SCHEMA_VERSION + 7} needs a newer tracekit"):
        read_capture(out)


def test_older_schema_version_says_reparse(tmp_path):
    out = write_capture(_capture(tmp_path), tmp_path / "c.parquet")
    _rewrite_meta(out, schema_version=0)
    with pytest.raises(CaptureFileError, match="re-parse"):
        read_meta(out)


def test_parquet_that_is_not_ours(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), other)
    with pytest.raises(CaptureFileError, match="not a tracekit capture"):
        read_capture(other)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    with pytest.raises(CaptureFileError, match="not a Parquet file"):
        read_capture(junk)
    with pytest.raises(InputNotFound):
        read_capture(tmp_path / "missing.parquet")


def test_file_digest_is_the_digest_of_every_byte_whatever_the_window(tmp_path, monkeypatch):
    """GIVEN files of 0 bytes, under one window, and spanning several windows (the window shrunk to
    one page) WHEN file_digest reads them through its mapping THEN each is xxh3_128 / sha256 of all
    the file's bytes, and the file is unchanged."""
    import hashlib
    import mmap

    import xxhash

    from tracekit.data import store

    monkeypatch.setattr(store, "_DIGEST_WINDOW", mmap.PAGESIZE)
    for size in (0, 1, mmap.PAGESIZE, 3 * mmap.PAGESIZE + 17):
        data = bytes((i * 7 + size) % 251 for i in range(size))
        path = tmp_path / f"f{size}"
        path.write_bytes(data)
        assert store.file_digest(path) == xxhash.xxh3_128(data).hexdigest(), size
        assert store.file_digest(path, "sha256") == hashlib.sha256(data).hexdigest(), size
        assert path.read_bytes() == data


def _as_kind(table: pa.Table, kind: str) -> pa.Table:
    codes = pa.array([0] * table.num_rows, pa.int32())
    return table.set_column(0, "kind", pa.DictionaryArray.from_arrays(codes, pa.array([kind])))


def test_reading_only_some_row_kinds_skips_the_other_row_groups(tmp_path):
    """GIVEN a capture (file and folder form) written as earlier tracekit versions wrote it, with row
    groups of busy and dispatch-gap rows beside its event and step rows WHEN read with
    kinds=ANALYSIS_KINDS THEN every event and step row is there, in order, and none of the others
    (their row groups, told by the `kind` statistics, are not read); without `kinds` nothing is left
    out. A capture parsed now holds event and step rows only."""
    import pyarrow.compute as pc

    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.data.store import CaptureWriter, rank_part
    from tracekit.scale.job import parse_job

    trace = Path(__file__).resolve().parent.parent / "fixtures" / "h200_probe" / "sync.pt.trace.json.gz"
    for out in (tmp_path / "c.parquet", tmp_path / "folder"):
        parse_job([trace], out, folder=out.name == "folder")
        now = read_capture(out).table
        assert set(pc.unique(pc.cast(now["kind"], pa.string())).to_pylist()) == set(ANALYSIS_KINDS)
        events = now.filter(pc.equal(pc.cast(now["kind"], pa.string()), "event"))
        steps = now.filter(pc.equal(pc.cast(now["kind"], pa.string()), "step"))
        folder = out.name == "folder"
        with CaptureWriter(rank_part(out, 0) if folder else out, force=True, part=folder) as w:
            for table in (events.slice(0, 500), _as_kind(steps, "busy"), events.slice(500), steps):
                w.write(table)
            w.write(_as_kind(events.slice(0, 7), "dispatch_gap"))
            w.meta = read_meta(out) if not folder else {}
        whole = read_capture(out).table
        assert whole.num_rows == now.num_rows + steps.num_rows + 7
        some = read_capture(out, columns=["kind", "ts_ns", "name"], kinds=ANALYSIS_KINDS).table
        want = whole.filter(pc.is_in(pc.cast(whole["kind"], pa.string()), pa.array(list(ANALYSIS_KINDS))))
        assert want.num_rows == now.num_rows
        assert set(pc.unique(pc.cast(some["kind"], pa.string())).to_pylist()) == set(ANALYSIS_KINDS)
        assert some["ts_ns"].to_pylist() == want["ts_ns"].to_pylist()
        assert some["name"].to_pylist() == want["name"].to_pylist()


def test_a_capture_parsed_before_input_dims_reads_it_as_null(tmp_path):
    # GIVEN a capture written by a tracekit before the optional column (committed: cross-version run)
    old = ROOT_DIR / "docs/results/cross_version/dataloader_train_py3.11-1.parquet"
    assert "input_dims" not in pq.read_schema(old).names
    # THEN it reads whole, with the column null and at its place in the schema
    t = read_capture(old).table
    assert t.column_names == SCHEMA.names and t.column("input_dims").null_count == t.num_rows
    # AND asked for by name, beside another column
    t = read_capture(old, columns=["name", "input_dims"]).table
    assert t.column_names == ["name", "input_dims"] and t.column("input_dims").null_count == t.num_rows


def test_input_dims_survive_the_round_trip(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 10)
    op = t.op("aten::add_", 1, 5)
    op["args"]["Input Dims"] = [[64, 3, 224, 224], [64, 3, 224, 224], []]
    path = t.write(tmp_path / "t.json")
    write_capture(parse_paths([path]), tmp_path / "c.parquet")
    dims = [d for d in read_capture(tmp_path / "c.parquet").table.column("input_dims").to_pylist() if d]
    assert dims == ["[[64, 3, 224, 224], [64, 3, 224, 224], []]"]
