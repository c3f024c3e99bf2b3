"""What tracekit says of the traces run_gpu.sh made on the GPU, beside each loop's unprofiled truth: the
tables of docs/results/foreign.md.

    .venv/bin/python docs/results/foreign/gpu_table.py RESULTS

RESULTS: run_gpu.sh's $OUT (<case>.tar.gz each) or a folder with the cases unpacked (<case>/truth.json,
plain/log/, capture/run/); fixtures/h100_foreign holds some of them laid out so (plain/ and capture/ are
the traces' folders there). Each case's plain run (the user's own traces: tracekit never saw the run) and
its capture (`tracekit capture --script`: the profiler adopted, the manifest) are analysed as a user
would, `tracekit analyze` and `tracekit whatif` (the step without the profiler). Prints two Markdown
tables: the step without the profiler against the truth, and what the analysis names.
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Optional

import tracekit.api as tk
from tracekit.errors import TracekitError

CASES = ("seed", "lightning", "sidestream", "inference", "generate")
RUNS = {"plain": ("plain/log", "plain"), "capture": ("capture/run", "capture")}  # run folder, fixture's


def cases(root: Path, work: Path) -> dict[str, Path]:
    """case -> its folder (a tarball unpacked into `work`)."""
    out = {}
    for c in CASES:
        if (root / c / "truth.json").exists():
            out[c] = root / c
        elif (root / f"{c}.tar.gz").exists():
            with tarfile.open(root / f"{c}.tar.gz") as tf:
                tf.extractall(work, filter="data")
            out[c] = work / c
    return out


def run_folder(case: Path, run: str) -> Optional[Path]:
    return next((case / p for p in RUNS[run] if (case / p).is_dir()), None)


def truth_ms(truth: dict) -> float:
    """The loop's step without the profiler: per token for generate (a step is a token there)."""
    return float(truth.get("ms_per_token") or truth["steady_step_ms"])


def spread(truth: dict) -> str:
    """The truth's median step and its first and second halves' means (how much the loop drifted while
    it was timed), ms."""
    steps = [float(x) for x in truth.get("step_ms") or []]
    if len(steps) < 4 or truth.get("ms_per_token"):
        return ""
    half = len(steps) // 2
    a, b = statistics.fmean(steps[:half]), statistics.fmean(steps[half:])
    return f" (median {statistics.median(steps):.3g}; halves {a:.3g}, {b:.3g})"


def analyse(folder: Path) -> dict[str, Any]:
    report = tk.analyze(folder).report
    w = tk.whatif(folder, keep_trace=False).to_json()
    dev = report.devices[0]
    (rule,) = report.step_rules
    idle = sorted(dev.idle_ms_per_step.items(), key=lambda kv: -kv[1])
    ip = report.input_pipeline
    un = w["unprofiled"]
    by_cost = {
        r["profiler_cost_us_per_event"]: r["predicted_step_ms"]
        for r in un.get("predicted_step_ms_by_cost") or []
    }
    advice = report.advice[0] if report.advice else None
    return {
        "steps": rule.steps,
        "rule": rule.rule + (f" '{rule.marker}'" if rule.marker and rule.rule != "ProfilerStep" else ""),
        "profiled_median_ms": statistics.median(dev.step_ns) / 1e6,
        "profiled_mean_ms": statistics.fmean(dev.step_ns) / 1e6,
        "busy": dev.gpu_utilization,
        "top": idle[:2],
        "steady": None if ip is None or ip.steady is None else (ip.steady.step_ms, ip.steady.bound),
        "whatif_ms": un["predicted_step_ms"],
        "cost_source": un["source"],
        "cost_us": un["profiler_cost_us_per_event"],
        "by_cost": [by_cost[k] for k in sorted(by_cost)],
        "warning": bool(ip and ip.warnings),
        "unmeasured": bool(ip and ip.unmeasured),
        "advice": None
        if advice is None
        else (
            advice.kind,
            (advice.saved_ms or {}).get("unprofiled"),
            (advice.step_ms or {}).get("unprofiled"),
        ),
    }


def _pct(x: float, ref: float) -> str:
    return f"{x / ref - 1:+.0%}"


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0]).is_dir():
        print("give run_gpu.sh's results folder (the case tarballs, or the cases unpacked)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases(Path(argv[0]), Path(tmp)).items():
            truth = json.loads((case / "truth.json").read_text())
            for run in RUNS:
                folder = run_folder(case, run)
                if folder is None:
                    continue
                try:
                    rows.append((name, run, truth, analyse(folder)))
                except TracekitError as exc:
                    print(f"{name} {run}: {exc}", file=sys.stderr)
    print(
        "| case | run | steps found by | profiled step, median / mean ms | measured without the profiler, "
        "mean ms/step | steady state (workers' timings) | whatif without the profiler | its profiler cost |"
    )
    print("|" + "---|" * 8)  # fmt: skip
    for name, run, truth, a in rows:
        t = truth_ms(truth)
        per = " per token" if "ms_per_token" in truth else spread(truth)
        steady = (
            "-"
            if a["steady"] is None
            else f"{a['steady'][0]:.1f} ({_pct(a['steady'][0], t)}), {a['steady'][1]}"
        )
        span = f"; {a['by_cost'][0]:.3g}-{a['by_cost'][-1]:.3g} over 1.5-12.5 µs" if a["by_cost"] else ""
        print(
            f"| {name} | {run} | {a['steps']}, {a['rule']} | {a['profiled_median_ms']:.3g} / "
            f"{a['profiled_mean_ms']:.3g} | {t:.3g}{per} | "
            f"{steady} | {a['whatif_ms']:.3g} ({_pct(a['whatif_ms'], t)}) | {a['cost_source']}, "
            f"{a['cost_us']:.2g} µs/event{span} |"
        )
    print()
    print(
        "| case | run | GPU busy | largest idle causes, ms/step | a stall can hide (warning) | first advice: "
        "unprofiled saving of its step, ms |"
    )
    print("|" + "---|" * 6)  # fmt: skip
    for name, run, _, a in rows:
        top = ", ".join(f"{c} {ms:.3g}" for c, ms in a["top"])
        warn = ("yes, step unknown" if a["unmeasured"] else "yes") if a["warning"] else "no"
        adv = "-"
        if a["advice"] is not None:
            kind, saved, step = a["advice"]
            adv = kind if saved is None else f"{kind}: {saved:.3g} of {step:.3g}"
        print(f"| {name} | {run} | {a['busy']:.0%} | {top} | {warn} | {adv} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
