"""What one decode worker's chunk costs, in process: its fixed part (chunks of 24 MiB down to 64 KiB,
CPU ms per chunk and per MiB, least of 3 rounds), and the derive subset's way to the parent (packed as
Arrow IPC with LZ4, uncompressed or zstd: pack, pickle and unpickle, unpack; least of 15).

    python benchmarks/chunk_cost.py benchmarks/data/large.pt.trace.json

Each chunk runs `parser._decode_range_for_parent` as a pool worker does (scan, Arrow batch, derive
subset, Parquet row groups, the subset packed), on the trace's first 96 MiB at each size.
"""

from __future__ import annotations

import pickle
import sys
import time

import pyarrow as pa

from tracekit.parse import decode as _decode
from tracekit.parse import parser as parse


def main(path: str) -> int:
    buf, _ = _decode.read_trace_bytes(path)
    _meta, start, end = _decode.locate_events(buf)
    parse._SHARED["buf"] = buf
    print("chunk size: CPU per chunk, per MiB (least of 3 rounds)")
    for size in (24 << 20, 6 << 20, 1 << 20, 256 << 10, 64 << 10):
        ranges = _decode.split_points(buf, start, min(end, start + (96 << 20)), size)
        ranges = ranges[: max(4, min(len(ranges), (96 << 20) // size, 200))]
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            for a, b in ranges:
                parse._decode_range_for_parent((a, b, "us", path, 0), True)
            best = min(best, (time.process_time() - t) / len(ranges))
        mib = sum(b - a for a, b in ranges) / len(ranges) / 2**20
        print(f"  {mib:7.3f} MiB: {best * 1e3:6.2f} ms per chunk, {best * 1e3 / mib:6.2f} ms per MiB")
    chunks = _decode.split_points(buf, start, end, parse.CHUNK_BYTES)
    a, b = chunks[min(3, len(chunks) - 1)]
    _table, needed, _stats = parse._decode_range((a, b, "us", path, 0))
    print(f"derive subset of a 24 MiB chunk: {needed.num_rows} rows, {needed.nbytes / 1e6:.2f} MB")
    for compression in ("lz4", None, "zstd"):
        options = pa.ipc.IpcWriteOptions(compression=compression)
        best = {"pack": float("inf"), "pickle": float("inf"), "unpack": float("inf")}
        for _ in range(15):
            t = time.process_time()
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, needed.schema, options=options) as writer:
                writer.write_table(needed)
            packed = sink.getvalue()
            t1 = time.process_time()
            back = pickle.loads(pickle.dumps(packed, protocol=4))
            t2 = time.process_time()
            pa.ipc.open_stream(back).read_all()
            t3 = time.process_time()
            for k, v in (("pack", t1 - t), ("pickle", t2 - t1), ("unpack", t3 - t2)):
                best[k] = min(best[k], v)
        parts = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in best.items())
        print(f"  IPC {compression or 'uncompressed'}: {packed.size / 1e6:.2f} MB; {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
