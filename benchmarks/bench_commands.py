"""Time tracekit's commands on a capture end to end: wall, CPU seconds and peak RSS of each process.

    python benchmarks/gen_large_trace.py --size-mb 1024 -o benchmarks/data/large.pt.trace.json
    python -m tracekit parse benchmarks/data/large.pt.trace.json -o benchmarks/data/large.parquet
    python benchmarks/bench_commands.py benchmarks/data/large.parquet [--against DIR] [--repeat 3]

Each command (`info`, `analyze --json`, `analyze --json --no-savings`, `whatif --set interpreter=0
--json`) runs as its own process, as a user runs it; its CPU seconds (user + system, its workers
included) and peak RSS come from `wait4` of that process, and the 1-minute load average at its start is
printed beside it: on a shared machine wall time follows the other jobs, CPU time much less. With
--against DIR (another checkout, its C extension built in place), every command runs alternately with
that tree's tracekit, so both see the same load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from vm import WARM_HELP, tree_env, warm

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = {
    "info": ["info"],
    "analyze --json": ["analyze", "--json"],
    "analyze --json --no-savings": ["analyze", "--json", "--no-savings"],
    "whatif --set interpreter=0 --json": ["whatif", "--set", "interpreter=0", "--json"],
}


def run(root: Path, args: list[str], capture: Path) -> dict:
    """One command of the tracekit at `root`: wall s, CPU s, peak RSS bytes, load at its start."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", args[0], str(capture), *args[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=tree_env(root),
        cwd=root,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed ({proc.returncode}): {err[-2000:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss * 1024,  # KiB on Linux
        "load": load,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path, help="a capture (tracekit parse ... -o capture.parquet)")
    ap.add_argument("--against", type=Path, help="another checkout to run alternately")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", help="only these commands (a key of COMMANDS)")
    ap.add_argument("--warm", type=float, default=0, help=WARM_HELP)
    args = ap.parse_args(argv)
    roots = [ROOT] + ([args.against.resolve()] if args.against else [])
    names = args.only or list(COMMANDS)
    cpus = f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs"
    print(f"{args.capture} ({args.capture.stat().st_size / 2**20:.0f} MiB), {cpus}")
    results: dict = {(n, r): [] for n in names for r in roots}
    for _ in range(args.repeat):
        for name in names:
            for root in roots:
                warm(args.warm)
                results[(name, root)].append(run(root, COMMANDS[name], args.capture.resolve()))
    for name in names:
        for root in roots:
            rs = results[(name, root)]
            label = "this tree" if root == ROOT else str(root)
            runs = ", ".join(f"{r['wall']:.1f}/{r['cpu']:.1f} at {r['load']:.1f}" for r in rs)
            print(
                f"{name:36s} {label}: wall median {_median(rs, 'wall'):.1f} s, "
                f"CPU median {_median(rs, 'cpu'):.2f} s, "
                f"peak RSS max {max(r['rss'] for r in rs) / 2**30:.2f} GiB; runs (wall/CPU s at load): {runs}"
            )
    return 0


def _median(runs: list[dict], key: str) -> float:
    return sorted(r[key] for r in runs)[len(runs) // 2]


if __name__ == "__main__":
    sys.exit(main())
