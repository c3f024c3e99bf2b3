"""How capture files are encoded: size and write time of the Parquet options tracekit could use.

    python benchmarks/bench_encoding.py [TRACE_OR_RUN_DIR ...]

Parses each trace (default: real traces from fixtures/) and writes the same table with each set of
Parquet options, best CPU time of 3. The options tracekit uses are store.PARQUET_OPTIONS; this is the
measurement behind that choice (benchmarks/RESULTS.md, "Parquet encoding").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data.schema import SCHEMA
from tracekit.data.store import PARQUET_OPTIONS
from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [
    ROOT / "fixtures/h200/sync_per_layer",
    ROOT / "fixtures/h200/tiny_ops",
    ROOT / "fixtures/hta/control.json.gz",
    ROOT / "fixtures/hta/nccl_data.json.gz",
    ROOT / "fixtures/hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]


def variants() -> dict[str, dict]:
    plain = {k: v for k, v in PARQUET_OPTIONS.items() if k not in ("compression", "column_encoding")}
    delta = {f.name: "DELTA_BINARY_PACKED" for f in SCHEMA if pa.types.is_integer(f.type)}
    return {
        "plain+zstd": dict(plain, compression="zstd"),
        "plain+lz4": dict(plain, compression="lz4"),
        "delta+zstd": dict(plain, compression="zstd", column_encoding=delta),
        "delta+lz4": dict(plain, compression="lz4", column_encoding=delta),
        "tracekit": PARQUET_OPTIONS,
    }


def measure(table: pa.Table, options: dict) -> tuple[int, float]:
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.parquet"
        for _ in range(3):
            t = time.process_time()
            pq.write_table(table, path, **options)
            best = min(best, time.process_time() - t)
        return os.path.getsize(path), best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    args = ap.parse_args()
    names = list(variants())
    print(f"{'trace':34s} {'rows':>8s}  " + "  ".join(f"{n:>18s}" for n in names))
    for trace in args.traces:
        table = parse_paths([trace]).table.cast(SCHEMA)
        cells = []
        for name in names:
            size, cpu = measure(table, variants()[name])
            cells.append(f"{size / 1e3:7.0f} kB {cpu * 1e3:5.0f} ms")
        print(f"{trace.name[:34]:34s} {table.num_rows:8d}  " + "  ".join(f"{c:>18s}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
