"""Benchmark: `tracekit whatif` on the ~3.5 M-row tiled capture of bench_analyze.py (target ≤ 10 s and
≤ 2 GB on the 2-core dev machine). Runs the command end to end in a fresh process per repeat (the
numba-compiled loops come from their on-disk cache after the first run, which is reported apart) and
reports wall time and peak RSS.

    .venv/bin/python benchmarks/bench_whatif.py [--rows 3500000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import tiled_capture  # noqa: E402

ARGS = ["--set", "interpreter=0.5", "--kernels", "Mul=0.5", "--unprofiled-step-ms", "2.0", "--json"]


def run_once(capture: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(
        [sys.executable, "-m", "tracekit", "whatif", str(capture), *ARGS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 2**20  # KiB → GiB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_500_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    capture = tiled_capture(a.rows)
    print(f"capture: {capture.name}; tracekit whatif {' '.join(ARGS)}; load {os.getloadavg()[0]:.1f}")
    first, peak = run_once(capture)
    print(f"first run (may compile the numba loops): {first:.1f} s")
    walls = []
    for _ in range(a.repeat):
        wall, peak = run_once(capture)
        walls.append(wall)
    print(
        f"whatif: wall median {statistics.median(walls):.1f} s, min {min(walls):.1f} s over {a.repeat} runs "
        f"({', '.join(f'{w:.1f}' for w in walls)}); peak RSS {peak:.2f} GiB (largest child so far); "
        f"load after {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
