"""The savings' replay pass under other memory layouts, in process: the graph relabelled in topological
order, and one result buffer reused across passes, against the pass as `replay.replay_many` makes it.

    python benchmarks/replay_layout.py CAPTURE [--rounds 4]

Builds the capture's replay graph as the savings do (tracekit.whatif.savings), then times, each round,
a 4-scenario pass of `_loops.longest_paths` on the graph as built and on its topological relabelling
(checking both give the same node times), and three passes into fresh result arrays against three into
one reused array. Needs the C extension (tracekit/whatif/_loops.c).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    from tracekit.analysis.causes import SCALED_CAUSES
    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.analysis.partial import Params
    from tracekit.analysis.pipeline import prepare
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_capture
    from tracekit.whatif import replay as R
    from tracekit.whatif.graph import sync_records
    from tracekit.whatif.predict import Replayer
    from tracekit.whatif.scenario import WhatIfOptions

    c = importlib.import_module("tracekit.whatif._loops")
    cap = read_capture(args.capture, columns=loaded_columns(True), kinds=ANALYSIS_KINDS)
    whole = prepare(
        cap, Params().sync_tolerance_ns, release=lambda: setattr(cap, "table", sync_records(cap.table))
    )
    g = Replayer.of(cap, whole.fr, whole.threads, keep_frames=False, unchanged=False).graph
    ws = [
        R.weights(g, WhatIfOptions(set={k: 0.0}), 1000.0 * (i % 2)) for i, k in enumerate(SCALED_CAUSES[:4])
    ]
    scen = (
        np.ascontiguousarray(np.stack([w.host_f for w in ws]), np.float64),
        ws[0].rank_f,
        np.array([w.cost_half_ns for w in ws], np.float64),
        ws[0].act_f,
        np.array([w.drop_wait for w in ws], np.bool_),
        ws[0].edge_f,
        np.asarray(ws[0].edge_add, np.float64),
    )
    built = (g.order, g.indptr, g.in_edges, g.src, g.w, g.lb, g.ecls, g.state, g.rank, g.act, g.cost)
    t = time.process_time()
    n = g.lb.size
    order = g.order.astype(np.int64)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    lens = np.diff(g.indptr)[order]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    edges = g.in_edges[np.repeat(g.indptr[:-1][order] - indptr[:-1], lens) + np.arange(indptr[-1])]
    ix = g.src.dtype
    relabelled = (
        np.arange(n, dtype=ix), indptr, np.arange(edges.size, dtype=ix), pos[g.src[edges]].astype(ix),
        g.w[edges], g.lb[order], g.ecls[edges], g.state[edges], g.rank[edges], g.act[edges], g.cost[edges],
    )  # fmt: skip
    print(f"{n} nodes, {g.src.size} edges; relabelling took {time.process_time() - t:.2f} CPU-s")

    def run(graph, rep) -> np.ndarray:
        c.longest_paths(*graph, *scen, rep)
        return rep

    a, b = run(built, np.empty((n, 4), np.int64)), run(relabelled, np.empty((n, 4), np.int64))
    print("same node times:", bool(np.array_equal(a, b[pos])))
    buf = np.empty((n, 4), np.int64)
    for r in range(args.rounds):
        times = {}
        for name, graph in (("as built", built), ("relabelled", relabelled)):
            t = time.process_time()
            run(graph, np.empty((n, 4), np.int64))
            times[name] = time.process_time() - t
        t = time.process_time()
        for _ in range(3):
            run(built, np.empty((n, 4), np.int64))
        times["3 passes, fresh arrays"] = time.process_time() - t
        t = time.process_time()
        for _ in range(3):
            run(built, buf)
        times["3 passes, one array"] = time.process_time() - t
        print(f"round {r + 1}: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
