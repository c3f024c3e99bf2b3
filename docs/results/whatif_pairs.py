"""The measured step times and B/A ratios of the what-if pairs (docs/results/whatif/), from their captures.

    .venv/bin/python docs/results/whatif_pairs.py docs/results/whatif     # writes summary.md, pairs.json

Each capture `<config>-<round>.parquet` was made by benchmarks/whatif_pairs.sh; a pair's A and B of the same
round ran minutes apart on one machine. Per capture: the unprofiled step time (the manifest's 30 CUDA-event
steps: median), and from `tracekit analyze --json` the profiled step (mean of the 8 steps) and the same
with the device work that ran after the last step spread over the steps ("device-inclusive"). Since
issue 17 analyze's steps last until the device work launched in them is done (a GPU-bound run's host runs
ahead, and its host windows alone are shorter than the device's step), so the two columns agree; the
second is kept to compare with the tables before. Per pair and
round: B/A of each. This measures; it predicts nothing (`tracekit whatif` does).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

# (pair, A config, B config, what changes), as benchmarks/whatif_pairs.sh captures them.
PAIRS = (
    ("sync", "mlp_sync", "mlp", "small MLP: .item() after every layer → none"),
    ("sync_stack", "mlp_sync_stack", "mlp_stack", "the same, Python stacks recorded (with_stack)"),
    ("tf32", "heavy", "heavy_tf32", "article MLP: fp32 → TF32 matmuls"),
    ("interp_host", "mlp_spin50", "mlp", "small MLP (host-bound): host_spin_us 50 → 0"),
    ("interp_gpu", "heavy_spin50", "heavy", "article MLP (GPU-bound): host_spin_us 50 → 0"),
    ("interp_tf32", "heavy_tf32_spin50", "heavy_tf32", "article MLP in TF32: host_spin_us 50 → 0"),
    ("dataloader", "dl_slow", "dl_fast", "DataLoader, 0 workers, batch 32: sample_sleep_ms 0.5 → 0"),
)


def measure(path: Path) -> dict:
    """One capture's figures: unprofiled from its manifest, profiled from `tracekit analyze --json`."""
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out)
    man = report["capture"]
    (dev,) = report["devices"]
    unprof = man["unprofiled_step_ms"]
    steps = dev["steps"]
    prof = dev["step_ms"]["mean"]
    return {
        "run": path.stem,
        "unprofiled_steps": len(unprof),
        "unprofiled_step_ms_median": statistics.median(unprof),
        "unprofiled_step_ms_min": min(unprof),
        "unprofiled_step_ms_max": max(unprof),
        "profiled_steps": steps,
        "profiled_step_ms_mean": prof,
        "busy_after_last_step_ms": dev["busy_after_last_step_ms"],
        "profiled_device_inclusive_step_ms": prof + dev["busy_after_last_step_ms"] / steps,
        "gpu_utilization": dev["gpu_utilization"],
        "idle_ms_per_step": dev["idle_ms_per_step"],
        "host_dispatch_gap_median_us": report["host"]["dispatch_gap_median_us"],
        "host_spin_iterations": man.get("extra", {}).get("host_spin", {}).get("iterations", 0),
        "tf32": man.get("extra", {}).get("tf32", {}).get("matmul_allow_tf32"),
        "with_stack": man["knobs"]["with_stack"],
    }


def _ratio(b: float, a: float) -> float:
    return b / a


def pairs(runs: dict[str, dict]) -> list[dict]:
    out = []
    for name, a, b, what in PAIRS:
        rounds = sorted({r.rsplit("-", 1)[1] for r in runs if r.rsplit("-", 1)[0] in (a, b)}, key=int)
        per_round = []
        for rnd in rounds:
            ra, rb = runs.get(f"{a}-{rnd}"), runs.get(f"{b}-{rnd}")
            if ra is None or rb is None:
                continue
            per_round.append(
                {
                    "round": int(rnd),
                    "A": ra["run"],
                    "B": rb["run"],
                    "unprofiled": _ratio(rb["unprofiled_step_ms_median"], ra["unprofiled_step_ms_median"]),
                    "profiled": _ratio(rb["profiled_step_ms_mean"], ra["profiled_step_ms_mean"]),
                    "profiled_device_inclusive": _ratio(
                        rb["profiled_device_inclusive_step_ms"], ra["profiled_device_inclusive_step_ms"]
                    ),
                }
            )
        summary = {}
        for key in ("unprofiled", "profiled", "profiled_device_inclusive"):
            vals = [r[key] for r in per_round]
            if vals:
                summary[key] = {"mean": statistics.mean(vals), "min": min(vals), "max": max(vals)}
        out.append({"pair": name, "A": a, "B": b, "change": what, "rounds": per_round, "ratio": summary})
    return out


def repeats(runs: dict[str, dict]) -> dict[str, list[str]]:
    """Configuration -> its captures, in round order."""
    out: dict[str, list[str]] = {}
    for name in sorted(runs, key=lambda n: int(n.rsplit("-", 1)[1])):
        out.setdefault(name.rsplit("-", 1)[0], []).append(name)
    return out


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def markdown(runs: dict[str, dict], table: list[dict]) -> str:
    lines = [
        "## B/A ratios per pair (mean over rounds [min, max]; each round: A and B of that round)",
        "",
        "| pair | A → B | rounds | unprofiled B/A | profiled B/A (steps) | profiled B/A (device-inclusive) |",
        "|---|---|---|---|---|---|",
    ]
    for p in table:
        cells = []
        for key in ("unprofiled", "profiled", "profiled_device_inclusive"):
            s = p["ratio"].get(key)
            cells.append(f"{_f(s['mean'])} [{_f(s['min'])}, {_f(s['max'])}]" if s else "—")
        lines.append(
            f"| {p['pair']} | {p['A']} → {p['B']} | {len(p['rounds'])} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "## Per round",
        "",
        "| pair | A | B | unprofiled B/A | profiled B/A | device-inclusive B/A |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for p in table:
        for r in p["rounds"]:
            lines.append(
                f"| {p['pair']} | {r['A']} | {r['B']} | {_f(r['unprofiled'])} | {_f(r['profiled'])} | "
                f"{_f(r['profiled_device_inclusive'])} |"
            )
    lines += [
        "",
        "## Repeats of one configuration (run-to-run noise: the same setting in different rounds)",
        "",
        "| configuration | runs | unprofiled medians (ms) | max/min − 1 | profiled, steps (ms) "
        "| max/min − 1 |",
        "|---|---|---|---|---|---|",
    ]
    for config, members in sorted(repeats(runs).items()):
        unprof = [runs[m]["unprofiled_step_ms_median"] for m in members]
        prof = [runs[m]["profiled_step_ms_mean"] for m in members]
        lines.append(
            f"| {config} | {len(members)} | {', '.join(_f(x) for x in unprof)} "
            f"| {max(unprof) / min(unprof) - 1:.1%} | {', '.join(_f(x) for x in prof)} "
            f"| {max(prof) / min(prof) - 1:.1%} |"
        )
    lines += [
        "",
        "## Per capture (ms per step)",
        "",
        "| capture | unprofiled median [min, max] (30 steps) | profiled, steps (8) | device-inclusive "
        "| GPU util. (profiled) | largest idle cause (ms/step) | host gap median µs | spin iterations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(runs):
        r = runs[name]
        cause, ms = max(r["idle_ms_per_step"].items(), key=lambda kv: kv[1])
        lines.append(
            f"| {name} | {_f(r['unprofiled_step_ms_median'])} [{_f(r['unprofiled_step_ms_min'])}, "
            f"{_f(r['unprofiled_step_ms_max'])}] | {_f(r['profiled_step_ms_mean'])} | "
            f"{_f(r['profiled_device_inclusive_step_ms'])} | {r['gpu_utilization']:.2f} | "
            f"{cause} {_f(ms, 2)} | {r['host_dispatch_gap_median_us']:.1f} | {r['host_spin_iterations']} |"
        )
    return "\n".join(lines) + "\n"


def main(folder: Path) -> None:
    runs = {p.stem: measure(p) for p in sorted(folder.glob("*.parquet"))}
    table = pairs(runs)
    (folder / "pairs.json").write_text(json.dumps({"pairs": table, "captures": runs}, indent=1) + "\n")
    (folder / "summary.md").write_text(markdown(runs, table))
    print((folder / "summary.md").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "whatif")
