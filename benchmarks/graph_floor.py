"""The CUDA-graph constants of `tracekit whatif --cuda-graphs` (tracekit/whatif/cudagraph.py), measured.

    python benchmarks/graph_floor.py RUN_DIR...      # from graph captures (trace files of a run folder)
    python3 benchmarks/graph_floor.py --device       # on a GPU: one graph launch's host time, unprofiled

From traces: per graph launch (`cudaGraphLaunch`; its kernels carry its correlation id), the gaps between
consecutive kernels of the launch on one stream (GRAPH_GAP_NS is their median), the launch call's
duration (profiled: CUPTI's callbacks per node inflate it) and its end → first kernel.
On the device: the host-bound heavy_mlp step (hidden=512, layers=24, batch 64, SGD) and the seed MLP as
graphs through the workloads' own `cuda_graphs` path: the host time of `graph.replay()` (mean of 50 calls
between synchronisations, no profiler), and, as a check of that path, the largest difference between the
weights after 5 graphed steps and after 5 eager steps from the same start.
Stdlib (+ torch for --device).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import sys
import time
from collections import defaultdict


def from_traces(paths: list) -> None:
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.pt.trace.json*"))) if os.path.isdir(p) else [p]
    for f in files:
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt") as fh:
            ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
        launches = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaGraphLaunch"}
        by = defaultdict(list)
        device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        for k in sorted(device, key=lambda e: e["ts"]):
            c = k.get("args", {}).get("correlation")
            if c in launches:
                by[(c, k["tid"])].append(k)
        gaps, first, nodes = [], [], []
        for (c, _), ks in by.items():
            first.append(ks[0]["ts"] - launches[c]["ts"] - launches[c]["dur"])
            gaps += [b["ts"] - a["ts"] - a["dur"] for a, b in zip(ks, ks[1:])]
            nodes.append(len(ks))
        if not gaps:
            print(f"{f}: no graph launch with kernels")
            continue
        print(
            json.dumps(
                {
                    "trace": os.path.basename(f),
                    "graph_launches": len(nodes),
                    "kernels_per_launch": statistics.median(nodes),
                    "gap_us": {
                        "median": round(statistics.median(gaps), 3),
                        "mean": round(statistics.fmean(gaps), 3),
                        "p90": round(sorted(gaps)[int(0.9 * (len(gaps) - 1))], 3),
                    },
                    "launch_call_us_profiled": [round(launches[c]["dur"], 1) for c, _ in by],
                    "launch_end_to_first_kernel_us": [round(x, 1) for x in first],
                }
            )
        )


def on_device() -> None:
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tracekit.capture.knobs import resolve_knobs
    from tracekit.capture.workload import Context, knobs_of, load

    shapes = {
        "hostbound": {"hidden": "512", "layers": "24", "batch_size": "64", "in_features": "512",
                      "out_features": "512", "optimizer": "sgd"},
        "seed": {},
    }  # fmt: skip
    for name, shape in shapes.items():
        out = {"shape": name}
        for graphs in (False, True):
            knobs = resolve_knobs(knobs_of("heavy_mlp"), dict(shape, cuda_graphs=str(graphs)), "cuda", "x")
            torch.manual_seed(0)
            runner = load("heavy_mlp").build(Context("cuda", knobs))
            for _ in range(5 if graphs else 8):  # eager: the graph's 3 warm-up steps + its 5 replays
                runner.step()
            torch.cuda.synchronize()
            out["weights_graph" if graphs else "weights_eager"] = [
                p.detach().clone() for p in runner.trainer.module.parameters()
            ]
            if graphs:
                g = runner.trainer.graphed.graph
                calls = []
                for _ in range(5):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(50):
                        g.replay()
                    calls.append((time.perf_counter() - t0) / 50 * 1e6)
                    torch.cuda.synchronize()
                out["replay_host_us"] = [round(c, 2) for c in calls]
                out["graph"] = runner.trainer.extra.get("cuda_graph")
        pairs = zip(out.pop("weights_eager"), out.pop("weights_graph"))
        out["max_weight_diff_graph_vs_eager"] = max(float((a - b).abs().max()) for a, b in pairs)
        print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:] == ["--device"]:
        on_device()
    else:
        from_traces(sys.argv[1:])
