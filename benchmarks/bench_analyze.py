"""Benchmark: `tracekit analyze` of a ~3.5 M-event capture (target ≤ 3 s on the 2-core dev machine): the
attribution, and the savings beside it (the what-if graph built from the same frames, one replay per
cause, profiled and unprofiled), timed as `tracekit.api.analyze` runs them, with and without the savings
alternately, and by phase.

The capture is a real H200 trace (fixtures/h200_probe/tiny: 300 tiny ops per step in a Python loop, with
python_function events) tiled in time until it holds the requested number of rows: each copy is shifted
past the previous one, with its step numbers, correlation ids, external ids and python ids offset, so
the structure (nesting, launches, flows) is the real one at scale. It is cached in benchmarks/data/.

    .venv/bin/python benchmarks/bench_analyze.py [--rows 3500000] [--repeat 3]

Reading the Parquet file is not part of it (measured apart).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.pipeline import analyze, prepare
from tracekit.api import analyze as api_analyze
from tracekit.data.schema import SCHEMA
from tracekit.data.store import read_capture, write_capture
from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz"
DATA = ROOT / "benchmarks" / "data"


def tiled_capture(rows: int) -> Path:
    out = DATA / f"tiled_tiny_{rows}.parquet"
    if out.exists():
        return out
    base = parse_paths([FIXTURE])
    t = base.table.cast(SCHEMA)
    copies = -(-rows // t.num_rows)
    ts = t.column("ts_ns").to_numpy(zero_copy_only=False)
    end = ts + np.nan_to_num(t.column("dur_ns").to_numpy(zero_copy_only=False).astype(float)).astype(np.int64)
    span = int(np.nanmax(end) - np.nanmin(ts)) + 1_000_000
    step = t.column("step")
    max_step = pc.max(step).as_py() or 0
    offsets = {
        "correlation": (pc.max(t.column("correlation")).as_py() or 0) + 1,
        "external_id": (pc.max(t.column("external_id")).as_py() or 0) + 1,
        "py_id": (pc.max(t.column("py_id")).as_py() or 0) + 1,
        "py_parent": (pc.max(t.column("py_id")).as_py() or 0) + 1,
        "flow_id": (pc.max(t.column("flow_id")).as_py() or 0) + 1,
    }
    parts = []
    for k in range(copies):  # one loop per copy (tens), vectorised inside
        cols = {}
        for name in t.column_names:
            col = t.column(name)
            if name == "ts_ns":
                col = pc.add(col, pa.scalar(k * span, pa.int64()))
            elif name == "step":
                col = pc.add(col, pa.scalar(k * (max_step + 1), pa.int32()))
            elif name in offsets:
                col = pc.add(col, pa.scalar(k * offsets[name], col.type))
            cols[name] = col
        parts.append(pa.table(cols, schema=SCHEMA))
    table = pa.concat_tables(parts).slice(0, rows) if copies * t.num_rows > rows else pa.concat_tables(parts)
    DATA.mkdir(parents=True, exist_ok=True)
    base.table = table
    write_capture(base, out, force=True)
    return out


def timed(fn) -> tuple[float, float, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def phases(cap) -> dict[str, list[float]]:
    """One run of `api.analyze` cut into its steps: [wall s, CPU s] each."""
    from tracekit.whatif.predict import Replayer
    from tracekit.whatif.savings import cause_savings

    out = {}
    *out["frames and host threads"], ctx = timed(lambda: prepare(cap, 2000))
    *out["attribution"], _ = timed(lambda: analyze(cap, context=ctx))
    *out["graph (from the same frames)"], rp = timed(lambda: Replayer.of(cap, ctx.fr, ctx.threads))
    *out["savings replays"], _ = timed(lambda: cause_savings(rp))
    return out


def summary(label: str, runs: list[tuple[float, float]]) -> str:
    wall = [w for w, _ in runs]
    cpu = [c for _, c in runs]
    return (
        f"{label}: wall median {statistics.median(wall):.2f} s, min {min(wall):.2f} s; CPU median "
        f"{statistics.median(cpu):.2f} s, min {min(cpu):.2f} s over {len(runs)} runs"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_500_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = tiled_capture(args.rows)
    read_s, _, cap = timed(lambda: read_capture(path))
    api_analyze(cap)  # a first run pays the imports and first-touch costs once per process
    full, bare = [], []
    report = None
    for _ in range(args.repeat):  # alternately, so that the machine's load falls on both alike
        w, c, a = timed(lambda: api_analyze(cap))
        full.append((w, c))
        w, c, b = timed(lambda: api_analyze(cap, savings=False))
        bare.append((w, c))
        report = a.report
    check_s, _, _ = timed(lambda: check_invariants(report))
    dev = report.devices[0]
    gaps = sum(s.idle_gaps for s in dev.samples)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"capture: {path.name}: {cap.table.num_rows:,} rows, {dev.steps} steps, {gaps:,} idle gaps")
    print(f"read_capture: {read_s:.2f} s")
    print(summary("analyze (attribution + savings)", full))
    print(summary("analyze --no-savings (attribution)", bare))
    by_phase = phases(cap).items()
    print("one run by phase (wall / CPU): " + ", ".join(f"{k} {w:.2f} / {c:.2f} s" for k, (w, c) in by_phase))
    print(f"load average while it ran: {os.getloadavg()[0]:.1f} (wall time is noisy on a shared machine)")
    print(f"check_invariants: {check_s:.2f} s")


if __name__ == "__main__":
    main()
