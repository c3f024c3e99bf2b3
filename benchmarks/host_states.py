"""The GPU host's speed states: tracekit's machine-speed control (capture/calibrate.py) run again and
again, free to move between CPUs and then pinned to one, with the CPU each ran on.

    python benchmarks/host_states.py [--n 30] [--device cuda] [--out FILE.json]

Why: on the lent H100 host the control moved between ~14 and ~25 µs (aten_cpu) and the Python loop
between ~46 and ~100 ns within seconds (docs/results/advice/data: the captures' `calibration`), so a
capture's host ran up to 1.8x faster or slower than the interleaved rounds it is checked against. This
says whether the states follow the CPU the process runs on (pinning would then fix the host's speed) or
the whole machine. Stdlib + torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracekit.capture.calibrate import calibrate_quietly  # noqa: E402


def cpu_now() -> int:
    """The CPU this process last ran on (/proc/self/stat field 39), -1 where unknown."""
    try:
        with open("/proc/self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def series(n: int, device: str) -> list[dict]:
    out = []
    for _ in range(n):
        t = time.monotonic()
        c = calibrate_quietly(device)
        f = c.get("figures", {})
        out.append(
            {
                "t": round(t, 3),
                "cpu": cpu_now(),
                "aten_cpu_us": round(f.get("aten_cpu", {}).get("ns", float("nan")) / 1e3, 2),
                "python_loop_ns": round(f.get("python_loop", {}).get("ns", float("nan")), 1),
            }
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    doc = {"cpus": len(cpus), "runs": {}}
    doc["runs"]["free"] = series(a.n, a.device)
    for pin in (cpus[len(cpus) // 2], cpus[-1]):
        os.sched_setaffinity(0, {pin})
        doc["runs"][f"pinned_{pin}"] = series(a.n, a.device)
    os.sched_setaffinity(0, set(cpus))
    for name, rows in doc["runs"].items():
        at = [r["aten_cpu_us"] for r in rows]
        lp = [r["python_loop_ns"] for r in rows]
        slow = sum(1 for x in lp if x > 1.5 * min(lp))
        print(
            f"{name:12} aten_cpu µs min {min(at):6.2f} median {statistics.median(at):6.2f} "
            f"max {max(at):6.2f}; "
            f"python loop ns min {min(lp):6.1f} median {statistics.median(lp):6.1f} max {max(lp):6.1f}; "
            f"slow (>1.5x the min) {slow}/{len(lp)}; cpus {sorted(set(r['cpu'] for r in rows))}"
        )
        print(
            "   loop ns by cpu:",
            {
                c: [r["python_loop_ns"] for r in rows if r["cpu"] == c]
                for c in sorted(set(r["cpu"] for r in rows))
            },
        )
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
