"""Benchmark the C scanner alone (tracekit/parse/_fastscan.c, the installed extension) on parse-sized chunks.

    python benchmarks/gen_large_trace.py --size-mb 1024 -o benchmarks/data/large.pt.trace.json
    python benchmarks/bench_scan.py [benchmarks/data/large.pt.trace.json] [--chunks 12] [--repeat 3]

Splits the trace's event array the way `tracekit parse` does (parse.CHUNK_BYTES per chunk), copies the
first --chunks chunks to bytes, then times `_fastscan.scan(chunk, 0, -1, True)` over all of them,
--repeat times. It prints the best round: CPU ms per chunk (time.process_time, so other processes on the
machine do not count), MB/s (chunk bytes / CPU seconds) and minor page faults per chunk. CPU time is
what counts on a shared machine.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracekit.parse import decode as _decode  # noqa: E402
from tracekit.parse import parser as parse  # noqa: E402

try:
    from tracekit.parse import _fastscan
except ImportError:
    sys.exit("tracekit.parse._fastscan is not built: run `pip install -e . --no-deps`")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(ROOT / "benchmarks/data/large.pt.trace.json"))
    ap.add_argument("--chunks", type=int, default=12, help="chunks to time (default 12)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best one is reported (default 3)")
    args = ap.parse_args()

    path = Path(args.trace)
    if not path.exists():
        sys.exit(
            f"{path} is missing: generate it with benchmarks/gen_large_trace.py --size-mb 1024 -o {path}"
        )
    buf, _ = _decode.read_trace_bytes(path)
    _meta, start, end = _decode.locate_events(buf)
    ranges = _decode.split_points(buf, start, end, parse.CHUNK_BYTES)[: args.chunks]
    chunks = [bytes(buf[a:b]) for a, b in ranges]
    del buf
    total = sum(map(len, chunks))

    events = 0
    for c in chunks:  # warm-up round, and check that the scanner accepts every chunk
        out = _fastscan.scan(c, 0, -1, True)
        if out is None:
            sys.exit("the scanner declined a chunk: the benchmark would time the decline, not the scan")
        events += out[0]
        del out

    best, faults = float("inf"), 0
    for _ in range(args.repeat):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.process_time()
        for c in chunks:
            _fastscan.scan(c, 0, -1, True)
        dt = time.process_time() - t0
        if dt < best:
            best, faults = dt, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

    k = len(chunks)
    print(
        f"{k} chunks of {total / k / 2**20:.1f} MiB ({events / k:.0f} events each), best of {args.repeat}: "
        f"{best * 1000 / k:.1f} ms CPU per chunk, {total / best / 1e6:.0f} MB/s, "
        f"{faults / k:.0f} page faults per chunk"
    )


if __name__ == "__main__":
    main()
