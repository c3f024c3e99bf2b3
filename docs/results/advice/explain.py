"""What changed between A and B of the advice pairs whose prediction missed (docs/results/advice.md):
per profiled step, the device time by class of kernel and the host's framework ops and kernel launches.

    .venv/bin/python docs/results/advice/explain.py          # writes docs/results/advice/explain.md

Reads the run folders' traces (docs/results/advice/data/runs/, fixtures/h100/) with the stdlib: a kernel
belongs to the first class of CLASSES whose pattern it matches (the advice rules' own patterns, from
tracekit.analysis.advice); a step is a ProfilerStep annotation of the host.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

from tracekit.analysis.advice import (
    CUDNN_BATCHNORM_RE,
    FP32_RE,
    LAYOUT_RE,
    NCHW_BATCHNORM_RE,
    TF32_RE,
)

HERE = Path(__file__).resolve().parent
RUNS = (HERE / "data" / "runs", HERE.parents[2] / "fixtures" / "h100")
LOW_MATH = r"^(?=.*(gemm|conv|fprop|dgrad|wgrad))(?=.*(bf16|f16|half|h\d+gemm))"
CLASSES = (
    ("layout conversions", LAYOUT_RE),
    ("cuDNN batch norm, NCHW", NCHW_BATCHNORM_RE),
    ("cuDNN batch norm, NHWC", CUDNN_BATCHNORM_RE),
    ("torch's batch norm", r"batch_norm"),
    ("GEMM/conv, TF32 or fp32", f"{TF32_RE}|{FP32_RE}"),
    ("GEMM/conv, bf16", LOW_MATH),
    ("copies and fills", r"^Memcpy|^Memset"),
    ("other kernels", r"."),
)
# (pair, A, B): the pairs docs/results/advice.md explains
PAIRS = (
    ("layout", "r18", "r18_cl"),
    ("precision", "r18", "r18_bf16"),
    ("precision_cl", "r18_cl", "r18_cl_bf16"),
    ("layout_bf16", "r18_bf16", "r18_cl_bf16"),
)


# The host-bound MLP's configurations: the same forward and backward, then each its optimizer
HOST_GROUP = ("mlp", "mlps", "mlp_zero", "adam_loop", "adam_foreach", "adam_fused")


def events(name: str) -> list[dict]:
    """The complete events of the configuration's traces."""
    folder = next(base / name for base in RUNS if (base / name).is_dir())
    out = []
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as fh:
            out += [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    return out


def regions(name: str) -> dict[str, float]:
    """Per profiled step (ms, host): the step, the optimizer's step and zero_grad, the rest; and the
    median unprofiled step of the manifest (the interleaved rounds)."""
    x = events(name)
    folder = next(base / name for base in RUNS if (base / name).is_dir())
    manifest = json.loads((folder / "manifest.json").read_text())
    ann = [e for e in x if e.get("cat") == "user_annotation"]
    steps = [e["dur"] / 1e3 for e in ann if e["name"].startswith("ProfilerStep#")]
    opt = sum(e["dur"] for e in ann if e["name"].startswith("Optimizer.step#")) / 1e3 / len(steps)
    zero = sum(e["dur"] for e in ann if e["name"].startswith("Optimizer.zero_grad#")) / 1e3 / len(steps)
    step = sum(steps) / len(steps)
    return {
        "step": step,
        "optimizer.step": opt,
        "zero_grad": zero,
        "rest": step - opt - zero,
        "unprofiled": statistics.median(manifest["unprofiled_step_ms"]),
    }


def per_step(name: str) -> dict[str, float]:
    """Device ms per step by class, and the host's framework ops and launches per step."""
    x = events(name)
    steps = sum(1 for e in x if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    out: Counter = Counter()
    for e in x:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
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
        "**the host-bound MLP**: the same forward and backward in every configuration, per profiled step "
        "(host ms, mean over the profiled steps), and the median unprofiled step of the interleaved rounds",
        "",
        "| configuration | profiled step | Optimizer.step | zero_grad | the rest (forward, backward) "
        "| unprofiled step |",
        "|---|---|---|---|---|---|",
    ]
    for name in HOST_GROUP:
        r = regions(name)
        cells = (r[k] for k in ("step", "optimizer.step", "zero_grad", "rest", "unprofiled"))
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = markdown()
    (HERE / "explain.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
