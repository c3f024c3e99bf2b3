"""Where the what-if graph's build (`Replayer.of`, what the savings of `tracekit analyze` build) spends its
CPU, step by step, the least of N builds in one process.

    python benchmarks/graph_phases.py benchmarks/data/large.parquet [--repeat 5]

The capture is read and its frames, host threads and attribution made as `tracekit analyze` makes them
(the graph reuses the threads the attribution built); then the graph is built N times, each builder step
timed (process CPU seconds); the least of each is printed. Later builds find their memory mapped, so the
minima are the computation's own cost on a VM whose first-touch page faults vary from run to run.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.analysis.partial import CaptureContext, Params, analyze_partial
    from tracekit.analysis.pipeline import prepare
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_capture
    from tracekit.whatif import graph as G
    from tracekit.whatif import predict as P

    cap = read_capture(args.capture, columns=loaded_columns(True), kinds=ANALYSIS_KINDS)
    whole = prepare(
        cap, Params().sync_tolerance_ns, release=lambda: setattr(cap, "table", G.sync_records(cap.table))
    )
    analyze_partial(cap.table, CaptureContext.of(cap.meta), Params(), frames=whole.fr, threads=whole.threads)
    spent: dict = {}

    def timed(owner, name: str) -> None:
        f = getattr(owner, name, None)
        if f is None:  # a step an older tree does not have (for runs with its PYTHONPATH)
            return

        def wrapper(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t

        setattr(owner, name, wrapper)

    steps = ("__init__", "host_chains", "device_chains", "launches", "syncs", "collectives", "cross_stream")
    for name in (*steps, "_node_cycles", "_columns", "finish"):
        timed(G._Builder, name)
    for name in ("grouped", "binding_weights", "topological_order"):
        timed(G, name)
    for name in ("StepModel", "replay"):
        timed(P, name)
    known = inspect.signature(P.Replayer.of).parameters
    kw = {k: False for k in ("keep_frames", "unchanged") if k in known}  # as the savings build it
    least: dict = {}
    for _ in range(args.repeat):
        spent.clear()
        t = time.process_time()
        rp = P.Replayer.of(cap, whole.fr, whole.threads, **kw)
        spent["Replayer.of (all)"] = time.process_time() - t
        del rp
        for k, v in spent.items():
            least[k] = min(least.get(k, v), v)
    print(f"least CPU of {args.repeat} builds (s):")
    for k, v in least.items():
        print(f"  {k:22s} {v:.3f}")
    return 0


if __name__ == "__main__":
    from vm import settle

    settle("analyze")
    sys.exit(main())
