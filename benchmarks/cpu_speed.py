"""How fast each CPU of this machine runs the host_spin loop (workloads._train.spin), one CPU at a time.

    python3 benchmarks/cpu_speed.py [--seconds 0.6] [--json]

For every CPU this process may use: pin to it, then time TRIALS calls of the loop (each ~20 ms) and print
the fastest, median and slowest ns per iteration, with the CPU's SMT siblings. The last line names the CPU
with the lowest median (for `taskset -c`). Written for the H200 machines, whose vCPUs ran the loop at ~46 or
~90 ns/iteration from run to run. Stdlib only (the loop is imported from workloads/, torch is not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workloads._train import spin  # noqa: E402


def siblings(cpu: int) -> str:
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    return path.read_text().strip() if path.exists() else "?"


def measure(cpu: int, seconds: float, n: int) -> dict:
    os.sched_setaffinity(0, {cpu})
    spin(n)
    per_iter = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        spin(n)
        per_iter.append((time.perf_counter() - t0) / n * 1e9)
    return {
        "cpu": cpu,
        "siblings": siblings(cpu),
        "trials": len(per_iter),
        "ns_min": round(min(per_iter), 2),
        "ns_median": round(statistics.median(per_iter), 2),
        "ns_max": round(max(per_iter), 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=0.6, help="time spent on each CPU")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    rows = [measure(c, args.seconds, 300_000) for c in cpus]
    os.sched_setaffinity(0, set(cpus))
    if args.json:
        print(json.dumps(rows))
    else:
        print("cpu siblings trials ns_min ns_median ns_max")
        for r in rows:
            print(r["cpu"], r["siblings"], r["trials"], r["ns_min"], r["ns_median"], r["ns_max"])
    print("fastest", min(rows, key=lambda r: r["ns_median"])["cpu"])


if __name__ == "__main__":
    main()
