"""What each column of a parse's chunk costs the Parquet writer, and the writer's batch size.

    python benchmarks/encode_columns.py benchmarks/data/large.pt.trace.json

Decodes one 24 MiB chunk of the trace as a decode worker does, then times (best of 9, CPU) encoding it
as a capture's row groups (`store.encode_rows`' options) whole, without each column in turn (what that
column costs), without all its all-null columns, and with write_batch_size 1 Ki, 64 Ki and 1 Mi (checking
that the bytes are the same).
"""

from __future__ import annotations

import hashlib
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import store
from tracekit.parse import decode as _decode
from tracekit.parse import parser as parse


def encode(table: pa.Table, **extra) -> tuple[float, str]:
    options = {**store._parquet_options(table.schema), **extra}
    best, digest = float("inf"), ""
    for _ in range(9):
        sink = pa.BufferOutputStream()
        t = time.process_time()
        with pq.ParquetWriter(sink, table.schema, **options) as writer:
            writer.write_table(table)
        best = min(best, time.process_time() - t)
        digest = hashlib.md5(sink.getvalue().to_pybytes()).hexdigest()
    return best * 1e3, digest


def main(path: str) -> int:
    buf, _ = _decode.read_trace_bytes(path)
    _meta, start, end = _decode.locate_events(buf)
    ranges = _decode.split_points(buf, start, end, parse.CHUNK_BYTES)
    parse._SHARED["buf"] = buf
    table, _needed, _stats = parse._decode_range((*ranges[min(3, len(ranges) - 1)], "us", path, 0))
    encode(table)  # warm: the first writer of a process costs ~6 ms more (which every column's figure took)
    whole, _ = encode(table)
    print(f"chunk: {table.num_rows} rows; encoded whole in {whole:.2f} ms")
    for n in table.schema.names:
        rest = table.select([m for m in table.schema.names if m != n])
        print(f"  {n:16s} {whole - encode(rest)[0]:5.2f} ms  ({table.column(n).null_count} nulls)")
    filled = [n for n in table.schema.names if table.column(n).null_count < table.num_rows]
    lean, _ = encode(table.select(filled))
    print(f"without its {len(table.schema) - len(filled)} all-null columns: {lean:.2f} ms")
    for size in (1024, 1 << 16, 1 << 20):
        ms, digest = encode(table, write_batch_size=size)
        print(f"write_batch_size {size}: {ms:.2f} ms, bytes md5 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
