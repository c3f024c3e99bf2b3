"""The pairs measured in both H100 runs of docs/results/advice.md side by side: how far a pair's measured
change moved between two runs minutes apart on one machine, against how far its prediction missed.

    .venv/bin/python docs/results/advice/runs_compared.py     # reads data/ and data_b/predictions.json

Prints a Markdown table: per pair, each run's measured and predicted saving (ms, unprofiled) and the
runs' spread (the measured change of the second run less the first's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = (HERE / "data" / "predictions.json", HERE / "data_b" / "predictions.json")


def _pred(row: dict) -> float | None:
    p = row.get("prediction") or {}
    return (p.get("saved_ms") or {}).get("unprofiled")


def main() -> int:
    first, second = ({r["pair"]: r for r in json.loads(p.read_text())} for p in RUNS)
    lines = [
        "| pair | measured saved ms, first run | second run | spread | predicted, first | second | "
        "within the target, first | second |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pair, a in first.items():
        b = second.get(pair)
        if b is None or a.get("within_target") is None or b.get("within_target") is None:
            continue
        ma, mb, pa, pb = a["measured_saved_ms"], b["measured_saved_ms"], _pred(a), _pred(b)
        yes = {True: "yes", False: "**no**"}
        lines.append(
            f"| {pair} | {ma:.3f} | {mb:.3f} | {mb - ma:+.3f} | {pa:.3f} | {pb:.3f} | "
            f"{yes[a['within_target']]} | {yes[b['within_target']]} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
