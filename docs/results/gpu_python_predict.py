"""The GPU cross-version study's predictions (docs/results/gpu_python_versions.md): each run of the first
Python predicted under each other Python by `tracekit whatif --python-from` (calibrated), beside the
bytecode-only bound, the naive `interpreter / S` with S the measured bytecode-loop speed-up, the most any
faster Python could save, and what the other Python measured.

    .venv/bin/python docs/results/gpu_python_predict.py FOLDER [FOLDER ...]

FOLDER: a capture folder `tracekit capture --repeat` wrote (OUT/<workload>, parsed runs or run folders).
Writes FOLDER/predictions.json and prints a Markdown table per folder. Every figure is unprofiled (the
manifests' steps timed without the profiler) and relative: a prediction is the replay's change applied to
A's own measured step, so the replay's error on A does not enter the comparison with B. A's profiler
cycles are replayed together, each its own timeline (issue 17's step definition).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tracekit.api import load  # noqa: E402
from tracekit.compare.group import find_runs, group_runs  # noqa: E402
from tracekit.compare.stats import median_shift  # noqa: E402
from tracekit.whatif.predict import COLUMNS, Replayer  # noqa: E402
from tracekit.whatif.predict import whatif as run_whatif  # noqa: E402
from tracekit.whatif.python import calibration, from_manifests, from_speedup  # noqa: E402
from tracekit.whatif.scenario import WhatIfOptions  # noqa: E402


def _changes(cap, scenarios: list[WhatIfOptions]) -> list[float]:
    """Each scenario's unprofiled change, the whole capture replayed once per scenario (its profiler
    cycles are separate timelines in the replay: tracekit.analysis.steps)."""
    rp = Replayer.of(cap)
    return [_change(rp, cap, sc) for sc in scenarios]


def _run_ms(manifest: dict) -> float:
    return statistics.median(manifest["unprofiled_step_ms"])


def _change(rp: Replayer, cap, scenario: WhatIfOptions) -> float:
    """The replay's unprofiled change under `scenario` (predicted / replayed unchanged − 1)."""
    res, _ = run_whatif(cap, scenario, replayer=rp, attribute=False)
    u = res.unprofiled
    return u.predicted_step_ms / u.replayed_step_ms - 1.0


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%".replace("-", "−")


def _measured(ms_a: list[float], ms_b: list[float]) -> dict:
    est = median_shift(ms_a, ms_b, 0.95)  # as `tracekit diff` pools runs: the change of the run medians
    ci = est.log_ratio_ci
    bounded = ci is not None and ci.bounded
    import math

    return {
        "change": math.exp(est.log_ratio) - 1,
        "ci": [math.exp(ci.low) - 1, math.exp(ci.high) - 1] if bounded else None,
        "significant": est.significant,
    }


def predict_folder(folder: Path) -> dict:
    runs = find_runs(folder)
    manifests = {loc: m for loc, m in runs}
    groups = group_runs(runs, "python")
    base_version, base_paths = groups[0]
    per_run_ms = {v: [_run_ms(manifests[p]) for p in paths] for v, paths in groups}
    cal = {v: calibration([manifests[p] for p in paths]) for v, paths in groups}
    out = {"folder": str(folder), "base": base_version, "versions": {}, "calibration": cal, "runs": {}}
    for v, paths in groups:
        out["runs"][v] = [Path(p).name for p in paths]
    ceilings = []
    preds: dict[str, list[dict]] = {v: [] for v, _ in groups[1:]}
    for a_path in base_paths:
        cap = load(a_path, columns=COLUMNS)
        a_ms = _run_ms(manifests[a_path])
        scenarios, models = [WhatIfOptions(set={"interpreter": 0.0})], []
        for v, paths in groups[1:]:
            model = from_manifests(manifests[a_path], [manifests[p] for p in paths], f"py{v}")
            speedup = 1.0 / model.bound_factor  # B's bytecode-loop speed-up over A's, machine drift out
            translated = from_speedup(manifests[a_path], speedup)
            scenarios += [
                WhatIfOptions(python=model.to_json()),
                WhatIfOptions(set={"interpreter": model.bound_factor}),
                WhatIfOptions(python=translated.to_json()),
            ]
            models.append((v, model, speedup))
        changes = _changes(cap, scenarios)
        ceilings.append(changes[0])
        for j, (v, model, speedup) in enumerate(models):
            calibrated, bound, translated = changes[1 + 3 * j : 4 + 3 * j]
            preds[v].append(
                {
                    "a": Path(a_path).name,
                    "a_ms": a_ms,
                    "factor": model.interpreter_factor,
                    "bound_factor": model.bound_factor,
                    "calibrated": calibrated,
                    "bound": bound,
                    "speedup": speedup,
                    "speedup_translated": translated,
                }
            )
    out["ceiling"] = ceilings
    for v, _ in groups[1:]:
        rows = preds[v]
        med = statistics.median
        out["versions"][v] = {
            "measured": _measured(per_run_ms[base_version], per_run_ms[v]),
            "measured_ms": med(per_run_ms[v]),
            "base_ms": med(per_run_ms[base_version]),
            "factor": med(r["factor"] for r in rows),
            "bound_factor": med(r["bound_factor"] for r in rows),
            "calibrated": med(r["calibrated"] for r in rows),
            "calibrated_range": [min(r["calibrated"] for r in rows), max(r["calibrated"] for r in rows)],
            "bound": med(r["bound"] for r in rows),
            "speedup": med(r["speedup"] for r in rows),
            "speedup_translated": med(r["speedup_translated"] for r in rows),
            "per_run": rows,
        }
    return out


def markdown(doc: dict) -> str:
    base = doc["base"]
    ceiling = _pct(statistics.median(doc["ceiling"]))
    lines = [
        f"**{Path(doc['folder']).name}** (A = Python {base}, {len(doc['runs'][base])} runs; the most any "
        f"faster Python could save (interpreter time removed, replayed): the unprofiled step {ceiling}, "
        "median over A's runs)",
        "",
        "| B | measured change of the unprofiled step [95 % interval] | predicted, calibrated "
        "(`--python-from B`; median [range] over A's runs) | miss | `--python-speedup S`, S = B's bytecode "
        "loop speed-up (calibrated translation) | naive: interpreter time / S | interpreter factor "
        "(calibrated / bytecode) |",
        "|---|---|---|---|---|---|---|",
    ]
    for v, r in doc["versions"].items():
        m = r["measured"]
        ci = f"[{_pct(m['ci'][0])}, {_pct(m['ci'][1])}]" if m["ci"] else "unbounded"
        sig = " **significant**" if m["significant"] else ""
        lo, hi = r["calibrated_range"]
        miss = (1 + r["calibrated"]) / (1 + m["change"]) - 1
        lines.append(
            f"| {v} | {_pct(m['change'])} {ci}{sig} | {_pct(r['calibrated'])} [{_pct(lo)}, {_pct(hi)}] | "
            f"{_pct(miss)} | S = {r['speedup']:.2f}: {_pct(r['speedup_translated'])} | {_pct(r['bound'])} | "
            f"×{r['factor']:.3f} / ×{r['bound_factor']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(folders: list[str]) -> None:
    for f in folders:
        doc = predict_folder(Path(f))
        (Path(f) / "predictions.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(markdown(doc))


if __name__ == "__main__":
    main(sys.argv[1:])
