"""Benchmark: `tracekit whatif` on the ~3.5 M-row tiled capture of bench_analyze.py (target ≤ 10 s and
≤ 2 GB on the 2-core dev machine). Runs the command end to end in a fresh process per repeat (the
first run, which warms the page cache and writes the bytecode, is reported apart) and reports each
run's CPU seconds, wall time and peak RSS (the child's own, from wait4).

    .venv/bin/python benchmarks/bench_whatif.py [--rows 3500000] [--repeat 3] [--against OLD_TREE]

`--against`: a checkout of an older tracekit (e.g. `git worktree add --detach /tmp/old COMMIT`), run
with PYTHONPATH pointing at it, alternately with this one, so that the machine's load falls on both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import tiled_capture  # noqa: E402

ARGS = ["--set", "interpreter=0.5", "--kernels", "Mul=0.5", "--unprofiled-step-ms", "2.0", "--json"]


def run_once(capture: Path, tree: Path | None) -> tuple[float, float, float]:
    """(wall s, peak RSS GiB, CPU s: user + system) of one `tracekit whatif` process."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "whatif", str(capture), *ARGS],
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=tree or None,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tracekit whatif failed ({tree or 'this tree'})")
    return wall, usage.ru_maxrss / 2**20, usage.ru_utime + usage.ru_stime  # KiB → GiB


def report(label: str, runs: list[tuple[float, float, float]]) -> str:
    walls = [w for w, _, _ in runs]
    cpus = [c for _, _, c in runs]
    return (
        f"{label}: CPU median {statistics.median(cpus):.2f} s ({', '.join(f'{c:.2f}' for c in cpus)}); "
        f"wall median {statistics.median(walls):.1f} s, min {min(walls):.1f} s over {len(runs)} "
        f"runs ({', '.join(f'{w:.1f}' for w in walls)}); peak RSS max {max(p for _, p, _ in runs):.2f} GiB "
        f"({', '.join(f'{p:.2f}' for _, p, _ in runs)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path, default=None, help="an older tracekit checkout to compare")
    a = ap.parse_args()
    capture = tiled_capture(a.rows).resolve()
    trees = {"this tree": None}
    if a.against is not None:
        trees = {f"old ({a.against})": a.against.resolve(), "this tree": None}
    print(f"capture: {capture.name}; tracekit whatif {' '.join(ARGS)}; load {os.getloadavg()[0]:.1f}")
    for label, tree in trees.items():
        first = run_once(capture, tree)[0]
        print(f"{label}: first run (cold caches): {first:.1f} s")
    runs: dict[str, list] = {label: [] for label in trees}
    for _ in range(a.repeat):  # alternately
        for label, tree in trees.items():
            runs[label].append(run_once(capture, tree))
    for label in trees:
        print(report(label, runs[label]))
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
