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


def test_the_parse_command_never_imports_pandas(tmp_path):
    """`tracekit parse` as a user runs it (`python -m tracekit parse`, the CLI and its job driver): no
    pandas in the process or its decode workers (-X importtime names every module each one imports)."""
    trace = ROOT / "fixtures" / "hta" / "nccl_data.json.gz"
    out = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "tracekit",
            "parse",
            str(trace),
            "-o",
            str(tmp_path / "c.parquet"),
        ],
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
    assert "tracekit.parse.parser" in imported  # the check sees the parse's imports
    assert not [m for m in imported if m.split(".")[0] == "pandas"]
