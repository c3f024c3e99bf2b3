"""Parquet writer options for one 24 MiB chunk of a parse: CPU ms (least of N) and the bytes written,
against the capture's own options (`store._parquet_options`).

    python benchmarks/encode_options.py benchmarks/data/large.pt.trace.json [--repeat 40]

Decodes the fourth chunk of the trace as a decode worker does, then encodes it as one Parquet file
with each variant: data pages v2, no statistics, write batches of 8 Ki rows, no dictionaries, no
compression, plain integers (no DELTA_BINARY_PACKED), the never-null columns declared required, and
without its all-null columns (a lower bound the schema does not allow).
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import store
from tracekit.parse import decode as _decode
from tracekit.parse import parser as parse


def encode(table: pa.Table, repeat: int, schema: pa.Schema | None = None, **extra) -> tuple[float, int]:
    schema = schema or table.schema
    options = {**store._parquet_options(schema), **extra}
    best, size = float("inf"), 0
    for _ in range(repeat):
        sink = pa.BufferOutputStream()
        t = time.process_time()
        with pq.ParquetWriter(sink, schema, **options) as writer:
            writer.write_table(table)
        best = min(best, time.process_time() - t)
        size = sink.getvalue().size
    return best * 1e3, size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args(argv)
    buf, _ = _decode.read_trace_bytes(args.trace)
    _meta, start, end = _decode.locate_events(buf)
    ranges = _decode.split_points(buf, start, end, parse.CHUNK_BYTES)
    parse._SHARED["buf"] = buf
    table, _needed, _stats = parse._decode_range((*ranges[min(3, len(ranges) - 1)], "us", args.trace, 0))
    never = {n for n in table.schema.names if table.column(n).null_count == 0}
    all_null = {n for n in table.schema.names if table.column(n).null_count == table.num_rows}
    required = pa.schema([f.with_nullable(False) if f.name in never else f for f in table.schema])
    dictionaries = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    variants = {
        "the capture's options": lambda: encode(table, args.repeat),
        "data pages v2": lambda: encode(table, args.repeat, data_page_version="2.0"),
        "no statistics": lambda: encode(table, args.repeat, write_statistics=False),
        "write batches of 8 Ki": lambda: encode(table, args.repeat, write_batch_size=8192),
        "no dictionaries": lambda: encode(table, args.repeat, use_dictionary=False),
        "no compression": lambda: encode(table, args.repeat, compression="none"),
        "plain integers": lambda: encode(
            table, args.repeat, column_encoding=None, use_dictionary=dictionaries
        ),
        "never-null columns required": lambda: encode(
            pa.Table.from_arrays(table.columns, schema=required), args.repeat, schema=required
        ),
        f"without its {len(all_null)} all-null columns": lambda: encode(
            table.select([n for n in table.schema.names if n not in all_null]), args.repeat
        ),
    }
    print(f"chunk: {table.num_rows} rows, {len(table.schema)} columns; least CPU of {args.repeat}")
    for name, run in variants.items():
        ms, size = run()
        print(f"  {name:32s} {ms:6.2f} ms  {size / 1e3:7.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
