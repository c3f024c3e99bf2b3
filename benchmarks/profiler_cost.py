"""The profiler's per-event cost (tracekit.whatif.profiler) fitted on each H200 capture of fixtures/h200 and
fixtures/h200_default (default schedule, two cycles) that carries unprofiled step times; the median of
the fitted ones is DEFAULT_COST_US, their least and largest MEASURED_RANGE_US.

    .venv/bin/python benchmarks/profiler_cost.py
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tracekit.api import load as load_inputs
from tracekit.whatif.predict import Replayer

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    fitted = []
    runs = [p for d in ("h200", "h200_default") for p in sorted((ROOT / "fixtures" / d).iterdir())]
    for run in (p for p in runs if (p / "manifest.json").exists()):
        rp = Replayer.of(load_inputs(*[run]))
        source, target, est = rp.cost(None)
        rng = f"[{est.low_us:.2f}, {est.high_us:.2f}]" if est.low_us is not None else "-"
        print(
            f"{run.parent.name}/{run.name:22s} unprofiled {target:8.3f} ms  "
            f"c {est.cost_us:6.2f} µs/event {rng:16s} {est.note}"
        )
        if est.fitted:
            fitted.append(est.cost_us)
    print(
        f"fitted on {len(fitted)} captures: median {statistics.median(fitted):.2f} µs/event, "
        f"range {min(fitted):.2f} to {max(fitted):.2f}"
    )


if __name__ == "__main__":
    main()
