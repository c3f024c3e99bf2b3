"""Benchmark many-rank jobs: `tracekit parse` and `tracekit analyze` of N-rank jobs, wall time and the
driver's peak memory.

The jobs are built by benchmarks/rank_job.py from the real 2-rank H200 DDP capture (N - 1 distinct
copies of the fast rank, one straggler) and cached in benchmarks/data/ranks_<N>/.

    .venv/bin/python benchmarks/bench_ranks.py [--ranks 16 64 256] [--repeat 3] [--variant file folder]
        [--baseline /tmp/tracekit-main]

Each command runs as its own process, through a small wrapper that reports the process's own peak RSS
(the driver: getrusage(RUSAGE_SELF)) and the largest peak RSS among the worker processes it waited for
(RUSAGE_CHILDREN), and the CPU time of the driver and its workers together (the median over the
runs: on this shared 2-core machine it moves less than wall time). Wall time is the whole command,
from process start to exit. With --repeat, the variants are run alternately in each round (A, B, A,
B, ...), so that the load of this shared machine falls on each alike; every run is printed.
`--baseline DIR` runs another checkout of tracekit (its PYTHONPATH) alongside, as "before". The
analysis also prints how many lines its text report has and which rank the devices name as their
straggler (it must be the job's straggler).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

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
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as fh:
        json.dump({"driver_kib": me.ru_maxrss, "workers_kib": kids.ru_maxrss,
                   "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}, fh)
"""


@dataclass(frozen=True)
class Variant:
    """One way to run the job: which tracekit (PYTHONPATH), extra flags, the capture's form."""

    name: str
    flags: tuple[str, ...] = ()
    folder: bool = False
    pythonpath: str = str(ROOT)


def variants(names: list[str], baseline: Optional[Path]) -> list[Variant]:
    known = {
        "file": Variant("file"),  # this tracekit, default path, -o capture.parquet
        "folder": Variant("folder", folder=True),  # this tracekit, -o capture/
        "ray": Variant("ray", ("--ray",), folder=True),  # this tracekit on a local Ray
    }
    out = [known[n] for n in names]
    if baseline is not None:  # another checkout (e.g. main before this work), file form
        out.insert(0, Variant("before", pythonpath=str(baseline)))
    return out


def run(args: list[str], pythonpath: str, stdout=subprocess.DEVNULL) -> dict:
    """Run `tracekit ARGS`: wall seconds, driver and worker peak RSS (MiB), exit status, output."""
    with tempfile.NamedTemporaryFile(suffix=".json") as mem:
        env = {**os.environ, "PYTHONPATH": pythonpath}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, mem.name, *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            cwd=tempfile.gettempdir(),  # `python -c` puts the working directory first on sys.path
        )
        wall = time.perf_counter() - t0
        peaks = json.loads(Path(mem.name).read_text() or "{}")
    if proc.returncode != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {
        "wall_s": wall,
        "driver_mib": peaks.get("driver_kib", 0) / 1024,
        "workers_mib": peaks.get("workers_kib", 0) / 1024,
        "cpu_s": peaks.get("cpu_s", 0.0),
        "stdout": proc.stdout if isinstance(proc.stdout, str) else "",
    }


def job_size(job: Path) -> tuple[int, float]:
    files = sorted(job.glob("*.pt.trace.json.gz"))
    return len(files), sum(f.stat().st_size for f in files) / 2**20


def bench(n: int, runs: list[Variant], repeat: int, tmp: Path) -> None:
    job = build_job(n, DATA / f"ranks_{n}")
    files, mib = job_size(job)
    straggler = default_straggler(n)
    print(f"\n## {n} ranks: {files} files, {mib:.1f} MiB gzip'd, straggler rank {straggler}")
    results: dict[str, dict[str, list[dict]]] = {v.name: {"parse": [], "analyze": []} for v in runs}

    def out_of(v: Variant) -> str:
        return f"{tmp / f'{v.name}_{n}'}/" if v.folder else str(tmp / f"{v.name}_{n}.parquet")

    for _ in range(repeat):
        for v in runs:  # alternately: the machine's load falls on each variant alike
            out = out_of(v)
            results[v.name]["parse"].append(
                run(["parse", str(job), "-o", out, "--force", *v.flags], v.pythonpath)
            )
            analyze = run(["analyze", out, "--json", *v.flags], v.pythonpath, stdout=subprocess.PIPE)
            results[v.name]["analyze"].append(analyze)
    for v in runs:
        for what in ("parse", "analyze"):
            rs = results[v.name][what]
            walls = [r["wall_s"] for r in rs]
            driver, workers = max(r["driver_mib"] for r in rs), max(r["workers_mib"] for r in rs)
            cpu = statistics.median(r["cpu_s"] for r in rs)
            print(
                f"{v.name:>7} {what:<8} wall median {statistics.median(walls):5.2f} s "
                f"(runs: {', '.join(f'{w:.2f}' for w in walls)}), CPU {cpu:5.1f} s; driver peak RSS "
                f"{driver:6.0f} MiB ({driver / n:.2f} MiB/rank), largest worker {workers:5.0f} MiB"
            )
        report = json.loads(results[v.name]["analyze"][-1]["stdout"])
        named = collections.Counter(d.get("straggler_rank") for d in report["devices"])
        named.pop(None, None)
        top = named.most_common(1)[0][0] if named else None
        text = run(["analyze", out_of(v), *v.flags], v.pythonpath, stdout=subprocess.PIPE)["stdout"]
        lines = len(text.splitlines())
        print(
            f"{v.name:>7} report: {len(report['devices'])} devices in the JSON, {lines} lines "
            f"of text; straggler named by {named.get(top, 0)} devices: rank {top} "
            f"({'as built' if top == straggler else f'NOT the built straggler {straggler}'})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--variant",
        nargs="+",
        choices=["file", "folder", "ray"],
        default=["file", "folder"],
        dest="variants",
        help="file: -o capture.parquet; folder: -o capture/; ray: -o capture/ --ray",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another tracekit (e.g. main before this work, with its C scanner built) "
        "run alternately with these, as 'before'",
    )
    ap.add_argument("--baseline-max-ranks", type=int, default=256, help="skip the baseline beyond")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.ranks:
            base = args.baseline if n <= args.baseline_max_ranks else None
            bench(n, variants(args.variants, base), args.repeat, Path(tmp))
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (wall time is noisy on a shared machine)")


if __name__ == "__main__":
    main()
