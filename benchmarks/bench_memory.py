"""Benchmark: the commands that read a trace's memory events, on a large trace that holds many of them
(issue 38's target: the analysis of a 1 GB trace with memory events within the memory budget of
benchmarks/RESULTS.md, 1 GiB per GB).

The trace is a real capture with memory events (fixtures/cpu_memory/heavy_mlp: heavy_mlp on the CPU with
`profile_memory=true`, where every op allocates, so memory events are 45 % of its events) tiled in time
by benchmarks/gen_large_trace.py to the requested size and parsed once (cached in benchmarks/data/).
Each command runs in its own process; its peak RSS is the child's ru_maxrss (wait4), its CPU time the
child's user + system time.

    .venv/bin/python benchmarks/bench_memory.py [--size-mb 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = next((ROOT / "fixtures" / "cpu_memory" / "heavy_mlp").glob("*.pt.trace.json.gz"))
DATA = ROOT / "benchmarks" / "data"
COMMANDS = {
    "analyze --json --no-savings": ["analyze", "--json", "--no-savings"],
    "analyze --json": ["analyze", "--json"],
    "memory --json": ["memory", "--json"],
    "memory --batch-scale 2 --checkpoint 4 --json": ["memory", "--batch-scale", "2", "--checkpoint", "4"]
    + ["--json"],
}


def run(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS GiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed: {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    py = sys.executable
    trace = DATA / f"memory_{args.size_mb:g}mb.pt.trace.json"
    capture = trace.with_suffix("").with_suffix(".parquet")
    if not trace.exists():
        subprocess.run(
            [py, str(ROOT / "benchmarks/gen_large_trace.py"), "--source", str(SOURCE)]
            + ["--size-mb", str(args.size_mb), "-o", str(trace)],
            check=True,
        )
    if not capture.exists():
        subprocess.run([py, "-m", "tracekit", "parse", str(trace), "-o", str(capture)], check=True)
    size_gb = trace.stat().st_size / 1e9
    print(f"trace {trace.name}: {size_gb:.2f} GB; load {os.getloadavg()[0]:.1f}; each command {args.repeat}x")
    for name, cmd in COMMANDS.items():
        runs = [run([py, "-m", "tracekit", *cmd, str(capture)]) for _ in range(args.repeat)]
        peak = max(r[2] for r in runs)
        cpu = sorted(r[1] for r in runs)[len(runs) // 2]
        per_gb = peak / size_gb
        print(f"{name:48s} CPU median {cpu:6.2f} s, peak RSS {peak:.2f} GiB ({per_gb:.2f} GiB per GB)")


if __name__ == "__main__":
    main(sys.argv[1:])
