"""One Parquet file from row groups encoded elsewhere: a parse's decode workers encode their chunks, the
parent only appends them (tracekit.data.store.CaptureWriter, `stitched`).

    part = encode(table, schema, options)       # in a worker: a whole Parquet file of one row group
    out = Stitcher(sink, schema, options)
    out.append(part)                            # its column chunks copied, its row group kept
    out.close(key_value_metadata)               # the footer: every row group, offsets moved

A Parquet file is `PAR1`, the column chunks of each row group, the footer (a Thrift compact-encoded
FileMetaData: the schema, each row group's column chunks with their byte offsets in the file, the
key-value metadata), its length and `PAR1`. Pages hold no offsets, so a part's column chunks are the
same bytes wherever they lie; only the footer's offsets move, by where the part's chunks land in the
output, and each row group takes its index as `ordinal`. The footer is decoded and re-encoded field by
field in the order it was written (`_decode` / `_encode` round-trip every byte), so the file is
byte-for-byte the one `pq.ParquetWriter` writes from the same tables in the same order (tested).
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.native import current

MAGIC = b"PAR1"

# Thrift compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# Field ids (parquet.thrift) of the offsets a part's footer holds, and of what else changes.
_FILE_NUM_ROWS, _FILE_ROW_GROUPS, _FILE_KV = 3, 4, 5
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX = 2, 3, 4, 6
_META_OFFSETS = (9, 10, 11, 14)  # data_page_offset, index_page_offset, dictionary_page_offset, bloom filter


def encode(table: pa.Table, schema: pa.Schema, options: dict) -> bytes:
    """`table` as a whole Parquet file (one row group per `write_table`, as the stitched file holds it)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, **options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class Stitcher:
    """Write parts' row groups one after the other into `sink` (a writable binary file), then the footer."""

    def __init__(self, sink: Any, schema: pa.Schema, options: dict) -> None:
        self._sink = sink
        empty = pa.BufferOutputStream()
        pq.ParquetWriter(empty, schema, **options).close()  # (schema.empty_table() would import pandas)
        self._footer = _footer_of(empty.getvalue().to_pybytes())  # the file of no rows: the footer's base
        self._row_groups: list = []
        self._rows = 0
        self._sink.write(MAGIC)
        self._at = len(MAGIC)

    def append(self, part: bytes) -> None:
        start = len(MAGIC)
        end = len(part) - 8 - _footer_length(part)
        shift = self._at - start
        copied = _moved_groups(part, end, shift, len(self._row_groups))
        if copied is not None:  # tracekit/data/_stitch.c moved them: each row group as its bytes
            rows, groups = copied
            self._row_groups.extend(groups)
            self._rows += rows
        else:
            footer = _footer_of(part)
            for group in _get(footer, _FILE_ROW_GROUPS, (_STRUCT, []))[1]:
                _shift_row_group(group, shift, ordinal=len(self._row_groups))
                self._row_groups.append(group)
            self._rows += _get(footer, _FILE_NUM_ROWS, 0)
        self._sink.write(memoryview(part)[start:end])
        self._at += end - start

    def close(self, metadata: dict[bytes, bytes]) -> None:
        """The footer: the empty file's, with every row group, their row count, and `metadata` added to
        its key-value metadata (where ParquetWriter.add_key_value_metadata adds it)."""
        footer = list(self._footer)
        _set(footer, _FILE_NUM_ROWS, _I64, self._rows)
        _set(footer, _FILE_ROW_GROUPS, _LIST, (_STRUCT, self._row_groups))
        # ParquetWriter puts the added entries before its own (ARROW:schema).
        added = [[(1, _BINARY, key), (2, _BINARY, value)] for key, value in metadata.items()]
        kept = [e for e in _get(footer, _FILE_KV, (_STRUCT, []))[1] if _get(e, 1, None) not in metadata]
        _set(footer, _FILE_KV, _LIST, (_STRUCT, added + kept))
        out = bytearray()
        _encode_struct(out, footer)
        self._sink.write(bytes(out) + struct.pack("<i", len(out)) + MAGIC)


def _moved_groups(part: bytes, footer_start: int, shift: int, ordinal: int) -> tuple[int, list] | None:
    """(rows, row groups as encoded bytes, their offsets moved by `shift` and ordinals from `ordinal`)
    by tracekit/data/_stitch.c's `stitch_groups` (the same bytes as decoding, `_shift_row_group` and
    encoding them here, where the Python path is a visible part of a parse's parent: benchmarks/RESULTS.md),
    or None: no extension, or a footer it does not read (then the Python path does)."""
    if _stitch is None:
        return None
    return _stitch.stitch_groups(part, footer_start, shift, ordinal)


try:
    from tracekit.data import _stitch  # type: ignore[attr-defined]  # the optional C extension
except ImportError:  # pragma: no cover - it did not build
    _stitch = None
_stitch = current(_stitch, "data/_stitch.c")  # a build from other sources: the Python path runs


def _footer_length(data: bytes) -> int:
    if data[-4:] != MAGIC or data[:4] != MAGIC:
        raise ValueError("not a Parquet file")
    return struct.unpack("<i", data[-8:-4])[0]


def _footer_of(data: bytes) -> list:
    n = _footer_length(data)
    fields, end = _decode_struct(memoryview(data), len(data) - 8 - n)
    if end != len(data) - 8:
        raise ValueError("a Parquet footer of unexpected length")
    return fields


def _shift_row_group(group: list, shift: int, ordinal: int) -> None:
    for i, (fid, typ, value) in enumerate(group):
        if fid == _RG_FILE_OFFSET:
            group[i] = (fid, typ, value + shift)
        elif fid == _RG_ORDINAL:
            group[i] = (fid, typ, ordinal)
        elif fid == _RG_COLUMNS:
            for chunk in value[1]:
                _shift_column_chunk(chunk, shift)


def _shift_column_chunk(chunk: list, shift: int) -> None:
    for i, (fid, typ, value) in enumerate(chunk):
        if fid in (_CC_OFFSET_INDEX, _CC_COLUMN_INDEX) or (fid == _CC_FILE_OFFSET and value):
            chunk[i] = (fid, typ, value + shift)  # file_offset 0: not set (parquet-cpp writes 0)
        elif fid == _CC_META:
            for j, (mid, mtyp, mvalue) in enumerate(value):
                if mid in _META_OFFSETS:
                    value[j] = (mid, mtyp, mvalue + shift)


def _get(fields: list, fid: int, default: Any) -> Any:
    return next((v for f, _, v in fields if f == fid), default)


def _set(fields: list, fid: int, typ: int, value: Any) -> None:
    for i, (f, _, _) in enumerate(fields):
        if f == fid:
            fields[i] = (fid, typ, value)
            return
    fields.append((fid, typ, value))
    fields.sort(key=lambda f: f[0])


# -------------------------------------------------------------------------------------------------
# Thrift compact protocol: a struct is a list of (field id, type, value) in the order written; a list
# or set is (element type, [values]); binary stays bytes. Only what a Parquet footer uses (no maps).


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _decode_value(data: memoryview, pos: int, typ: int) -> tuple[Any, int]:
    if typ in (_TRUE, _FALSE):  # a bool field's value is its type
        return typ == _TRUE, pos
    if typ == _BYTE:
        return struct.unpack_from("<b", data, pos)[0], pos + 1
    if typ in (_I16, _I32, _I64):
        raw, pos = _varint(data, pos)
        return _zigzag(raw), pos
    if typ == _DOUBLE:
        return struct.unpack_from("<d", data, pos)[0], pos + 8
    if typ == _BINARY:
        n, pos = _varint(data, pos)
        return bytes(data[pos : pos + n]), pos + n
    if typ in (_LIST, _SET):
        head = data[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        items = []
        for _ in range(size):
            if elem in (_TRUE, _FALSE):  # a bool element is one byte
                items.append(data[pos] == _TRUE)
                pos += 1
            else:
                item, pos = _decode_value(data, pos, elem)
                items.append(item)
        return (elem, items), pos
    if typ == _STRUCT:
        return _decode_struct(data, pos)
    raise ValueError(f"Thrift compact type {typ} not expected in a Parquet footer")


def _decode_struct(data: memoryview, pos: int) -> tuple[list, int]:
    fields: list = []
    last = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, typ = head >> 4, head & 0x0F
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(data, pos)
            fid = _zigzag(raw)
        value, pos = _decode_value(data, pos, typ)
        fields.append((fid, typ, value))
        last = fid


def _put_varint(out: bytearray, n: int) -> None:
    while True:
        if n < 0x80:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _put_zigzag(out: bytearray, n: int) -> None:
    _put_varint(out, (n << 1) ^ (n >> 63))


def _encode_value(out: bytearray, typ: int, value: Any) -> None:
    if typ in (_TRUE, _FALSE):
        return
    if typ == _BYTE:
        out += struct.pack("<b", value)
    elif typ in (_I16, _I32, _I64):
        _put_zigzag(out, value)
    elif typ == _DOUBLE:
        out += struct.pack("<d", value)
    elif typ == _BINARY:
        _put_varint(out, len(value))
        out += value
    elif typ in (_LIST, _SET):
        elem, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | elem)
        else:
            out.append(0xF0 | elem)
            _put_varint(out, len(items))
        for item in items:
            if elem in (_TRUE, _FALSE):
                out.append(_TRUE if item else _FALSE)
            else:
                _encode_value(out, elem, item)
    elif typ == _STRUCT:
        if isinstance(value, bytes):  # a struct already encoded (`_moved_groups`)
            out += value
        else:
            _encode_struct(out, value)
    else:
        raise ValueError(f"Thrift compact type {typ} not expected in a Parquet footer")


def _encode_struct(out: bytearray, fields: list) -> None:
    last = 0
    for fid, typ, value in fields:
        if typ in (_TRUE, _FALSE):
            typ = _TRUE if value else _FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | typ)
        else:
            out.append(typ)
            _put_zigzag(out, fid)
        _encode_value(out, typ, value)
        last = fid
    out.append(0)
