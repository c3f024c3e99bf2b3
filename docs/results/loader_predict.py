"""The input pipeline's producer (tracekit.whatif.loader) against real runs: each prediction from one
capture beside what the other capture measured.

    .venv/bin/python docs/results/loader_predict.py     # prints the tables, writes loader/predictions.md

The captures (docs/results/loader/*.parquet, made by `benchmarks/loader_pairs.sh`, default schedule) hold
their manifests: the unprofiled steps' times and loader waits. "Measured" is the B capture's mean
unprofiled step (a loader's stalls come in bursts, so the mean is the job's step; the median is shown
too) and, for a producer-paced B, its producer period (one batch per period between waited fetches,
tracekit.whatif.loader's: the throughput without the phase of the burst in a 10-step window).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "loader"

# (name, A, scenario flags, B): B is None for the unchanged replay of A against A
PAIRS = [
    ("resnet: unchanged", "resnet_w3", {}, "resnet_w3"),
    ("resnet: loader removed", "resnet_w3", {"set": ["dataloader=0"]}, "resnet_gpu"),
    ("dl: unchanged (2 workers)", "dl_w2", {}, "dl_w2"),
    ("dl: 2 -> 8 workers", "dl_w2", {"loader_workers": 8}, "dl_w8"),
    ("dl: 8 -> 2 workers", "dl_w8", {"loader_workers": 2}, "dl_w2"),
    ("dl: loader removed", "dl_w2", {"set": ["dataloader=0"]}, "dl_on_device"),
    ("cpu dl: unchanged (no workers)", "cpu_dl_w0", {}, "cpu_dl_w0"),
    ("cpu dl: 0 -> 1 worker", "cpu_dl_w0", {"loader_workers": 1}, "cpu_dl_w1"),
    ("cpu dl: 1 -> 0 workers", "cpu_dl_w1", {"loader_workers": 0}, "cpu_dl_w0"),
    ("cpu dl: loader removed (no workers)", "cpu_dl_w0", {"set": ["dataloader=0"]}, "cpu_dl_on_device"),
    ("cpu dl: loader removed (1 worker)", "cpu_dl_w1", {"set": ["dataloader=0"]}, "cpu_dl_on_device"),
]


def _load(name: str):
    from tracekit.api import load

    return load(HERE / f"{name}.parquet")


def measured(capture) -> dict:
    """B's unprofiled steps: mean, median, and its producer's period where it waited."""
    from tracekit.whatif.loader import producers

    m = capture.manifest or {}
    steps = [float(x) for x in m.get("unprofiled_step_ms") or []]
    ps = producers(m)
    period = next((p.period_ms for p in ps.values() if p.period_ms is not None), None)
    return {"mean": statistics.fmean(steps), "median": statistics.median(steps), "period": period}


def rows() -> list[dict]:
    from tracekit.whatif.predict import Replayer, whatif
    from tracekit.whatif.scenario import WhatIfOptions

    out = []
    cache: dict = {}
    for label, a, flags, b in PAIRS:
        if a not in cache:
            cap = _load(a)
            cache[a] = (cap, Replayer.of(cap))
        cap, rp = cache[a]
        result, _ = whatif(cap, WhatIfOptions(**flags), replayer=rp, attribute=False)
        u = result.unprofiled
        mb = measured(_load(b))
        loader = u.loader[0] if u.loader else {}
        out.append(
            {
                "pair": label,
                "a": a,
                "b": b,
                "scenario": result.scenario_text,
                "predicted_ms": u.predicted_step_ms,
                "measured_mean_ms": mb["mean"],
                "measured_median_ms": mb["median"],
                "measured_period_ms": mb["period"],
                "error_vs_mean": u.predicted_step_ms / mb["mean"] - 1,
                "paced": loader.get("paces_step"),
                "note": loader.get("note") or "",
            }
        )
    return out


def analysis_rows() -> list[dict]:
    """What `tracekit analyze` names first for each capture that timed its fetches."""
    from tracekit.api import analyze

    out = []
    for name in ("resnet_w3", "resnet_w3_active8", "dl_w2", "dl_w8", "cpu_dl_w0", "cpu_dl_w1"):
        r = analyze(HERE / f"{name}.parquet").report
        ip = r.input_pipeline
        first = r.advice[0] if r.advice else None
        out.append(
            {
                "capture": name,
                "unprofiled_step_ms": ip.unprofiled_step_mean_ms,
                "unprofiled_wait_share": ip.unprofiled_wait_share,
                "profiled_step_ms": ip.profiled_step_ms,
                "profiled_wait_share": ip.profiled_wait_share,
                "warnings": len(ip.warnings),
                "first_advice": f"{first.kind} ({first.share:.0%} of the {first.basis} step)"
                if first
                else "-",
            }
        )
    return out


def markdown(pairs: list[dict], analyses: list[dict]) -> str:
    lines = [
        "| pair | A | scenario | B | predicted (ms) | measured mean (ms) | error | B median | B period |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        period = "-" if p["measured_period_ms"] is None else f"{p['measured_period_ms']:.1f}"
        lines.append(
            f"| {p['pair']} | {p['a']} | {p['scenario']} | {p['b']} | {p['predicted_ms']:.2f} | "
            f"{p['measured_mean_ms']:.2f} | {p['error_vs_mean']:+.0%} | {p['measured_median_ms']:.2f} | "
            f"{period} |"
        )
    lines += [
        "",
        "| capture | unprofiled step (mean ms) | loader wait share | profiled step (mean ms) "
        "| profiled wait share | warnings | first advice |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in analyses:
        lines.append(
            f"| {a['capture']} | {a['unprofiled_step_ms']:.1f} | {a['unprofiled_wait_share']:.0%} | "
            f"{a['profiled_step_ms']:.1f} | {a['profiled_wait_share']:.0%} | {a['warnings']} | "
            f"{a['first_advice']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    text = markdown(rows(), analysis_rows())
    (HERE / "predictions.md").write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
