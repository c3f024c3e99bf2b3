"""Can a trace tell its own profiler cost? (docs/results/advice.md, "The profiler's cost where a trace
cannot fix it"). For every capture whose unprofiled step fixes the cost (tracekit.whatif.profiler, fitted),
in-trace figures that the profiler's per-event cost might show, against that fitted cost: a log-log line
through them and its leave-one-out error, beside the error of one constant (the default).

    .venv/bin/python docs/results/advice/cost_proxies.py DATA_DIR [DATA_DIR ...]   # runs/<config>/ in each

The figures, per capture (µs, medians): the gap between two consecutive children of a C++ op (no Python
runs between them: the profiler's exit and enter callbacks, and dispatch), trivial ops' durations
(aten::empty, aten::view, aten::as_strided, aten::t, aten::transpose, aten::detach) and the runtime's
cudaLaunchKernel calls. Prints a Markdown table.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import tracekit as tk
from tracekit.whatif.predict import Replayer
from tracekit.whatif.profiler import DEFAULT_COST_US

TRIVIAL = ("aten::empty", "aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::detach")
HOST_CATS = ("cpu_op", "cuda_runtime", "python_function", "user_annotation")


def child_gaps_us(t) -> float:
    """The median gap between consecutive cpu_op / runtime children of a cpu_op, per thread."""
    h = t[t.cat.isin(HOST_CATS) & (t.ph == "X")]
    gaps = []
    for _, g in h.groupby("tid"):
        g = g.sort_values(["ts_ns", "dur_ns"], ascending=[True, False])
        ts = g.ts_ns.to_numpy()
        te = ts + g.dur_ns.to_numpy()
        cat = g.cat.to_numpy()
        stack: list = []
        last: dict = {}
        for i in range(len(g)):
            while stack and te[stack[-1]] <= ts[i]:
                stack.pop()
            if stack and cat[stack[-1]] == "cpu_op" and cat[i] in ("cpu_op", "cuda_runtime"):
                p = stack[-1]
                if p in last and ts[i] >= last[p]:
                    gaps.append(ts[i] - last[p])
                last[p] = te[i]
            stack.append(i)
    return float(np.median(gaps)) / 1e3 if gaps else float("nan")


def figures(t) -> dict:
    out = {"C++ children's gap": child_gaps_us(t)}
    for name in TRIVIAL:
        d = t.dur_ns[t.name == name]
        out[name] = float(d.median()) / 1e3 if len(d) else float("nan")
    launch = t.dur_ns[(t.cat == "cuda_runtime") & t.name.str.contains("LaunchKernel")]
    out["cudaLaunchKernel"] = float(launch.median()) / 1e3 if len(launch) else float("nan")
    return out


def main(argv: list[str]) -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for data in map(Path, argv):
            for run in sorted((data / "runs").iterdir()):
                if not any(run.glob("*.json*")) or not (run / "manifest.json").exists():
                    continue
                out = Path(tmp) / f"{data.name}_{run.name}.parquet"
                subprocess.run(
                    [sys.executable, "-m", "tracekit", "parse", str(run), "-o", str(out), "--force"],
                    check=True,
                    capture_output=True,
                )
                capture = tk.load(str(out))
                _, _, est = Replayer.of(capture, keep_frames=False, keep_host=True).cost(None)
                if est.fitted:
                    rows.append((est.cost_us, figures(capture.table.to_pandas())))
    y = np.log([c for c, _ in rows])
    lines = [
        f"{len(rows)} captures whose unprofiled step fixes the cost "
        f"(median {np.exp(np.median(y)):.2f} µs/event)",
        "",
        "| figure | captures | correlation (log-log) | leave-one-out error, median (80th pct.) |",
        "|---|---|---|---|",
        f"| the default, {DEFAULT_COST_US:g} µs/event | {len(rows)} | - | "
        f"{_err(y - np.log(DEFAULT_COST_US))} |",
    ]
    for name in rows[0][1] if rows else ():
        ok = [i for i, (_, f) in enumerate(rows) if np.isfinite(f[name]) and f[name] > 0]
        x = np.log([rows[i][1][name] for i in ok])
        yy = y[ok]
        a = np.c_[x, np.ones_like(x)]
        loo = []
        for j in range(len(x)):
            m = np.arange(len(x)) != j
            coef, *_ = np.linalg.lstsq(a[m], yy[m], rcond=None)
            loo.append(yy[j] - a[j] @ coef)
        lines.append(f"| {name} | {len(x)} | {np.corrcoef(x, yy)[0, 1]:.2f} | {_err(np.array(loo))} |")
    print("\n".join(lines))
    return 0


def _err(e: np.ndarray) -> str:
    """A log error as the factor it is off by."""
    a = np.abs(e)
    return f"x{np.exp(np.median(a)):.2f} (x{np.exp(np.percentile(a, 80)):.2f})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
