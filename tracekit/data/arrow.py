"""numpy ↔ Arrow for the parser's hot path, without pyarrow's pandas shim.

`pa.array`, `pa.scalar` and `Array.to_numpy` import pandas on first use (pyarrow 26 checks every input
for pandas types), a start-up cost larger than a small `tracekit parse` itself. These helpers
build arrays from numpy buffers (`pa.Array.from_buffers`) and read them back the same way, so parsing
never imports pandas. They handle the types the parser uses: fixed-width integers, booleans, strings
and dictionary<int32, string>.

    from_numpy(values, ok)      int64/int32 numpy (+ validity mask) → Array
    strings(["a", "b"])         Python strings → StringArray (no nulls)
    dictionary(codes, uniques)  int32 codes (-1 = null) into a list of strings → DictionaryArray
    bools(mask)                 bool numpy → BooleanArray
    filter_rows(table, mask)    the rows of a table where a bool numpy mask is True
    values(arr, fill)           integer Array / ChunkedArray → numpy, nulls as `fill`
    valid(arr)                  Array / ChunkedArray → bool numpy, True where not null
    codes(arr)                  DictionaryArray → (int32 codes with -1 for null, list of strings)
    nulls(n, type[, zeros])     an all-null integer or dictionary array, without touching its memory
    distinct(a)                 np.unique of an integer numpy array, without importing numpy.ma
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional

import numpy as np
import pyarrow as pa
from pyarrow._compute import call_function


def from_numpy(
    values: np.ndarray, ok: Optional[np.ndarray] = None, type: Optional[pa.DataType] = None
) -> pa.Array:
    """An Arrow array of `values` (a numeric numpy array), null where `ok` is False."""
    typ = type if type is not None else pa.from_numpy_dtype(values.dtype)
    values = np.ascontiguousarray(values, dtype=_np_dtype(typ))
    n = len(values)
    validity, nulls = _validity(ok, n)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(values)], null_count=nulls)


_NP = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8}


def _validity(ok: Optional[np.ndarray], n: int) -> tuple[Optional[pa.Buffer], int]:
    if ok is None:
        return None, 0
    valid_count = int(np.count_nonzero(ok))
    if valid_count == n:
        return None, 0
    return pa.py_buffer(np.packbits(ok, bitorder="little")), n - valid_count


def bools(mask: np.ndarray) -> pa.BooleanArray:
    """A BooleanArray (no nulls) of a numpy bool mask."""
    mask = np.asarray(mask, dtype=bool)
    return pa.Array.from_buffers(
        pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))]
    )


def filter_rows(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """`table.filter(bools(mask))`, without importing pyarrow.compute: Table.filter reaches Arrow's
    filter kernel through that module's Python wrappers, generated at its import (start-up time, in the
    parent and in each decode worker); `call_function` is the kernel's own entry point."""

    return call_function("filter", [table, bools(mask)])


def strings(items: list[str]) -> pa.StringArray:
    """A StringArray (no nulls) of Python strings."""
    encoded = [s.encode("utf-8", "surrogatepass") for s in items]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    if encoded:
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
    data = b"".join(encoded)
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def dictionary(codes: np.ndarray, uniques: list[str]) -> pa.DictionaryArray:
    """A dictionary<int32, string> array: `codes` index `uniques`, -1 is null."""
    codes = np.asarray(codes, dtype=np.int32)
    indices = from_numpy(codes, codes >= 0, pa.int32())
    return pa.DictionaryArray.from_arrays(indices, strings(uniques))


def nulls(n: int, type: pa.DataType, zeros: Optional[pa.Buffer] = None) -> pa.Array:
    """An all-null array of `type` (integer or dictionary<int32, string>). Its buffers come from
    np.zeros (calloc), so the pages are never touched: pa.nulls zero-fills them. `zeros`
    (`zero_buffer(n)`): one zeroed buffer
    that every null column of a table shares as its bitmap and values, read-only as all Arrow
    buffers are: calloc does zero-fill memory the heap reuses (a parse keeps its freed heap pages,
    `tracekit.parse.parser._keep_heap_pages`; benchmarks/RESULTS.md has the measurements)."""
    if pa.types.is_dictionary(type):
        return pa.DictionaryArray.from_arrays(nulls(n, type.index_type, zeros), strings([]))
    width = _np_dtype(type).itemsize
    if zeros is None or zeros.size < n * width:
        zeros = zero_buffer(n)
    return pa.Array.from_buffers(type, n, [zeros, zeros], null_count=n)


def zero_buffer(n: int) -> pa.Buffer:
    """A zeroed buffer long enough for the bitmap and the values of any `nulls(n, ...)` array."""
    return pa.py_buffer(np.zeros(max(n, 1), dtype=np.int64))


def _chunks(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(arr.chunks) if isinstance(arr, pa.ChunkedArray) else [arr]


def _np_dtype(typ: pa.DataType) -> np.dtype:
    return np.dtype(_NP[str(typ)])


def valid(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """True where `arr` is not null."""
    parts = []
    for chunk in _chunks(arr):
        n = len(chunk)
        if chunk.null_count == 0:
            parts.append(np.ones(n, dtype=bool))
        elif chunk.null_count == n or chunk.type == pa.null():
            parts.append(np.zeros(n, dtype=bool))
        else:
            bitmap = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)
            bits = np.unpackbits(bitmap, bitorder="little", count=chunk.offset + n)
            parts.append(bits[chunk.offset :].astype(bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def values(
    arr: pa.Array | pa.ChunkedArray, fill: int = 0, dtype: type = np.int64, out: Optional[np.ndarray] = None
) -> np.ndarray:
    """The values of an integer array as numpy `dtype` (a new array, or written into `out`), nulls as
    `fill`."""
    chunks = _chunks(arr)
    if out is None:
        out = np.empty(sum(len(c) for c in chunks), dtype=dtype)
    pos = 0
    for chunk in chunks:
        n = len(chunk)
        part = out[pos : pos + n]
        pos += n
        if chunk.null_count == n:
            part[:] = fill
            continue
        raw = np.frombuffer(chunk.buffers()[1], dtype=_np_dtype(chunk.type), count=chunk.offset + n)
        part[:] = raw[chunk.offset :]
        if chunk.null_count:
            part[~valid(chunk)] = fill
    return out


def codes(arr: pa.DictionaryArray) -> tuple[np.ndarray, list]:
    """(int32 codes with -1 for null, the dictionary as a list) of one dictionary array."""
    return values(arr.indices, fill=-1, dtype=np.int32), arr.dictionary.to_pylist()


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's memory pool (where pyarrow has it and the user did not choose one with
    ARROW_DEFAULT_MEMORY_POOL). The default, mimalloc, hands freed pages back to the OS after 10 ms, so
    the parser's Parquet encoder and its step rows fault in and zero the same memory again and again
    (`clear_page_erms` in its profile); reading a capture, mimalloc keeps the decoder's scratch as well
    (benchmarks/RESULTS.md has the CPU and resident memory with each)."""

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    with contextlib.suppress(NotImplementedError, pa.ArrowException):  # no jemalloc: keep the default
        if pa.default_memory_pool().backend_name != "jemalloc":
            pa.set_memory_pool(pa.jemalloc_memory_pool())


def distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a) of a 1-D integer array (sorted distinct values). NumPy 2's plain np.unique imports
    numpy.ma (to ask np.ma.is_masked), start-up time of a tiny parse (benchmarks/RESULTS.md).
    Counted instead of sorted when the values span little (a chunk's ranks and devices: one, or a few)."""
    a = np.asarray(a).ravel()
    if len(a) == 0:
        return a[:0].copy()
    lo, hi = int(a.min()), int(a.max())
    if lo == hi:
        return a[:1].copy()
    if hi - lo < 1 << 16:
        return (np.flatnonzero(np.bincount(a - lo)) + lo).astype(a.dtype)
    s = np.sort(a)
    return s[np.concatenate(([True], s[1:] != s[:-1]))]
