"""The savings' replays of one capture called several times in one process: user and system CPU of each.

    python benchmarks/savings_calls.py CAPTURE [--calls 4]

Reads the capture, prepares its frames and builds the what-if graph as `tracekit analyze`'s savings do
(`tracekit.whatif.savings.with_savings`), then calls `cause_savings` --calls times, the unchanged replay
forgotten before each, with getrusage around each call. The first call pays for the memory its passes
touch first; the later ones reuse what it freed: on a VM that backs guest memory lazily the difference
is the system time of those first touches (benchmarks/RESULTS.md, 2026-12-04).
"""

from __future__ import annotations

import argparse
import resource
import sys

from vm import settle


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--calls", type=int, default=4)
    args = ap.parse_args(argv)
    settle("analyze")
    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.analysis.partial import Params
    from tracekit.analysis.pipeline import prepare
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_capture
    from tracekit.whatif.graph import sync_records
    from tracekit.whatif.predict import Replayer
    from tracekit.whatif.savings import cause_savings

    cap = read_capture(args.capture, columns=loaded_columns(True), kinds=ANALYSIS_KINDS)
    whole = prepare(
        cap, Params().sync_tolerance_ns, release=lambda: setattr(cap, "table", sync_records(cap.table))
    )
    rp = Replayer.of(cap, whole.fr, whole.threads, keep_frames=False, unchanged=False)
    del whole
    print(f"graph: {len(rp.graph.order):,} nodes, {len(rp.graph.src):,} edges")
    for i in range(args.calls):
        before = resource.getrusage(resource.RUSAGE_SELF)
        rp.unchanged = None
        cause_savings(rp)
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"call {i + 1}: user {after.ru_utime - before.ru_utime:.3f} s, "
            f"system {after.ru_stime - before.ru_stime:.3f} s, "
            f"{after.ru_minflt - before.ru_minflt:,} page faults"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
