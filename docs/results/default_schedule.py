"""The replay check of docs/results/whatif.md on captures made the default way (two profiler cycles):
fixtures/h200_default, the lead's H200 captures of the seed workloads and real models (issue 17).

    .venv/bin/python docs/results/default_schedule.py      # prints the table of whatif.md's section

Per capture: the step (analyze's median = whatif's observed median), the host windows' median, the
median step timed without the profiler (manifest, CUDA events), the unchanged replay's error, the
profiler cost used and why, the predicted step without the profiler with its range over the costs
identified on real captures, and the outlier steps. tests/test_whatif_results.py checks that the page
holds this table.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "fixtures" / "h200_default"


def rows(folder: Path = FOLDER) -> list[str]:
    import tracekit as tk
    from tracekit.whatif.predict import IDENTITY, whatif

    out = [
        "| capture | steps | step (analyze = whatif) | host windows | unprofiled | replay error "
        "| cost µs/event | predicted unprofiled [range] | outlier steps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in sorted(p for p in folder.iterdir() if (p / "manifest.json").exists()):
        cap = tk.load(run)
        report = tk.analyze(cap, savings=False).report
        result, _ = whatif(cap, IDENTITY)
        (d,) = report.devices
        (w,) = result.devices
        step = statistics.median(d.step_ns) / 1e6
        assert abs(step - w.observed_step_ms) < 1e-9, run.name
        host = statistics.median(s.host_dur_ns for s in d.samples) / 1e6
        u = result.unprofiled
        lo, hi = (v for _, v in u.predicted_step_ms_by_cost)
        how = "fitted" if "estimated" in u.note else "at least" if "loosely" in u.note else "default"
        outl = ", ".join(f"#{s} {v / 1e6:.1f} ms" for s, v in w.outlier_steps) or "-"
        out.append(
            f"| {run.name} | {d.steps} | {step:.3f} | {host:.3f} | {u.observed_step_ms:.3f} "
            f"| {w.replay_error:+.3%} | {u.profiler_cost_us_per_event:.2f} ({how}) "
            f"| {u.predicted_step_ms:.3f} [{hi:.3f}, {lo:.3f}] | {outl} |"
        )
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
