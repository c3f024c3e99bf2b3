"""What a local Ray costs a command (`--ray`), and what warm Ray workers gain once it runs.

    .venv/bin/python benchmarks/bench_ray_start.py [--ranks 64] [--repeat 3]

Each round, in a fresh process: start a local Ray as `--ray` does (RayExecutor(None)), run the
analysis of an N-rank capture folder twice on it (the first in fresh Ray workers, which import
tracekit; the second in the same, now warm, workers), stop it; then the same two analyses with the
default executor (a process pool forked from the driver for each call: nothing to start, nothing kept
warm). The capture is parsed once from benchmarks/rank_job.py's job into benchmarks/data/. Rounds
alternate the two executors, so the machine's load falls on both alike; every run is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rank_job import build_job  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"

ONE_RUN = """
import json, sys, time
t0 = time.perf_counter()
from tracekit.scale.executor import LocalExecutor
from tracekit.scale.job import analyze_capture
from tracekit.scale.ray_backend import RayExecutor
t1 = time.perf_counter()
ex = RayExecutor(None) if sys.argv[2] == "ray" else LocalExecutor()
t2 = time.perf_counter()
analyze_capture(sys.argv[1], executor=ex)
t3 = time.perf_counter()
analyze_capture(sys.argv[1], executor=ex)
t4 = time.perf_counter()
getattr(ex, "close", lambda: None)()
t5 = time.perf_counter()
print(json.dumps({"start": t2 - t1, "first": t3 - t2, "second": t4 - t3, "stop": t5 - t4}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    job = build_job(args.ranks, DATA / f"ranks_{args.ranks}")
    capture = DATA / f"ranks_{args.ranks}_capture"
    if not (capture / "_tracekit.json").exists():
        subprocess.run(
            [sys.executable, "-m", "tracekit", "parse", str(job), "-o", f"{capture}/", "--force"],
            check=True,
            cwd=ROOT,
        )
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.ranks}-rank capture folder")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(args.repeat):
        for which in ("ray", "local"):
            out = subprocess.run(
                [sys.executable, "-c", ONE_RUN, str(capture), which],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout
            t = json.loads(out.strip().splitlines()[-1])
            print(
                f"{which:>5}: start {t['start']:5.2f} s, analyze {t['first']:5.2f} s, "
                f"analyze again {t['second']:5.2f} s, stop {t['stop']:5.2f} s"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f} (wall time is noisy on a shared machine)")


if __name__ == "__main__":
    main()
