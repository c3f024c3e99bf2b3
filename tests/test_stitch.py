"""tracekit/data/stitch.py: a file stitched from separately encoded row groups is, byte for byte, the file
pq.ParquetWriter writes from the same tables (so every reader reads the same capture)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracekit.data import stitch
from tracekit.data.schema import SCHEMA
from tracekit.data.store import RANK_SCHEMA, _parquet_options
from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
METADATA = {b"tracekit": b'{"schema_version": 1}', b"other": b"\x00\xff"}


@pytest.fixture(scope="module")
def tables() -> list[pa.Table]:
    table = parse_paths([ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz"]).table
    cuts = [0, 1, 7, 1500, 4000, table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(cuts, cuts[1:])]


def _parquetwriter(tables: list[pa.Table], schema: pa.Schema, row_group_size=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, **_parquet_options(schema)) as writer:
        for t in tables:
            writer.write_table(t, row_group_size=row_group_size)
        writer.add_key_value_metadata(METADATA)
    return sink.getvalue().to_pybytes()


def _stitched(parts: list[bytes], schema: pa.Schema) -> bytes:
    out = io.BytesIO()
    s = stitch.Stitcher(out, schema, _parquet_options(schema))
    for part in parts:
        s.append(part)
    s.close(METADATA)
    return out.getvalue()


@pytest.mark.parametrize("schema", [SCHEMA, RANK_SCHEMA], ids=["file", "part"])
def test_stitched_file_is_the_file_parquetwriter_writes(tables, schema):
    if schema is RANK_SCHEMA:
        tables = [t.remove_column(SCHEMA.get_field_index("rank")) for t in tables]
    options = _parquet_options(schema)
    parts = [stitch.encode(t, schema, options) for t in tables]
    assert _stitched(parts, schema) == _parquetwriter(tables, schema)


def test_parts_of_several_row_groups_and_no_parts(tables):
    """A part may hold several row groups (each keeps its place, its ordinal renumbered); a file of no
    rows is the schema's empty file with the metadata."""
    options = _parquet_options(SCHEMA)
    parts = []
    for t in tables:
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, SCHEMA, **options) as writer:
            writer.write_table(t, row_group_size=1000)
        parts.append(sink.getvalue().to_pybytes())
    assert _stitched(parts, SCHEMA) == _parquetwriter(tables, SCHEMA, row_group_size=1000)
    assert pq.ParquetFile(pa.py_buffer(_stitched(parts, SCHEMA))).metadata.num_row_groups > len(tables)
    assert _stitched([], SCHEMA) == _parquetwriter([], SCHEMA)


def test_footer_decodes_and_encodes_to_the_same_bytes(tables):
    data = _parquetwriter(tables, SCHEMA)
    n = stitch._footer_length(data)
    out = bytearray()
    stitch._encode_struct(out, stitch._footer_of(data))
    assert bytes(out) == data[len(data) - 8 - n : len(data) - 8]
    with pytest.raises(ValueError):
        stitch._footer_of(b"not parquet")


@pytest.mark.parametrize("shift", [0, 5, 300, 2**40])  # varints of other lengths
def test_the_c_path_moves_row_groups_as_the_python_path_does(tables, shift, monkeypatch):
    """GIVEN parts of one and of several row groups WHEN their row groups are moved by the C extension
    (tracekit/data/_stitch.c) and by the Python decode / shift / encode THEN the bytes are the same,
    and a file stitched through either path is the same file."""
    pytest.importorskip("tracekit.data._stitch")
    from tracekit.data import _stitch

    schema = SCHEMA
    parts = [stitch.encode(t, schema, _parquet_options(schema)) for t in tables]
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, **_parquet_options(schema)) as writer:
        writer.write_table(pa.concat_tables(tables), row_group_size=1000)  # several row groups
    parts.append(sink.getvalue().to_pybytes())
    for ordinal, part in enumerate(parts):
        end = len(part) - 8 - stitch._footer_length(part)
        rows, groups = _stitch.stitch_groups(part, end, shift, ordinal)
        footer = stitch._footer_of(part)
        want = []
        for i, group in enumerate(stitch._get(footer, stitch._FILE_ROW_GROUPS, (stitch._STRUCT, []))[1]):
            stitch._shift_row_group(group, shift, ordinal=ordinal + i)
            out = bytearray()
            stitch._encode_struct(out, group)
            want.append(bytes(out))
        assert rows == stitch._get(footer, stitch._FILE_NUM_ROWS, 0)
        assert groups == want
    with_c = _stitched(parts, schema)
    monkeypatch.setattr(stitch, "_stitch", None)
    assert _stitched(parts, schema) == with_c


def test_a_footer_the_c_path_does_not_read_is_left_to_python():
    pytest.importorskip("tracekit.data._stitch")
    from tracekit.data import _stitch

    assert _stitch.stitch_groups(b"PAR1\x19\x0c", 4, 0, 0) is None  # cut short
    assert _stitch.stitch_groups(b"PAR1", 9, 0, 0) is None  # past the end
