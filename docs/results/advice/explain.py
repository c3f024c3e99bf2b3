"""What changed between A and B of the advice pairs whose prediction missed (docs/results/advice.md):
per profiled step, the device time by class of kernel and the host's framework ops and kernel launches;
and how fast the host ran while each configuration was captured against while it was timed.

    .venv/bin/python docs/results/advice/explain.py          # writes docs/results/advice/explain.md

Reads the run folders' traces (docs/results/advice/data/runs/, fixtures/h100/) with the stdlib: a kernel
belongs to the first class of CLASSES whose pattern it matches (the advice rules' own patterns, from
tracekit.analysis.advice); a step is a ProfilerStep annotation of the host. The host's speed: the
machine-speed control of tracekit.capture.calibrate (`aten_cpu`, µs per torch.cumsum of 16,384 floats:
C++ work no Python version changes), which pairs.py runs before and after each capture and at the start
of every interleaved round (each manifest's `calibration`), in both runs (data/ and data_b/).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

from tracekit.analysis.advice import (
    CUDNN_BATCHNORM_RE,
    FP32_RE,
    LAYOUT_RE,
    NCHW_BATCHNORM_RE,
    TF32_RE,
)

HERE = Path(__file__).resolve().parent
RUNS = (HERE / "data" / "runs", HERE.parents[2] / "fixtures" / "h100")
# The runs whose manifests hold the calibrations (first: the one whose traces this page reads)
CALIBRATED = (("first", HERE / "data" / "runs"), ("second", HERE / "data_b" / "runs"))
LOW_MATH = r"^(?=.*(gemm|conv|fprop|dgrad|wgrad))(?=.*(bf16|f16|half|h\d+gemm))"
CLASSES = (
    ("layout conversions", LAYOUT_RE),
    ("cuDNN batch norm, NCHW", NCHW_BATCHNORM_RE),
    ("cuDNN batch norm, NHWC", CUDNN_BATCHNORM_RE),
    ("torch's batch norm", r"batch_norm"),
    ("GEMM/conv, TF32 or fp32", f"{TF32_RE}|{FP32_RE}"),
    ("GEMM/conv, bf16", LOW_MATH),
    ("GEMM, cuBLASLt (nvjet)", r"^nvjet_"),  # its names do not say the precision plainly
    ("copies and fills", r"^Memcpy|^Memset"),
    ("other kernels", r"."),
)
# (pair, A, B): the pairs docs/results/advice.md explains
PAIRS = (
    ("layout", "r18", "r18_cl"),
    ("precision", "r18", "r18_bf16"),
    ("precision_cl", "r18_cl", "r18_cl_bf16"),
    ("layout_bf16", "r18_bf16", "r18_cl_bf16"),
    ("layout_r50", "r50", "r50_cl"),
    ("precision_r50", "r50", "r50_bf16"),
    ("precision_cl_r50", "r50_cl", "r50_cl_bf16"),
)
# The configurations whose host speed the calibration table shows: each predicted pair's A
CALIBRATION_ROWS = (
    "r18",
    "r18_cl",
    "r18_bf16",
    "r50",
    "r50_cl",
    "r50_bf16",
    "vit",
    "gpt2",
    "r18dev_item",
    "mlps_item",
    "mlp",
    "mlp_zero",
    "adam_loop",
    "article",
)


def events(name: str) -> list[dict]:
    """The complete events of the configuration's traces."""
    return folder_events(next(base / name for base in RUNS if (base / name).is_dir()))


def folder_events(folder: Path) -> list[dict]:
    """The complete events of a run folder's traces."""
    out = []
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as fh:
            out += [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    return out


def calibration(folder: Path) -> Optional[dict[str, float]]:
    """The control (aten_cpu, µs) before and after the capture and over the rounds (median, min, max);
    None where the run has no such configuration."""
    path = folder / "manifest.json"
    if not path.exists():
        return None
    cal = json.loads(path.read_text()).get("calibration") or {}

    def us(c: Optional[dict]) -> float:
        return (c or {}).get("figures", {}).get("aten_cpu", {}).get("ns", float("nan")) / 1e3

    rounds = [us(c) for c in cal.get("rounds") or []]
    return {
        "before": us(cal.get("before")),
        "after": us(cal.get("after")),
        "median": statistics.median(rounds) if rounds else float("nan"),
        "min": min(rounds) if rounds else float("nan"),
        "max": max(rounds) if rounds else float("nan"),
    }


def per_step(name: str) -> dict[str, float]:
    """Device ms per step by class, and the host's framework ops and launches per step. A device activity
    counts where its launch lies in the profiled steps' host windows: the work a capture begins with,
    launched in its warm-up step, is no step's (a device-bound capture runs a step's worth of it)."""
    x = events(name)
    windows = [
        (e["ts"], e["ts"] + e["dur"])
        for e in x
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    steps = len(windows)
    first, last = min(w[0] for w in windows), max(w[1] for w in windows)
    launched = {
        e["args"].get("correlation"): e["ts"]
        for e in x
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    out: Counter = Counter()
    for e in x:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            at = launched.get(e.get("args", {}).get("correlation"))
            if at is None or not first <= at <= last:
                continue
            cls = next(c for c, rx in CLASSES if re.search(rx, e["name"]))
            out[cls] += e["dur"] / 1e3
        elif e.get("cat") == "cpu_op":
            out["framework ops"] += 1
        elif e.get("cat") == "cuda_runtime" and "Launch" in e["name"]:
            out["kernel launches"] += 1
    return {k: v / steps for k, v in out.items()}


def markdown() -> str:
    rows = [c for c, _ in CLASSES]
    lines = []
    for pair, a, b in PAIRS:
        sa, sb = per_step(a), per_step(b)
        lines += [
            f"**{pair}**: {a} → {b}, per profiled step",
            "",
            f"| | {a} | {b} | change |",
            "|---|---|---|---|",
        ]
        for r in rows:
            va, vb = sa.get(r, 0.0), sb.get(r, 0.0)
            if va or vb:
                lines.append(f"| {r}, ms | {va:.3f} | {vb:.3f} | {vb - va:+.3f} |")
        da = sum(sa.get(r, 0) for r in rows)
        db = sum(sb.get(r, 0) for r in rows)
        lines.append(f"| device total, ms | {da:.3f} | {db:.3f} | {db - da:+.3f} |")
        for r in ("framework ops", "kernel launches"):
            lines.append(
                f"| {r} | {sa.get(r, 0):.0f} | {sb.get(r, 0):.0f} | {sb.get(r, 0) - sa.get(r, 0):+.0f} |"
            )
        lines.append("")
    lines += [
        "**the host's speed**: the machine-speed control (aten_cpu, µs per call; lower is faster) just "
        "before "
        "and after each configuration's capture, and at the start of each interleaved round that timed it "
        "(median, min-max)",
        "",
        "| configuration | run | capture: before | after | rounds: median | min-max |",
        "|---|---|---|---|---|---|",
    ]
    for name in CALIBRATION_ROWS:
        for run, base in CALIBRATED:
            c = calibration(base / name)
            if c is not None:
                lines.append(
                    f"| {name} | {run} | {c['before']:.1f} | {c['after']:.1f} | {c['median']:.1f} | "
                    f"{c['min']:.1f}-{c['max']:.1f} |"
                )
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = markdown()
    (HERE / "explain.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
