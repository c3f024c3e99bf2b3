"""A large real-looking trace for the timing benchmarks: one Chrome trace's events repeated N times, each
copy shifted past the one before, its ProfilerStep numbers, correlation and External ids made its own.

    python benchmarks/repeat_trace.py docs/results/advice/data/runs/r50 /tmp/big_shapes.json --copies 10

(The advice run's ResNet-50 capture, record_shapes=True, x 10: the 93 MB trace of benchmarks/RESULTS.md's
"args.Input Dims kept by the parse" and "The channels_last and autocast knobs in tracekit analyze".)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a trace (.json or .json.gz) or a folder holding one")
    p.add_argument("out", type=Path, help="the trace to write (.json)")
    p.add_argument("--copies", type=int, default=10)
    a = p.parse_args(argv)
    src = a.source
    if src.is_dir():
        src = next(iter(sorted(src.glob("*.json*"))))
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as fh:
        doc = json.load(fh)
    ev = doc["traceEvents"]
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000
    out = []
    for k in range(a.copies):
        for e in ev:
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + k * span
            if k and e2.get("ph") == "M":
                continue
            if k and str(e2.get("name", "")).startswith("ProfilerStep#"):
                e2["name"] = "ProfilerStep#" + str(int(e2["name"].split("#")[1]) + 100 * k)
            if k and isinstance(e2.get("args"), dict):
                args = dict(e2["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] = args[key] + k * 10_000_000
                e2["args"] = args
            out.append(e2)
    doc["traceEvents"] = out
    tmp = a.out.with_name(a.out.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    tmp.replace(a.out)
    print(f"{a.out}: {len(out)} events, {a.out.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
