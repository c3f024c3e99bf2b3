"""Benchmark many-rank jobs: `tracekit parse` and `tracekit analyze` of N-rank jobs, wall time and the
driver's peak memory.

The jobs are built by benchmarks/rank_job.py from the real 2-rank H200 DDP capture (N - 1 distinct
copies of the fast rank, one straggler) and cached in benchmarks/data/ranks_<N>/.

    .venv/bin/python benchmarks/bench_ranks.py [--ranks 16 64 256] [--repeat 3] [--path serial ...]

Each command runs as its own process, through a small wrapper that reports the process's own peak RSS
(the driver: getrusage(RUSAGE_SELF)) and the largest peak RSS among the worker processes it waited for
(RUSAGE_CHILDREN). Wall time is the whole command, from process start to exit. With --repeat, the
paths are run alternately in each round (A, B, A, B, ...), so that the load of this shared machine
falls on each alike; every run is printed. The analysis also prints how many lines its text report has
and which rank the devices name as their straggler (it must be the job's straggler).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rank_job import build_job, default_straggler  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"

# Runs the tracekit CLI in this process and writes its peak memory to the file named by argv[1].
WRAPPER = """
import json, resource, sys
out, sys.argv = sys.argv[1], ["tracekit", *sys.argv[2:]]
try:
    from tracekit.cli import main
    main(sys.argv[1:])
finally:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(out, "w") as fh:
        json.dump({"driver_kib": me, "workers_kib": kids}, fh)
"""

# Extra command-line flags of each execution path (the Ray path adds `--ray`).
PATHS = {"serial": [], "ray": ["--ray"]}


def run(args: list[str], stdout=subprocess.DEVNULL) -> dict:
    """Run `tracekit ARGS`: wall seconds, driver and worker peak RSS (MiB), exit status, output."""
    with tempfile.NamedTemporaryFile(suffix=".json") as mem:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, mem.name, *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        wall = time.perf_counter() - t0
        peaks = json.loads(Path(mem.name).read_text() or "{}")
    if proc.returncode != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {
        "wall_s": wall,
        "driver_mib": peaks.get("driver_kib", 0) / 1024,
        "workers_mib": peaks.get("workers_kib", 0) / 1024,
        "stdout": proc.stdout if isinstance(proc.stdout, str) else "",
    }


def job_size(job: Path) -> tuple[int, float]:
    files = sorted(job.glob("*.pt.trace.json.gz"))
    return len(files), sum(f.stat().st_size for f in files) / 2**20


def bench(n: int, paths: list[str], repeat: int, form: str, tmp: Path) -> None:
    job = build_job(n, DATA / f"ranks_{n}")
    files, mib = job_size(job)
    straggler = default_straggler(n)
    print(f"\n## {n} ranks: {files} files, {mib:.1f} MiB gzip'd, straggler rank {straggler}")
    results: dict[str, dict[str, list[dict]]] = {p: {"parse": [], "analyze": []} for p in paths}
    for _ in range(repeat):
        for p in paths:  # alternately: the machine's load falls on each path alike
            out = tmp / (f"{p}_{n}/" if form == "folder" else f"{p}_{n}.parquet")
            parse = run(["parse", str(job), "-o", str(out), "--force", *PATHS[p]])
            results[p]["parse"].append(parse)
            analyze = run(["analyze", str(out), "--json", *PATHS[p]], stdout=subprocess.PIPE)
            results[p]["analyze"].append(analyze)
    for p in paths:
        for what in ("parse", "analyze"):
            rs = results[p][what]
            walls = [r["wall_s"] for r in rs]
            driver, workers = max(r["driver_mib"] for r in rs), max(r["workers_mib"] for r in rs)
            print(
                f"{p:>7} {what:<8} wall median {statistics.median(walls):5.2f} s "
                f"(runs: {', '.join(f'{w:.2f}' for w in walls)}); driver peak RSS "
                f"{driver:6.0f} MiB, largest worker {workers:5.0f} MiB"
            )
        report = json.loads(results[p]["analyze"][-1]["stdout"])
        named = collections.Counter(d.get("straggler_rank") for d in report["devices"])
        named.pop(None, None)
        top = named.most_common(1)[0][0] if named else None
        out = tmp / (f"{p}_{n}/" if form == "folder" else f"{p}_{n}.parquet")
        text = run(["analyze", str(out), *PATHS[p]], stdout=subprocess.PIPE)["stdout"]
        print(
            f"{p:>7} report: {len(report['devices'])} devices in the JSON, {len(text.splitlines())} lines of "
            f"text; straggler named by {named.get(top, 0)} devices: rank {top} "
            f"({'as built' if top == straggler else f'NOT the built straggler {straggler}'})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--path", nargs="+", choices=sorted(PATHS), default=["serial"], dest="paths")
    ap.add_argument(
        "--form",
        choices=["file", "folder"],
        default="file",
        help="the capture's form: one .parquet file, or a folder of one Parquet file per rank",
    )
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; capture form: {args.form}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.ranks:
            bench(n, args.paths, args.repeat, args.form, Path(tmp))
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (wall time is noisy on a shared machine)")


if __name__ == "__main__":
    main()
