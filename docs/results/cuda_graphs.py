"""docs/results/whatif.md, "CUDA graphs and torch.compile": `whatif --cuda-graphs` on each eager capture
against the same step captured as one CUDA graph, and the compiled step analysed (not predicted).

    .venv/bin/python docs/results/cuda_graphs.py [RUNS_DIR]     # default: docs/results/cuda_graphs

RUNS_DIR holds the run folders of `benchmarks/gpu_cuda_graphs.sh` (hb_eager, hb_graph, seed_eager,
seed_graph, hb_compile, ..., `_r2` for round 2); the pair of the lead's user script comes from
fixtures/h200_graphs. Prints the Markdown tables and writes RUNS_DIR/results.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tracekit.analysis.causes import CAUSE_ROWS  # noqa: E402
from tracekit.analysis.pipeline import analyze  # noqa: E402
from tracekit.api import load  # noqa: E402
from tracekit.whatif.predict import Replayer, whatif  # noqa: E402
from tracekit.whatif.scenario import WhatIfOptions  # noqa: E402

# The closest scenario before --cuda-graphs: each host cause a CUDA graph removes set to 0.
HOST_ZERO = [f"{c.name}=0" for c in CAUSE_ROWS if c.state and not c.graph_keeps]


def _unprofiled_ms(capture) -> float:
    return float(statistics.median(capture.manifest["unprofiled_step_ms"]))


def pair(name: str, rnd: int, a_dir: Path, b_dir: Path) -> dict:
    a, b = load(a_dir), load(b_dir)
    rp = Replayer.of(a)
    graphs, _ = whatif(a, WhatIfOptions(cuda_graphs=True), replayer=rp, attribute=False)
    zero, _ = whatif(a, WhatIfOptions(set=HOST_ZERO), replayer=rp, attribute=False)
    rb = Replayer.of(b)
    (g,) = graphs.devices
    (z,) = zero.devices
    return {
        "pair": name,
        "round": rnd,
        "A": a_dir.name,
        "B": b_dir.name,
        "A_unprofiled_ms": _unprofiled_ms(a),
        "A_profiled_ms": _median_ms(g.observed_step_ns),
        "predicted": {
            "profiled": _median_ms(g.predicted_step_ns),
            "unprofiled": _median_ms(g.unprofiled_predicted_step_ns),
        },
        "host_zero": {
            "profiled": _median_ms(z.predicted_step_ns),
            "unprofiled": _median_ms(z.unprofiled_predicted_step_ns),
        },
        "measured": {"profiled": _median_ms(rb.observed.dur[0]), "unprofiled": _unprofiled_ms(b)},
        "regions": graphs.graph["cuda_graphs"],
    }


def _median_ms(ns) -> float:
    """The median over steps (whatif's step definition): the step that spans the two profiler cycles holds
    the profiler's own pause between them, which no change to the step removes."""
    return float(statistics.median(ns)) / 1e6


def compiled(a_dir: Path, c_dir: Path) -> dict:
    a, c = load(a_dir), load(c_dir)
    rc = analyze(c, top_kernels=None)
    (d,) = rc.devices
    idle = {k: v / 1e6 for k, v in d.idle_ns_per_step().items()}
    comp = rc.compiled
    return {
        "A": a_dir.name,
        "C": c_dir.name,
        "A_unprofiled_ms": _unprofiled_ms(a),
        "C_unprofiled_ms": _unprofiled_ms(c),
        "C_idle_ms_per_step": idle,
        "C_kernels_per_step": sum(k.kernel.count for k in rc.kernel_stats) / max(d.steps, 1),
        "triton_kernels_per_step": comp.triton_kernels_per_step if comp else None,
        "guard_ms_per_step": comp.guard_ms_per_step if comp else None,
        "compile_ms_by_step": list(comp.compile_ms_by_step) if comp else None,
        "advice": [a.message for a in rc.advice],
    }


def tables(runs: Path) -> tuple[list[str], dict]:
    """The page's two tables (Markdown lines) and the figures they are made of."""
    out: list[str] = []
    rows = []
    for rnd in range(1, 10):
        sfx = "" if rnd == 1 else f"_r{rnd}"
        if (runs / f"hb_eager{sfx}").exists() and (runs / f"hb_graph{sfx}").exists():
            rows.append(pair("heavy_mlp host-bound", rnd, runs / f"hb_eager{sfx}", runs / f"hb_graph{sfx}"))
    if (runs / "seed_eager").exists():
        rows.append(pair("heavy_mlp seed (GPU-bound)", 1, runs / "seed_eager", runs / "seed_graph"))
    fx = ROOT / "fixtures" / "h200_graphs"
    rows.append(pair("mlp_modes.py (user script)", 1, fx / "mlp_eager", fx / "mlp_graph"))
    comp = [compiled(runs / "hb_eager", runs / "hb_compile")] if (runs / "hb_compile").exists() else []
    comp.append(compiled(fx / "mlp_eager", fx / "mlp_compile"))
    out.append(
        "| pair | round | A eager, unprofiled ms | predicted graph: profiled | unprofiled | "
        "measured graph: profiled | unprofiled | error (unprofiled) | before: host causes = 0, unprofiled |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, m = r["predicted"], r["measured"]
        err = p["unprofiled"] / m["unprofiled"] - 1
        out.append(
            f"| {r['pair']} | {r['round']} | {r['A_unprofiled_ms']:.3f} | {p['profiled']:.3f} | "
            f"{p['unprofiled']:.3f} | {m['profiled']:.3f} | {m['unprofiled']:.3f} | {err:+.1%} | "
            f"{r['host_zero']['unprofiled']:.3f} |"
        )
    out.append("")
    out.append(
        "| eager A | compiled C | A unprofiled ms | C unprofiled ms | C/A | C idle ms/step: runtime, launch, "
        "framework, interpreter | kernels/step (Triton) | compile in profiled steps |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for c in comp:
        i = c["C_idle_ms_per_step"]
        out.append(
            f"| {c['A']} | {c['C']} | {c['A_unprofiled_ms']:.3f} | {c['C_unprofiled_ms']:.3f} | "
            f"{c['C_unprofiled_ms'] / c['A_unprofiled_ms']:.3f} | {i['runtime']:.3f}, {i['launch']:.3f}, "
            f"{i['framework']:.3f}, "
            f"{i['interpreter']:.3f} | {c['C_kernels_per_step']:.0f} ({c['triton_kernels_per_step']:.0f}) | "
            f"{c['compile_ms_by_step'] or 'none'} |"
        )
    return out, {"graphs": rows, "compile": comp}


def main(runs: Path) -> None:
    lines, doc = tables(runs)
    print("\n".join(lines))
    (runs / "results.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "results" / "cuda_graphs")
