"""Benchmark: the what-if dependency graph of the ~3.5 M-row tiled capture of bench_analyze.py, built
from frames already loaded (the host threads' states built inside, as `whatif` does; `analyze` has them
from its attribution already) — wall and CPU per build,
best and median of N, in a fresh process per tree; with `--against OLD_TREE` an older checkout is run
too, alternately, with PYTHONPATH pointing at it (e.g. `git worktree add --detach /tmp/old COMMIT`).

    .venv/bin/python benchmarks/bench_graph.py [--repeat 5] [--rounds 2] [--against OLD_TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = """
import json, sys, time
from tracekit.analysis.events import load_frames
from tracekit.analysis.host import Threads
from tracekit.data.store import read_capture
from tracekit.whatif.graph import build_graph, recorded_stream_waits
cap = read_capture(sys.argv[1])
fr = load_frames(cap.table)
waits = recorded_stream_waits(cap.table)
out = []
for i in range(int(sys.argv[2]) + 1):  # the first build loads the compiled loops: not counted
    th = Threads(fr.host, fr.steps)
    t0, c0 = time.perf_counter(), time.process_time()
    g = build_graph(fr, th, waits)
    if i:
        out.append((time.perf_counter() - t0, time.process_time() - c0))
print(json.dumps({"runs": out, "nodes": int(g.obs.size), "edges": int(g.src.size)}))
"""


def build_times(capture: Path, tree: Path | None, repeat: int) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(capture), str(repeat)],
        env=env,
        cwd=tree or None,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    from bench_analyze import tiled_capture

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_500_000)
    ap.add_argument("--repeat", type=int, default=5, help="builds per process")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree, alternately")
    ap.add_argument("--against", type=Path, default=None)
    a = ap.parse_args()
    capture = tiled_capture(a.rows).resolve()
    trees = {"this tree": None}
    if a.against is not None:
        trees = {f"old ({a.against})": a.against.resolve(), "this tree": None}
    runs: dict[str, list] = {k: [] for k in trees}
    print(f"capture: {capture.name}; load {os.getloadavg()[0]:.1f}")
    for _ in range(a.rounds):
        for label, tree in trees.items():
            got = build_times(capture, tree, a.repeat)
            runs[label] += got["runs"]
            size = f"{got['nodes']:,} nodes, {got['edges']:,} edges"
    for label, r in runs.items():
        wall, cpu = [w for w, _ in r], [c for _, c in r]
        print(
            f"{label}: build_graph wall median {statistics.median(wall):.2f} s, min {min(wall):.2f} s; "
            f"CPU median {statistics.median(cpu):.2f} s, min {min(cpu):.2f} s over {len(r)} builds ({size})"
        )
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
