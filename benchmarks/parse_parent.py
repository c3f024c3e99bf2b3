"""What a streamed `tracekit parse` costs its parent process: page faults, user and system CPU of each
phase, and the parent's peak resident memory, in process (the decode workers' own cost is not counted).

    python benchmarks/parse_parent.py TRACE [--settle]

The phases are the parser's functions, timed where the parent calls them: `_unpack` (each chunk's
derive subset), `CaptureWriter.write` (row groups appended, step rows encoded), `derive_steps` and the
sanity checks; in a tree from before the parser stopped storing busy and dispatch-gap rows, also
`write_derived_rows` (with its helper thread) and its `derive_*`.
--settle first makes the process settings `tracekit parse` makes (tracekit/__main__.py: one OpenBLAS
thread; trees before the parser stopped storing busy rows also made one malloc arena).
Run it alternately with another tree's PYTHONPATH to compare.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import tempfile
from pathlib import Path

from vm import settle


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument(
        "--settle", "--arena", action="store_true", help="the process settings of the parse command"
    )
    args = ap.parse_args(argv)
    if args.settle and not settle("parse"):  # a tree from before settle_process: the arena it then made
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    from tracekit.data import store
    from tracekit.parse import derive, sanity
    from tracekit.parse import parser as parse

    acc: dict = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])

    def usage() -> tuple[int, float, float]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_minflt, r.ru_utime, r.ru_stime

    def wrap(owner, name: str, label: str | None = None) -> None:
        f = getattr(owner, name, None)
        if f is None:  # a function an older tree does not have
            return

        def inner(*a, **k):
            f0, u0, s0 = usage()
            try:
                return f(*a, **k)
            finally:
                f1, u1, s1 = usage()
                e = acc[label or name]
                e[0], e[1], e[2], e[3] = e[0] + f1 - f0, e[1] + u1 - u0, e[2] + s1 - s0, e[3] + 1

        setattr(owner, name, inner)

    wrap(parse, "_unpack")
    wrap(store.CaptureWriter, "write", "CaptureWriter.write")
    wrap(parse, "derive_steps")  # what the parser calls; an older tree called it inside write_derived_rows
    wrap(parse, "write_derived_rows")
    for name in ("derive_busy", "derive_dispatch_gaps"):
        wrap(derive, name)
    wrap(sanity, "check", "sanity.check")
    with tempfile.TemporaryDirectory() as tmp:
        f0, u0, s0 = usage()
        parse.parse_to_file([args.trace], Path(tmp) / "capture.parquet")
        f1, u1, s1 = usage()
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
    print(f"parent: {f1 - f0} page faults, user {u1 - u0:.2f} s, system {s1 - s0:.2f} s, peak {hwm:.0f} MiB")
    for k, (faults, user, system, n) in acc.items():
        print(f"  {k:24s} x{n:<3d} {faults:6d} faults, user {user:.2f} s, system {system:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
