"""The pairs measured in several H100 runs of docs/results/advice.md side by side: how far a pair's
measured change moved between runs minutes apart on one machine, against how far its prediction missed.

    .venv/bin/python docs/results/advice/runs_compared.py     # reads RUNS' predictions.json

Prints a Markdown table: per pair measured in at least two of the runs, each run's measured and
predicted saving (ms, unprofiled; the prediction from the first capture of A in each run; "-" where the
run did not measure the pair), the spread of the measured savings (largest less smallest), and in which
runs the prediction was within the target.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the runs that measured the same pairs: the first three (one H100, minutes apart) and the ninth (another
# H100 host, later)
RUNS = tuple(HERE / d / "predictions.json" for d in ("data", "data_b", "data_c", "data_i"))
NAMES = ("1", "2", "3", "9")


def _pred(row: dict) -> float | None:
    p = row.get("prediction") or {}
    return (p.get("saved_ms") or {}).get("unprofiled")


def main() -> int:
    runs = [{r["pair"]: r for r in json.loads(p.read_text())} for p in RUNS if p.exists()]
    names = " / ".join(NAMES[: len(runs)])
    lines = [
        f"| pair | measured saved ms, run {names} | spread | predicted, run {names} | within the target |",
        "|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}

    def cell(values: list, fmt) -> str:
        return " / ".join("-" if v is None else fmt(v) for v in values)

    for pair in runs[0]:
        rows = [r.get(pair) if r.get(pair, {}).get("within_target") is not None else None for r in runs]
        if sum(r is not None for r in rows) < 2:
            continue
        measured = [r["measured_saved_ms"] if r else None for r in rows]
        got = [x for x in measured if x is not None]
        lines.append(
            f"| {pair} | {cell(measured, lambda x: f'{x:.2f}')} | {max(got) - min(got):.2f} | "
            f"{cell([_pred(r) if r else None for r in rows], lambda x: f'{x:.2f}')} | "
            f"{cell([r['within_target'] if r else None for r in rows], lambda x: yes[x])} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
