"""The host work autocast adds, read from the fp32 and bf16 traces of the advice runs
(docs/results/advice.md): per configuration, the median host duration (µs, profiled) of the outermost
convolution op (aten::conv2d), of autograd's ToCopyBackward0 node (the gradient's cast back), and of batch
norm forward (aten::batch_norm) and backward (its autograd node), and their recorded events.

    .venv/bin/python docs/results/advice/host_paths.py [DATA_DIR]     # default: data/

Prints a Markdown table (the traces' JSON, read as explain.py reads them).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from explain import folder_events  # noqa: E402

CONFIGS = ("r18", "r18_bf16", "r50", "r50_bf16")
ROWS = {
    "conv2d forward": ("aten::conv2d",),
    "gradient cast node": ("autograd::engine::evaluate_function: ToCopyBackward0",),
    "batch norm forward": ("aten::batch_norm",),
    "batch norm backward": (
        "autograd::engine::evaluate_function: CudnnBatchNormBackward0",
        "autograd::engine::evaluate_function: NativeBatchNormBackward0",
    ),
}


def outermost(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Per name of ROWS: (events inside, µs) of each outermost occurrence on its thread."""
    host = [e for e in folder_events(run) if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    by_thread = defaultdict(list)
    for e in host:
        by_thread[e["tid"]].append(e)
    wanted = {n for names in ROWS.values() for n in names}
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        covered_until = -1.0
        for i, e in enumerate(evs):
            if e.get("cat") != "cpu_op" or e["name"] not in wanted or e["ts"] < covered_until:
                continue
            end = e["ts"] + e["dur"]
            j = i
            while j < len(evs) and evs[j]["ts"] < end:
                j += 1
            out[e["name"]].append((j - i, float(e["dur"])))
            covered_until = end if e["name"] == "aten::conv2d" else covered_until
    return out


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else HERE / "data"
    found = {c: outermost(data / "runs" / c) for c in CONFIGS if (data / "runs" / c).is_dir()}
    lines = [
        "| host work | " + " | ".join(found) + " |",
        "|---|" + "---|" * len(found),
    ]
    for row, names in ROWS.items():
        cells = []
        for c in found:
            xs = [x for n in names for x in found[c].get(n, [])]
            cells.append(
                f"{statistics.median(d for _, d in xs):.1f} µs, {statistics.median(n for n, _ in xs):.0f} ev"
                if xs
                else "-"
            )
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
