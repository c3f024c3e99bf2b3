"""How far a pair's prediction moves with the capture it is made from: each configuration captured
several times after its interleaved rounds (`CAPTURES=N` of run_gpu.sh: runs/<config>, then
runs/<config>-cap<k>), each capture of a pair's A predicted as make_table.py predicts it.

    .venv/bin/python docs/results/advice/capture_spread.py DATA_DIR [--pairs layout,precision,...]

Prints a Markdown table: per pair, the measured saving, each capture's predicted unprofiled saving, their
median and whether the median is within the target (30 % or 1 ms), and the host's speed control
(aten_cpu, µs) of each capture (the mean of its before and after) against the rounds' median.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import explain  # noqa: E402
import make_table as mt  # noqa: E402

DEFAULT_PAIRS = (
    "pinned",
    "layout",
    "precision",
    "layout_precision",
    "precision_cl",
    "layout_bf16",
    "pinned_r50",
    "layout_r50",
    "precision_r50",
    "layout_precision_r50",
    "precision_cl_r50",
    "layout_bf16_r50",
)


def control_us(run: Path) -> tuple[float, float]:
    """(the capture's control: mean of before and after; the rounds' median), µs (explain.calibration)."""
    c = explain.calibration(run) or {}
    return (c.get("before", math.nan) + c.get("after", math.nan)) / 2, c.get("median", math.nan)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path)
    p.add_argument("--pairs", default=",".join(DEFAULT_PAIRS))
    args = p.parse_args(argv)
    results = json.loads((args.data / "results.json").read_text())
    wanted = [x for x in args.pairs.split(",") if x]
    lines = [
        "| pair | measured saved ms | predicted, each capture | median | within the target | "
        "capture's control µs (rounds' median) |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        for name, a, b, rule, _knob in mt.pairs(results):
            if name not in wanted:
                continue
            m = mt.measured(results, a, b)
            runs = sorted(
                (
                    r
                    for r in (args.data / "runs").glob(f"{a}*")
                    if r.name == a or r.name.startswith(f"{a}-cap")
                ),
                key=lambda r: (r.name != a, r.name),
            )
            if m is None or not runs:
                continue
            preds, controls = [], []
            for run in runs:
                out = cache / f"{run.name}.parquet"
                mt.parse_folder(run, out)
                pred = mt.prediction(out, rule, mt.FLAGS.get(name), mt.combined(name))
                saved = (pred.get("saved_ms") or {}).get("unprofiled")
                if saved is not None:
                    preds.append(saved)
                    controls.append(control_us(run))
            if not preds:
                continue
            med = statistics.median(preds)
            ok = abs(med - m["saved_ms"]) <= max(mt.TARGET_FRACTION * abs(m["saved_ms"]), mt.TARGET_MS)
            lines.append(
                f"| {name} | {m['saved_ms']:.3f} | {', '.join(f'{x:.2f}' for x in preds)} | {med:.3f} | "
                f"{'yes' if ok else '**no**'} | {', '.join(f'{c:.1f}' for c, _ in controls)} "
                f"({controls[0][1]:.1f}) |"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
