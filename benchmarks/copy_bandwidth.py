"""Host↔device copies in real traces, by kind: the bandwidth of large ones and the duration of tiny ones.

    python benchmarks/copy_bandwidth.py fixtures/h200_default/resnet_loader fixtures/h200/sync_heavy ...

Per copy name (`Memcpy HtoD (Pinned -> Device)`, `Memcpy HtoD (Pageable -> Device)`, ...): the median
bandwidth of the copies of at least 1 MiB (GB/s = bytes / duration), and the median duration of those
under 4 KiB (a copy's fixed cost). tracekit.whatif.replay's `--pin-memory` takes its pinned copy's
duration from these (PINNED_GBPS, COPY_LATENCY_NS; benchmarks/RESULTS.md). Stdlib only.
"""

from __future__ import annotations

import glob
import gzip
import json
import statistics
import sys
from collections import defaultdict


def copies(folder: str) -> list[tuple[str, int, float]]:
    """(name, bytes, duration µs) of every gpu_memcpy event of the folder's traces (or one trace file)."""
    if folder.endswith((".json", ".json.gz")):
        paths = [folder]
    else:  # a run folder: its traces (not manifest.json)
        paths = glob.glob(f"{folder}/*.pt.trace.json.gz") + glob.glob(f"{folder}/*.pt.trace.json")
    out = []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as fh:
            doc = json.load(fh)
        for e in doc.get("traceEvents", []):
            if e.get("cat") == "gpu_memcpy" and e.get("dur"):
                out.append((e["name"], int((e.get("args") or {}).get("bytes") or 0), float(e["dur"])))
    return out


def main(folders: list[str]) -> int:
    large: dict[str, list[float]] = defaultdict(list)
    tiny: dict[str, list[float]] = defaultdict(list)
    for folder in folders:
        for name, nbytes, dur_us in copies(folder):
            if nbytes >= 1 << 20:
                large[name].append(nbytes / dur_us / 1e3)
            elif 0 < nbytes < 4096:
                tiny[name].append(dur_us)
    print("copy\tlarge copies\tmedian GB/s\ttiny copies\tmedian µs")
    for name in sorted(set(large) | set(tiny)):
        gb, us = large.get(name, []), tiny.get(name, [])
        print(
            f"{name}\t{len(gb)}\t{statistics.median(gb) if gb else float('nan'):.1f}\t{len(us)}\t"
            f"{statistics.median(us) if us else float('nan'):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
