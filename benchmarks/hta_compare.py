"""Compare tracekit's device idle time with Holistic Trace Analysis (HTA) on the H200 probe traces.

HTA is NOT a tracekit dependency: install it in its own venv, then run this script with tracekit's
Python; it calls the HTA venv's Python for HTA's side.

    python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install holistictraceanalysis
    .venv/bin/python benchmarks/hta_compare.py [--hta-python /tmp/htavenv/bin/python] > table.md

For each trace it prints (µs, whole capture unless stated):
- HTA's idle time breakdown per stream (host_wait / kernel_wait / other), summed over streams;
- the same per-stream quantity recomputed from tracekit's parsed table (gaps between consecutive
  kernels of one stream over the whole trace), to show where the two definitions meet;
- tracekit's device idle inside the step windows, by cause.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "h200_probe"
TRACES = ("mlp", "sync", "tiny", "dataloader")


def hta_side(paths: list[str]) -> None:
    """Runs inside the HTA venv: one JSON object per trace on stdout."""
    import logging

    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis

    out = {}
    for p in paths:
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(p, d)
            a = TraceAnalysis(trace_dir=d)
            idle, stats = a.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=True)
            rec = {
                "idle_us": {
                    f"{int(r.stream)}/{r.idle_category}": float(r.idle_time) for r in idle.itertuples()
                },
                "intervals": {f"{int(r['stream'])}/{idx}": int(r["count"]) for idx, r in stats.iterrows()},
            }
            try:
                tb = a.get_temporal_breakdown(visualize=False)
                rec["temporal_idle_us"] = float(tb["idle_time(us)"].iloc[0])
            except Exception as exc:  # HTA asserts on some traces; record it
                rec["temporal_error"] = f"{type(exc).__name__}: {exc}"
            out[Path(p).name] = rec
    json.dump(out, sys.stdout)


def per_stream_gaps_us(capture, *, like_hta: bool) -> dict[str, float]:
    """HTA's quantity from tracekit's table: per stream, the sum of gaps between consecutive kernels,
    split by whether the next kernel's launch call started after the gap began (HTA's host_wait).

    like_hta: apply HTA's two preprocessing rules as well: (1) keep only kernels launched by a call
    that starts before the last ProfilerStep begins (HTA drops the last step); (2) round each event to
    whole µs inward, ts up and end down (HTA's `round_down_time_stamps`)."""
    import numpy as np

    from tracekit.analysis.events import load_frames

    fr = load_frames(capture.table)
    dev = fr.device
    launches = fr.launches.set_index("correlation")
    l_ts = launches["ts"].reindex(dev["correlation"].to_numpy()).to_numpy(dtype=float)
    ts = dev["ts"].to_numpy(np.float64)
    end = dev["end"].to_numpy(np.float64)
    keep = np.ones(len(dev), dtype=bool)
    if like_hta:
        keep = l_ts < fr.steps["ts"].max()
        ts = np.ceil(ts / 1e3) * 1e3
        end = np.floor(end / 1e3) * 1e3
        l_ts = np.ceil(l_ts / 1e3) * 1e3
    total = {"host_wait": 0.0, "other": 0.0}
    key = dev["device"].to_numpy() * 1_000_003 + dev["stream"].to_numpy()
    for k in np.unique(key[keep]):  # one loop per stream
        m = np.flatnonzero(keep & (key == k))
        m = m[np.argsort(ts[m], kind="stable")]
        prev_end = end[m][:-1]
        gap = ts[m][1:] - prev_end
        host_wait = l_ts[m][1:] > prev_end
        total["host_wait"] += float(gap[host_wait].sum()) / 1e3
        total["other"] += float(gap[~host_wait].sum()) / 1e3
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--hta-side", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hta_side is not None:
        hta_side(args.hta_side)
        return

    from tracekit.analysis.pipeline import analyze
    from tracekit.parse.parser import parse_paths

    paths = [str(FIXTURES / f"{n}.pt.trace.json.gz") for n in TRACES]
    proc = subprocess.run(
        [args.hta_python, __file__, "--hta-side", *paths], capture_output=True, text=True, check=True
    )
    hta = json.loads(proc.stdout)
    rows, rounded = [], []
    for n, p in zip(TRACES, paths):
        h = hta[Path(p).name]
        cat = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
        for key, us in h["idle_us"].items():
            cat[key.split("/", 1)[1]] += us
        cap = parse_paths([Path(p)])
        ours = per_stream_gaps_us(cap, like_hta=False)
        emulated = per_stream_gaps_us(cap, like_hta=True)
        r = analyze(cap)
        (d,) = r.devices
        idle = {c: sum(s.idle_ns[c] for s in d.samples) / 1e3 for c in d.samples[0].idle_ns}
        rows.append((n, cat, h, ours, emulated, idle))
        rounded.append((n, *_rounding_damage(cap)))
    print(
        "| trace | HTA host_wait | HTA kernel_wait | HTA other | HTA total | HTA rules on tracekit's table "
        "| per-stream gaps, all kernels, exact ns | tracekit idle in steps | tracekit causes (µs) "
        "| HTA temporal idle |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for n, cat, h, ours, emulated, idle in rows:
        top = ", ".join(f"{c} {v:.0f}" for c, v in sorted(idle.items(), key=lambda kv: -kv[1]) if v >= 0.5)
        temporal = f"{h['temporal_idle_us']:.0f}" if "temporal_idle_us" in h else h.get("temporal_error", "")
        print(
            f"| {n} | {cat['host_wait']:.0f} | {cat['kernel_wait']:.0f} | {cat['other']:.0f} | "
            f"{sum(cat.values()):.0f} | "
            f"{sum(emulated.values()):.0f} (host_wait {emulated['host_wait']:.0f}) | "
            f"{sum(ours.values()):.0f} (host_wait {ours['host_wait']:.0f}) | "
            f"{sum(idle.values()):.0f} | {top} | {temporal} |"
        )
    print()
    print("| trace | device events | zero length after HTA's µs rounding | negative length |")
    print("|---|---:|---:|---:|")
    for n, total, zero, neg in rounded:
        print(f"| {n} | {total} | {zero} | {neg} |")


def _rounding_damage(capture) -> tuple[int, int, int]:
    """Device events whose duration becomes 0 / negative when ts is rounded up and end down to µs."""
    import numpy as np

    from tracekit.analysis.events import load_frames

    dev = load_frames(capture.table).device
    dur = np.floor(dev["end"].to_numpy() / 1e3) - np.ceil(dev["ts"].to_numpy() / 1e3)
    return len(dev), int((dur == 0).sum()), int((dur < 0).sum())


if __name__ == "__main__":
    main()
