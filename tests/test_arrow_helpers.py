"""tracekit/data/arrow.py: numpy ↔ Arrow without pandas, checked against pyarrow's own conversions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.data import arrow as _arrow

ROOT = Path(__file__).resolve().parent.parent


@settings(deadline=None, max_examples=60)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=70), st.integers(0, 9))
def test_values_and_valid_match_pyarrow_on_slices(items, cut):
    arr = pa.array(items, pa.int64())[cut:]
    expect = arr.to_pylist()
    assert _arrow.values(arr, fill=7).tolist() == [7 if v is None else v for v in expect]
    assert _arrow.valid(arr).tolist() == [v is not None for v in expect]
    chunked = pa.chunked_array([arr, arr], pa.int64())
    assert _arrow.values(chunked).tolist() == [0 if v is None else v for v in expect * 2]


@settings(deadline=None, max_examples=60)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=70))
def test_from_numpy_round_trips_with_a_mask(items):
    data = np.array([0 if v is None else v for v in items], np.int64)
    ok = np.array([v is not None for v in items], bool)
    for typ in (pa.int64(), pa.int32()):
        arr = _arrow.from_numpy(data, ok, typ)
        assert arr.type == typ
        assert arr.to_pylist() == items
        assert arr.null_count == items.count(None)
        arr.validate(full=True)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["a", "ßé", "", "kernel<1>", "\u20ac"])), max_size=40))
def test_dictionary_and_codes_round_trip(items):
    uniques = list(dict.fromkeys(v for v in items if v is not None))
    codes = np.array([-1 if v is None else uniques.index(v) for v in items], np.int32)
    arr = _arrow.dictionary(codes, uniques)
    arr.validate(full=True)
    assert arr.to_pylist() == items
    back_codes, back_uniques = _arrow.codes(arr)
    assert back_codes.tolist() == codes.tolist() and back_uniques == uniques
    if len(items) > 3:  # a slice keeps its offset
        sliced_codes, sliced_uniques = _arrow.codes(arr[2:])
        assert [None if c < 0 else sliced_uniques[c] for c in sliced_codes] == items[2:]


@pytest.mark.parametrize("typ", [pa.int64(), pa.int32(), pa.dictionary(pa.int32(), pa.string())])
def test_nulls_are_null_and_valid_arrow(typ):
    arr = _arrow.nulls(5, typ)
    arr.validate(full=True)
    assert arr.type == typ and arr.null_count == 5 and arr.to_pylist() == [None] * 5
    assert _arrow.nulls(0, typ).to_pylist() == []


def test_bools_and_strings():
    mask = np.array([True, False, True, True, False, False, False, True, True])
    assert _arrow.bools(mask).to_pylist() == mask.tolist()
    assert _arrow.strings(["x", "", "ünï"]).to_pylist() == ["x", "", "ünï"]
    assert _arrow.strings([]).to_pylist() == []


def test_parsing_never_imports_pandas(tmp_path):
    """pyarrow's pa.array / pa.scalar / to_numpy import pandas (~0.5 s); a parse must not pay it, in the
    parent or in the workers (2 workers, small chunks, so the pool and shared memory are used)."""
    trace = ROOT / "fixtures" / "hta" / "nccl_data.json.gz"
    code = f"""
import sys
import tracekit.parse.parser as p
p.CHUNK_BYTES = 64 << 10
capture = p.parse_to_file([p.Path({str(trace)!r})], p.Path({str(tmp_path / "c.parquet")!r}))
assert capture.rows_by_kind().get("step", 0) > 0
print("pandas" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"TRACEKIT_WORKERS": "2", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_parse_command_imports_only_what_it_parses_with(tmp_path):
    """`tracekit parse` as a user runs it (`python -m tracekit parse`, the CLI and its job driver), on a
    trace large enough for the decode workers: no pandas, no pydantic (Typer's coercion, tracekit.cli
    `_coerce_lazily`), no pyarrow.compute, no numpy.ma and no other command's module, in the process or its
    workers (-X importtime names every module each one imports): each was start-up time."""
    import gzip

    from tracekit.parse import parser

    trace = ROOT / "fixtures" / "hta" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    with gzip.open(trace) as fh:
        assert len(fh.read()) >= parser.CHUNK_BYTES // 2  # decoded by the pool, not in the process
    # `python -m tracekit parse ...`, then the modules the process holds (importlib.import_module, which
    # registers the commands, is not in -X importtime's log).
    code = f"""
import sys
sys.argv = ["tracekit", "parse", {str(trace)!r}, "-o", {str(tmp_path / "c.parquet")!r}]
from tracekit.__main__ import main
main()
print(*sorted(sys.modules), sep=chr(10))
"""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env={"TRACEKIT_WORKERS": "2", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("wrote "), out.stdout
    imported = [
        line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    ]
    imported += out.stdout.splitlines()[1:]
    assert "tracekit.parse.parser" in imported  # the check sees the parse's imports
    assert not [m for m in imported if m.split(".")[0] in ("pandas", "pydantic", "pydantic_core")]
    assert "pyarrow.compute" not in imported
    assert "numpy.ma" not in imported  # np.unique's import of it: tracekit.data.arrow.distinct
    # the parse command's module and the flags it shares, no other command's
    assert {m for m in imported if m.startswith("tracekit.commands.")} == {
        "tracekit.commands.parse",
        "tracekit.commands.flags",
    }


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["event", "step", "busy", "", None]), max_size=12), max_size=4))
def test_filter_rows_and_rows_by_kind_equal_pyarrow_compute(chunks):
    """filter_rows and Capture.rows_by_kind (which avoid importing pyarrow.compute) equal Table.filter and
    value_counts: chunks with their own dictionaries, repeated dictionary entries, nulls, empty strings."""
    import pyarrow.compute as pc

    from tracekit.data.store import Capture

    arrays = []
    for i, chunk in enumerate(chunks):
        uniques = sorted({v for v in chunk if v is not None}, reverse=i % 2 == 1)
        uniques = uniques + uniques[:1]  # a repeated entry: the second copy is never used
        codes = np.array([-1 if v is None else uniques.index(v) for v in chunk], np.int32)
        arrays.append(_arrow.dictionary(codes, uniques))
    if not arrays:
        arrays = [_arrow.dictionary(np.zeros(0, np.int32), [])]
    table = pa.Table.from_arrays([pa.chunked_array(arrays, type=arrays[0].type)], names=["kind"])
    mask = np.arange(table.num_rows) % 3 != 1
    assert _arrow.filter_rows(table, mask).equals(table.filter(_arrow.bools(mask)))
    decoded = table.column("kind").combine_chunks().dictionary_decode()
    expected = {r["values"]: r["counts"] for r in pc.value_counts(decoded).to_pylist() if r["values"]}
    got = Capture(table=table).rows_by_kind()
    assert got == expected and list(got) == list(expected)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["a", "ProfilerStep#1", "", None]), max_size=10), min_size=1, max_size=4
    )
)
def test_frame_strings_equal_take(chunks):
    """derive.Frame.strings (codes per chunk, no pyarrow.compute) equals Arrow's take, on any rows."""
    from tracekit.parse.derive import Frame

    arrays = []
    for chunk in chunks:
        uniques = sorted({v for v in chunk if v is not None})
        arrays.append(
            _arrow.dictionary(np.array([-1 if v is None else uniques.index(v) for v in chunk]), uniques)
        )
    table = pa.Table.from_arrays([pa.chunked_array(arrays, type=arrays[0].type)], names=["name"])
    rows = np.arange(table.num_rows)[::-1][::2]
    assert Frame(table).strings("name", rows) == table.column("name").take(pa.array(rows)).to_pylist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), max_size=40)
    | st.lists(st.integers(-3, 70000), max_size=40)
    | st.lists(st.integers(0, 3), max_size=40),
    st.sampled_from([np.int32, np.int64]),
)
def test_distinct_is_np_unique(values, dtype):
    """arrow.distinct (np.unique without importing numpy.ma) gives np.unique's values and dtype, by
    each of its paths: one value, a small span counted, a wide one sorted."""
    if dtype is np.int32:
        values = [v for v in values if -(2**31) <= v < 2**31]
    a = np.array(values, dtype=dtype)
    got, want = _arrow.distinct(a), np.unique(a)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
