"""The seed recipe on this machine's CPU, unmodified under `tracekit capture --script`: the steady-state
step the analysis predicts from the capture beside the step the same loop takes without the profiler,
run after run (truth, capture, alternating).

    .venv/bin/python docs/results/foreign/seed_cpu.py [--rounds 4] [--out docs/results/foreign/seed_cpu]

Each round: `seed_recipe.py --mode truth` (the loop without the profiler, 30 steps after 8), then
`tracekit capture --script seed_recipe.py -- --mode profile` and its analysis (`input_pipeline.steady`).
Writes OUT.json (every round) and OUT.md (the table), with the load average at each run: this machine is
shared, and a round taken while other work holds the CPUs measures that work too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent


def truth(args: argparse.Namespace, work: Path) -> dict:
    out = work / "truth.json"
    cmd = [sys.executable, str(HERE / "seed_recipe.py"), "--mode", "truth", "--out", str(out)]
    cmd += ["--steps", str(args.steps), "--warmup", "8", *args.script_args]
    subprocess.run(cmd, check=True, cwd=work, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def capture(args: argparse.Namespace, work: Path, name: str) -> dict:
    from tracekit.api import analyze

    cmd = [sys.executable, "-m", "tracekit", "capture", "--script", str(HERE / "seed_recipe.py"), "-o"]
    cmd += [
        str(work / "runs"),
        "--name",
        name,
        "--",
        "--mode",
        "profile",
        "--log",
        "./log",
        *args.script_args,
    ]
    subprocess.run(cmd, check=True, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = json.loads((work / "runs" / "seed_recipe" / name / "manifest.json").read_text())
    report = analyze(work / "runs" / "seed_recipe" / f"{name}.parquet").report
    st = report.input_pipeline.steady
    advice = report.advice[0] if report.advice else None
    return {
        "steady_step_ms": st.step_ms,
        "bound": st.bound,
        "consumer_ms": st.consumer_ms,
        "pool_ms": st.pool_ms,
        "cpu_floor_ms": st.cpu_floor_ms,
        "worker_cpu_ms": st.worker_cpu_ms,
        "trainer_cpu_ms": st.trainer_cpu_ms,
        "production_ms": st.production_ms,
        "production_wall_ms": st.production_wall_ms,
        "profiled_step_ms": report.input_pipeline.profiled_step_ms,
        "first_advice": advice.kind if advice else None,
        "steps": {k: manifest["ranks"][0][k] for k in ("unprofiled", "profiled")},
        "production": manifest["loader"]["production"][0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", default=str(HERE / "seed_cpu"))
    p.add_argument("script_args", nargs="*", help="passed to seed_recipe.py (after --)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="seed-cpu-") as tmp:
        work = Path(tmp)
        for r in range(args.rounds):
            load0 = os.getloadavg()[0]
            t = truth(args, work)
            load1 = os.getloadavg()[0]
            c = capture(args, work, f"r{r}")
            load2 = os.getloadavg()[0]
            err = c["steady_step_ms"] / t["steady_step_ms"] - 1
            rows.append({"round": r, "truth": t, "capture": c, "error": err, "load": [load0, load1, load2]})
            print(
                f"round {r}: measured {t['steady_step_ms']:.1f} ms/step, predicted {c['steady_step_ms']:.1f} "
                f"({err:+.0%}, {c['bound']}), loads {load0:.1f} {load1:.1f} {load2:.1f}",
                flush=True,
            )
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "| round | measured without profiler (ms/step) | predicted steady state (ms/step) | error | set by | "
        "training step alone | workers' pace | CPUs' floor | worker CPU / batch | trainer CPU / step | "
        "profiled step (trace) | load avg (truth, capture) |",
        "|" + "---|" * 12,
    ]
    for row in rows:
        t, c = row["truth"], row["capture"]
        lines.append(
            f"| {row['round']} | {t['steady_step_ms']:.1f} | {c['steady_step_ms']:.1f} | "
            f"{row['error']:+.0%} | "
            f"{c['bound']} | {c['consumer_ms']:.1f} | {c['pool_ms']:.1f} | {c['cpu_floor_ms']:.1f} | "
            f"{c['worker_cpu_ms']:.1f} | {c['trainer_cpu_ms']:.1f} | {c['profiled_step_ms']:.1f} | "
            f"{row['load'][0]:.1f}, {row['load'][1]:.1f} |"
        )
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
