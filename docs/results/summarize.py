"""Print the summary tables of docs/results/README.md from the diff reports that run_cross_version.sh wrote.

    .venv/bin/python docs/results/summarize.py docs/results/cross_version/*.json

One table per workload: for each capture against the first, the change of the figures the articles talk
about (step time, throughput) and the ones that isolate the interpreter (step time without the profiler,
host dispatch gaps, aten::linear CPU time per call), each with its 95 % interval and the tool's verdict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIGURES = (
    ("step_time", "step time (profiled)"),
    ("unprofiled_step_time", "step time without profiler"),
    ("throughput", "throughput"),
    ("dispatch_gap", "host dispatch gaps per step"),
    ("op:aten::linear", "aten::linear CPU time per call"),
)


def _pct(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x * 100:+.1f}%".replace("-", "−")


def _cell(fig: dict | None) -> str:
    if fig is None:
        return "—"
    if fig["change"] is None:
        return fig["verdict"]
    ci = fig["change_ci"]
    interval = f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else ""
    verdict = "**significant**" if fig["significant"] else "no significant change"
    return f"{_pct(fig['change'])}{interval} {verdict}"


def summarize(path: Path) -> str:
    doc = json.loads(path.read_text())
    first = doc["captures"][0]
    lines = [
        f"#### {first['workload'] or path.stem}: each run against {first['label']} "
        f"(Python {first['python']}, torch {first['torch']})",
        "",
        "| run | " + " | ".join(label for _, label in FIGURES) + " |",
        "|---|" + "---|" * len(FIGURES),
    ]
    for pair in doc["pairs"]:
        figs = {f["key"]: f for f in pair["figures"] + pair["ops"]}
        cells = [_cell(figs.get(key)) for key, _ in FIGURES]
        lines.append(f"| {pair['b']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(paths: list[str]) -> None:
    for p in paths:
        print(summarize(Path(p)))


if __name__ == "__main__":
    main(sys.argv[1:])
