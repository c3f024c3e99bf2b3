"""The parse's derived rows (steps, busy intervals, dispatch gaps) in one process, N times: CPU, page
faults and resident memory of each round, on the rows a streamed parse keeps for them.

    python benchmarks/derive_phases.py benchmarks/data/large.pt.trace.json [--repeat 3]

The trace is parsed once (into a temporary capture) to collect the derive subset the parent
concatenates from its workers' chunks; then `derive_steps`, `derive_busy` and `derive_dispatch_gaps`
run on a fresh Frame of it each round. The first round pays the first touch of its memory, as the
parse's parent does; the later ones show the computation's own cost.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from tracekit.parse import derive as D
    from tracekit.parse import parser as P

    kept = []
    original = P.write_derived_rows

    def keep(needed, write, **kw):
        kept.append(needed.table)
        return original(needed, write, **kw)

    P.write_derived_rows = keep
    with tempfile.TemporaryDirectory() as tmp:
        P.parse_to_file([args.trace], Path(tmp) / "capture.parquet")
    P.write_derived_rows = original
    table = kept[0]
    print(f"derive subset: {table.num_rows} rows in {table.column('name').num_chunks} chunks")
    for i in range(args.repeat):
        r0, c0, u0 = _rss_mib(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        fr = D.Frame(table)
        t0 = time.process_time()
        steps = D.derive_steps(fr)
        t1 = time.process_time()
        busy = D.derive_busy(fr)
        t2 = time.process_time()
        gaps = D.derive_dispatch_gaps(fr, steps)
        t3 = time.process_time()
        u1, r1 = resource.getrusage(resource.RUSAGE_SELF), _rss_mib()
        print(
            f"round {i + 1}: CPU {t3 - c0:.3f} s "
            f"(steps {t1 - t0:.3f}, busy {t2 - t1:.3f}, gaps {t3 - t2:.3f}; "
            f"user {u1.ru_utime - u0.ru_utime:.3f}, system {u1.ru_stime - u0.ru_stime:.3f}), "
            f"{u1.ru_minflt - u0.ru_minflt} page faults, RSS {r0:.0f} -> {r1:.0f} MiB"
        )
        del fr, steps, busy, gaps
    return 0


if __name__ == "__main__":
    sys.exit(main())
