"""The pairs measured in several H100 runs of docs/results/advice.md side by side: how far a pair's
measured change moved between runs minutes apart on one machine, against how far its prediction missed.

    .venv/bin/python docs/results/advice/runs_compared.py     # reads data/, data_b/, data_c/predictions.json

Prints a Markdown table: per pair measured in every run, each run's measured and predicted saving (ms,
unprofiled; the prediction from the first capture of A in each run), the spread of the measured savings
(largest less smallest), and in which runs the prediction was within the target.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = tuple(HERE / d / "predictions.json" for d in ("data", "data_b", "data_c"))


def _pred(row: dict) -> float | None:
    p = row.get("prediction") or {}
    return (p.get("saved_ms") or {}).get("unprofiled")


def main() -> int:
    runs = [{r["pair"]: r for r in json.loads(p.read_text())} for p in RUNS if p.exists()]
    n = len(runs)
    lines = [
        f"| pair | measured saved ms, run 1 .. {n} | spread | predicted, run 1 .. {n} | within the target |",
        "|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for pair in runs[0]:
        rows = [r.get(pair) for r in runs]
        if any(r is None or r.get("within_target") is None for r in rows):
            continue
        measured = [r["measured_saved_ms"] for r in rows]
        predicted = [_pred(r) for r in rows]
        lines.append(
            f"| {pair} | {' / '.join(f'{x:.2f}' for x in measured)} | {max(measured) - min(measured):.2f} | "
            f"{' / '.join(f'{x:.2f}' for x in predicted)} | "
            f"{' / '.join(yes[r['within_target']] for r in rows)} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
