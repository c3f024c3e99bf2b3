"""What tracekit says of each public trace (docs/results/public_traces.md): which rule found the steps,
how many, the median step, GPU utilisation, the largest idle cause, whether the unchanged replay
reproduces the observed step, and whether the trace records a CUDA/HIP graph capture.

    .venv/bin/python docs/results/public_traces.py [FOLDER]   # default: the first of PUBLIC there

FOLDER holds <project>/<trace>.json[.gz] (SOURCES.md beside them says where each comes from). Prints a
Markdown table; a trace tracekit refuses is a row with its one-line error (never a traceback).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import tracekit as tk
from tracekit.errors import TracekitError

ROOT = Path(__file__).resolve().parents[2]
# Where the public traces lie: beside a checkout (the steering repo's shared/, as laid for the
# developers and CI), or inside this one (a local copy, never committed: .gitignore).
PUBLIC = (ROOT.parent / "shared" / "traces" / "public", ROOT / "shared" / "traces" / "public")


def traces(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*/*") if p.name.endswith((".json", ".json.gz")))


def row(path: Path) -> list[str]:
    name = f"{path.parent.name}/{path.name}"
    try:
        a = tk.analyze(path, savings=False, check=True)
    except TracekitError as exc:
        return [name, "refused", "", "", "", "", "", "", str(exc)]
    r = a.report
    rules = "; ".join(sorted({f"{x.rule} {x.marker or ''}".strip() for x in r.step_rules}))
    steps = str(sum(x.steps for x in r.step_rules if x.rule != "none") or 1)
    dev = r.devices[0] if r.devices else None
    if dev is None:
        return [
            name,
            rules,
            steps,
            f"{r.host.steps[0].step_time_ns / 1e6:.3f}" if r.host.steps else "",
            "CPU",
            "",
            "",
            "",
            "",
        ]
    idle = dev.idle_ms_per_step
    top = max(idle, key=lambda c: idle[c])
    replay = _replay_error(path)
    return [
        name,
        rules,
        steps,
        f"{statistics.median(dev.step_ns) / 1e6:.3f}",
        dev.name or "",
        f"{100 * dev.gpu_utilization:.1f}%",
        f"{top} {idle[top]:.3f} ms",
        replay,
        "; ".join(
            f"graph capture: {g.launches} launches recorded, {g.share_of_steps:.0%} of the steps"
            for g in r.graph_captures
        ),
    ]


def _replay_error(path: Path) -> str:
    try:
        w = tk.whatif(path)
    except TracekitError as exc:
        return f"refused: {exc}"
    errs = [d.replay_error for d in w.result.devices if d.replay_error is not None]
    return f"{100 * max(abs(e) for e in errs):.2f}%" if errs else "-"


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else next((p for p in PUBLIC if p.is_dir()), None)
    if folder is None or not folder.is_dir():
        print(f"no public traces: give their folder, or lay them at {PUBLIC[0]}", file=sys.stderr)
        return 2
    head = ["trace", "steps found by", "steps", "median step ms", "device", "GPU busy", "largest idle cause",
            "replay error", "notes"]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for p in traces(folder):
        print("| " + " | ".join(c.replace("|", "\\|") for c in row(p)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
