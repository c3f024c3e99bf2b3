"""Same-stream overlaps of device activity in real traces: what `parse.sanity`'s stream-overlap warning
(STREAM_OVERLAP_TOLERANCE_NS) must let through.

    python benchmarks/stream_overlaps.py                      # fixtures/ and /work/shared/traces
    python benchmarks/stream_overlaps.py TRACE...

Per trace file: its device activities, how many start before an earlier one on their (device, stream)
ends, by cause (the same CUDA graph launch, i.e. one correlation id, or not), the largest overlap of
each, the name of the worst non-graph one, and how many the parse would warn about. The overlaps are
`tracekit.parse.sanity.stream_overlaps`, the function the warning uses.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracekit.data.schema import DEVICE_ACTIVITY_CATS  # noqa: E402
from tracekit.parse import sanity  # noqa: E402
from tracekit.parse.derive import Frame, needed_for_derive  # noqa: E402
from tracekit.parse.parser import parse_paths  # noqa: E402

DEFAULT = [ROOT / "fixtures", Path("/work/shared/traces")]


def traces(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.json*") if q.name != "manifest.json")
        elif p.exists():
            out.append(p)
    return out


def measure(path: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = parse_paths([path]).table
    events = table.filter(table.column("kind").to_numpy(zero_copy_only=False) == "event")
    frame = Frame(needed_for_derive(events))
    device = frame.mask("cat", lambda v: v in DEVICE_ACTIVITY_CATS)
    rows, overlap, same_launch = sanity.stream_overlaps(frame, device)
    graph, other = (overlap > 0) & same_launch, (overlap > 0) & ~same_launch
    worst = ""
    if other.any():
        i = int(np.where(other, overlap, -1).argmax())
        worst = f"  worst: {(frame.strings('name', rows[i : i + 1])[0] or '?')[:50]}"
    warned = int(((overlap > sanity.STREAM_OVERLAP_TOLERANCE_NS) & ~same_launch).sum())
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return (
        f"{name}: {len(rows)} activities; overlapping: "
        f"{int(other.sum())} (max {int(overlap[other].max(initial=0)) / 1e3:.3f} µs), "
        f"{int(graph.sum())} of one graph launch (max {int(overlap[graph].max(initial=0)) / 1e3:.3f} µs); "
        f"warned {warned}{worst}"
    )


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:]] or DEFAULT
    for path in traces(paths):
        print(measure(path), flush=True)


if __name__ == "__main__":
    main()
