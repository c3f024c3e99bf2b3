"""What the capture's read of the allocator costs at each step boundary (issue 38: "without slowing the
step"): tracekit.capture.memory.read_allocator (one nested-dict read, then the peaks reset) against what
the capture did before (torch.cuda.max_memory_allocated, which flattens the whole statistics dictionary
in Python, then the reset), with the allocator holding a few thousand blocks as a training step leaves it.

    python benchmarks/memory_stats_cost.py [--calls 2000]      # prints one JSON object

Both are host work between two steps: where the host runs ahead of the device it overlaps the device's
work; where the host is the bottleneck it adds to the step. Needs CUDA (without it: says so, exit 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    from tracekit.capture.memory import read_allocator

    blocks = [torch.empty(1 << (10 + i % 12), device="cuda") for i in range(4000)]  # noqa: F841
    torch.cuda.synchronize()

    def before() -> None:
        torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()

    out = {"blocks": len(blocks)}
    for name, fn in (("before_us", before), ("read_allocator_us", read_allocator)):
        for _ in range(50):
            fn()
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - t0) / 1e3)
        out[name] = {"median": statistics.median(times), "p95": sorted(times)[int(0.95 * len(times))]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
