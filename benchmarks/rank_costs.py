"""What one rank costs a worker, and what it sends the driver: the per-rank figures behind docs/scale.md.

For each trace given (one rank's file), in this process, one core:
- parse: `tracekit.scale.tasks.parse_rank` (decode, derive, write the rank's part file): CPU seconds,
  the part's size, and the process's peak RSS growth;
- analyze: `tracekit.scale.tasks.analyze_rank` on that part: CPU seconds, peak RSS growth, and the
  pickled size of the compact result the driver receives (and how many collective kernels it holds).

    .venv/bin/python benchmarks/rank_costs.py benchmarks/data/ranks_16/rank0.pt.trace.json.gz \\
        benchmarks/data/large.pt.trace.json

Each trace runs in a fresh child process, so the peak RSS of one does not hide the next.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(trace: Path) -> dict:
    """Parse then analyse one rank file in this process (called in a child: see main)."""
    from tracekit.analysis.partial import CaptureContext, Params
    from tracekit.data.store import read_meta, write_folder_meta
    from tracekit.scale import tasks
    from tracekit.scale.job import rank_meta

    out: dict = {"trace": str(trace), "trace_mib": trace.stat().st_size / 2**20}
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "rank=0" / "part-0.parquet"
        part.parent.mkdir()
        base = _rss_mib()
        c0 = time.process_time()
        summary = tasks.parse_rank([(str(trace), trace.name)], part, False)
        out["parse_cpu_s"] = time.process_time() - c0
        out["parse_rss_growth_mib"] = _rss_mib() - base
        out["events"] = sum(t["events"] for t in summary["traces"])
        out["part_mib"] = part.stat().st_size / 2**20
        rank = summary["rank"]
        (Path(tmp) / f"rank={rank}").mkdir(exist_ok=True)
        if rank != 0:
            part.rename(Path(tmp) / f"rank={rank}" / "part-0.parquet")
        parts = [{"rank": rank, "path": f"rank={rank}/part-0.parquet", "rows": summary["rows"], "steps": 0}]
        write_folder_meta(tmp, {"sources": summary["sources"], "traces": summary["traces"]}, parts)
        meta = read_meta(tmp)
        base = _rss_mib()
        c0 = time.process_time()
        result = tasks.analyze_rank(
            tmp,
            {
                "ranks": [rank],
                "meta": rank_meta(meta, [rank]),
                "params": Params(),
                "context": CaptureContext.of(meta),
            },
        )
        out["analyze_cpu_s"] = time.process_time() - c0
        out["analyze_rss_growth_mib"] = _rss_mib() - base
        out["result_kib"] = len(pickle.dumps(result)) / 1024
        # what the result is made of: per-step figures, collectives, aggregates (KiB each)
        out["result_parts_kib"] = {
            name: len(pickle.dumps(getattr(result, name))) / 1024
            for name in (
                "devices",
                "host_steps",
                "op_stats",
                "collectives",
                "kernels",
                "top_gaps",
                "sync_sources",
            )
        }
        out["collective_kernels"] = len(result.collectives)
        out["steps"] = int(result.step_ns.size)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.traces[0])))
        return
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; one core per rank, in-process")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for trace in args.traces:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(trace.resolve())],
            capture_output=True,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{Path(r['trace']).name}: {r['trace_mib']:.1f} MiB on disk, {r['events']:,} events, "
            f"{r['steps']} steps\n"
            f"  parse   {r['parse_cpu_s']:6.2f} CPU s, peak RSS +{r['parse_rss_growth_mib']:.0f} MiB, "
            f"part file {r['part_mib']:.1f} MiB\n"
            f"  analyze {r['analyze_cpu_s']:6.2f} CPU s, peak RSS +{r['analyze_rss_growth_mib']:.0f} MiB, "
            f"result to the driver {r['result_kib']:.0f} KiB ({r['collective_kernels']} collective kernels)\n"
            "  result KiB: " + ", ".join(f"{k} {v:.0f}" for k, v in r["result_parts_kib"].items())
        )


if __name__ == "__main__":
    main()
