"""docs/results/memory.md's tables from the captures of docs/results/memory/run_gpu.sh: each change predicted
by `tracekit memory` from the model's baseline capture, beside what the changed run measured.

    python docs/results/memory/table.py                     # the committed H100 runs: fixtures/h100_memory
    python docs/results/memory/table.py OUT [OUT2] --save DIR   # a new run: run_gpu.sh's $OUT of each call

OUT may hold the run folders, or run_gpu.sh's tars and measured.json (also packed inside another tar, as
the GPU machine's results come back); --save DIR keeps each run folder's manifest and trace, measured.json
and log.txt in DIR (what fixtures/h100_memory holds). The tables are written into --md between its
`<!-- table.py -->` markers; the prose around them is kept.

Measured peaks are the allocator's own (max_memory_allocated / max_memory_reserved over the unprofiled
timed steps, which the capture reads and resets at every step boundary; a CPU smoke run, which has no
allocator figures, uses the changed run's trace peak). Measured step times are the changed run's
unprofiled timed steps: their median, or their mean where the input pipeline paces the steps (the
statistic the prediction is of: MemoryPrediction.unprofiled_basis). A miss is predicted / measured - 1.
A run that did not finish is a row with its reason (status, error, exit status in log.txt).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Optional

import tracekit as tk
from tracekit.whatif.memory_options import MemoryOptions

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "fixtures" / "h100_memory"
PAGE = ROOT / "docs" / "results" / "memory.md"
BEGIN, END = "<!-- table.py: begin -->", "<!-- table.py: end -->"
# Each changed run: its baseline and the change, as tracekit memory's options (mlp_fit's batch is the one
# the fit predicted: its own row, from the run's batch).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mlp_b2": ("mlp_base", {"batch_scale": 2}),
    "mlp_amp": ("mlp_base", {"amp": "bf16"}),
    "mlp_ckpt4": ("mlp_base", {"checkpoint": 4}),
    "mlp_ga4": ("mlp_base", {"grad_accum": 4}),
    "mlp_fit": ("mlp_base", {}),
    "dl_b2": ("dl_base", {"batch_scale": 2}),
    "dl_amp": ("dl_base", {"amp": "bf16"}),
    "dl_ckpt2": ("dl_base", {"checkpoint": 2}),
    "dl_ga2": ("dl_base", {"grad_accum": 2}),
    "resnet_b2": ("resnet_base", {"batch_scale": 2}),
    "resnet_amp": ("resnet_base", {"amp": "bf16"}),
    "resnet_ckpt4": ("resnet_base", {"checkpoint": 4}),
    "gpt2_b2": ("gpt2_base", {"batch_scale": 2}),
    "gpt2_amp": ("gpt2_base", {"amp": "bf16"}),
    # transformers' gradient checkpointing checkpoints every transformer block
    "gpt2_ckpt": ("gpt2_base", {"checkpoint_modules": r"^GPT2Block_"}),
    # held out (added after the model was built on the families above): timm's ViT, whose grad
    # checkpointing checkpoints every block
    "vit_b2": ("vit_base", {"batch_scale": 2}),
    "vit_amp": ("vit_base", {"amp": "bf16"}),
    "vit_ckpt": ("vit_base", {"checkpoint_modules": r"^Block_"}),
}
FAMILIES = {
    "mlp": "heavy_mlp",
    "dl": "dataloader_train",
    "resnet": "ResNet (torchvision)",
    "gpt2": "GPT-2 (transformers)",
    "vit": "ViT-S/16 (timm, held out)",
}
TARGET = 0.10  # predicted peaks within 10 % of measured (issue 38)
EXPLAIN = 0.02  # a predicted peak this far off is shown by category beside the run's own
SIGNALS = {130: "SIGINT", 137: "SIGKILL", 143: "SIGTERM", 124: "timeout"}


def mib(n: Optional[float]) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def pct(x: Optional[float]) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def miss(pred: Optional[float], meas: Optional[float]) -> Optional[float]:
    return pred / meas - 1 if pred is not None and meas else None


# -- the runs ---------------------------------------------------------------------------------------------


def unpack(sources: list[Path], work: Path) -> Path:
    """One folder holding the run folders, measured.json and log.txt: a source itself where it is one,
    else `work` with every source's tars extracted into it (tars inside those too), their measured.json
    merged (run_gpu.sh in several calls, e.g. ONLY=...) and logs joined."""
    if len(sources) == 1 and (sources[0] / "measured.json").exists() and not any(sources[0].glob("*.tar")):
        return sources[0]
    merged: dict[str, Any] = {}
    logs = []
    for i, src in enumerate(sources):  # one loop per source
        part = work / f".{i}"
        part.mkdir()
        _extract(src, part)
        if (part / "measured.json").exists():
            m = json.loads((part / "measured.json").read_text())
            runs = {**merged.get("runs", {}), **m.get("runs", {})}
            merged = {**m, **merged, "runs": runs}
        if (part / "log.txt").exists():
            logs.append((part / "log.txt").read_text())
        for d in run_folders(part).values():
            shutil.move(str(d), work / d.name)
        shutil.rmtree(part)
    (work / "measured.json").write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    (work / "log.txt").write_text("".join(logs))
    return work


def _extract(src: Path, dest: Path) -> None:
    """`src`'s run folders, measured.json and log.txt into `dest`, its tars (and tars in them) extracted."""
    for item in sorted(src.iterdir()):
        if item.is_dir() or item.name in ("measured.json", "log.txt"):
            (shutil.copytree if item.is_dir() else shutil.copy)(item, dest / item.name)
    pending = sorted(src.glob("*.tar"))
    while pending:  # one loop per tar, nested ones appended
        tar = pending.pop(0)
        inner = dest / f".{tar.stem}"
        with tarfile.open(tar) as tf:
            tf.extractall(inner, filter="data")
        for item in sorted(inner.iterdir()):
            target = dest / item.name
            if item.suffix == ".tar":
                shutil.move(str(item), dest / f".{item.name}")
                pending.append(dest / f".{item.name}")
            elif not target.exists():
                shutil.move(str(item), target)
        shutil.rmtree(inner)
        if tar.parent == dest:
            tar.unlink()


def run_folders(folder: Path) -> dict[str, Path]:
    return {d.name: d for d in sorted(folder.iterdir()) if d.is_dir() and not d.name.startswith(".")}


def save(folder: Path, dest: Path) -> None:
    """Each run folder's manifest and traces, measured.json and log.txt, into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("measured.json", "log.txt"):
        if (folder / f).exists():
            shutil.copy(folder / f, dest / f)
    for name, d in run_folders(folder).items():  # one loop per run
        out = dest / name
        out.mkdir(exist_ok=True)
        for f in [d / "manifest.json", *sorted(d.glob("*.pt.trace.json.gz"))]:
            if f.exists():
                shutil.copy(f, out / f.name)


def exits(log: str) -> dict[str, tuple[int, int]]:
    """Each run's exit status and seconds, from run_gpu.sh's log."""
    out, run = {}, None
    for line in log.splitlines():  # one loop per line
        m = re.match(r"== (\S+) \(", line)
        if m:
            run = m.group(1)
        m = re.match(r"\s+exit status (\d+) after (\d+) s", line)
        if m and run:
            out[run] = (int(m.group(1)), int(m.group(2)))
    return out


def reason(run: str, meas: dict, exit_of: dict[str, tuple[int, int]]) -> str:
    """Why a run has no measurement: its status, error and exit status."""
    m = meas.get(run) or {}
    status = m.get("status") or "not run"
    parts = [status]
    if m.get("error"):  # its first clause (torch's messages run on with tensors and hints)
        parts.append(re.split(r": \[|\. ", str(m["error"]))[0])
    if run in exit_of:
        code, secs = exit_of[run]
        sig = f" ({SIGNALS[code]})" if code in SIGNALS else ""
        parts.append(f"the capture exited {code}{sig} after {secs} s")
    return "; ".join(parts)


def unprofiled_steps(run: Path) -> list[float]:
    m = json.loads((run / "manifest.json").read_text())
    return list(m["ranks"][0]["unprofiled"].get("step_ms") or [])


def batch_of(run: Path) -> Optional[int]:
    knobs = json.loads((run / "manifest.json").read_text()).get("knobs") or {}
    b = knobs.get("batch_size")
    return int(b) if isinstance(b, int) else None


# -- the figures ------------------------------------------------------------------------------------------


def derive(folder: Path) -> dict[str, Any]:
    """Every figure of the page, from a folder of run folders and measured.json."""
    measured = json.loads((folder / "measured.json").read_text())
    meas = measured["runs"]
    runs = {n: d for n, d in run_folders(folder).items() if (d / "manifest.json").exists()}
    log = (folder / "log.txt").read_text() if (folder / "log.txt").exists() else ""
    exit_of = exits(log)
    rows, bases = [], []
    for run, (base, kwargs) in VARIANTS.items():  # one loop per changed run
        if base not in runs:
            continue
        if base not in bases:
            bases.append(base)
        m = meas.get(run) or {}
        if run == "mlp_fit":
            if run not in runs or not batch_of(runs[run]) or not batch_of(runs[base]):
                continue
            kwargs = {"batch_scale": batch_of(runs[run]) / batch_of(runs[base])}
        d = tk.memory(str(runs[base]), **kwargs).prediction.devices[0]
        ok = m.get("status") == "ok" and run in runs
        peak = (m.get("allocated_peak_bytes") or trace_peak(runs[run])) if ok else None
        steps = unprofiled_steps(runs[run]) if ok else []
        stat = statistics.mean if d.unprofiled_basis == "mean" else statistics.median
        rows.append(
            {
                "run": run,
                "model": FAMILIES.get(run.split("_")[0], run),
                "change": describe(run, kwargs),
                "baseline_peak": d.observed_peak_allocated,
                "measured_peak": peak,
                "predicted_peak": d.predicted_peak_allocated,
                "predicted_upper": d.predicted_peak_allocated_upper,
                "baseline_step_ms": d.unprofiled_observed_step_ms,
                "measured_step_ms": stat(steps) if steps else None,
                "predicted_step_ms": d.unprofiled_predicted_step_ms,
                "basis": d.unprofiled_basis,
                "missing": None if ok else reason(run, meas, exit_of),
                "predicted_categories": dict(d.predicted_by_category),
                "measured_categories": split_at_peak(runs[run]) if ok and peak and off(d, peak) else None,
            }
        )
    return {
        "device": measured.get("device", "cuda"),
        "rows": rows,
        "fit": fit(measured, runs),
        "oom": (meas.get("mlp_oom") or {}).get("oom"),
        "checks": checks(runs, bases),
    }


def off(d: Any, peak: int) -> bool:
    """A prediction whose peak is far enough off to show where (its categories beside the run's)."""
    return abs(d.predicted_peak_allocated / peak - 1) >= EXPLAIN


def split_at_peak(run: Path) -> Optional[dict[str, int]]:
    """The changed run's own categories at its trace's peak (tracekit analyze)."""
    mem = tk.analyze(str(run), savings=False).report.memory
    peaks = [m.peak for m in mem if m.peak is not None]
    return dict(max(peaks, key=lambda p: p.peak_allocated).by_category) if peaks else None


def describe(run: str, kwargs: dict[str, Any]) -> str:
    if run == "mlp_fit":
        return f"batch × {kwargs['batch_scale']:.2f}: the largest in the fit's budget"
    return MemoryOptions(**kwargs).describe()


def trace_peak(run: Path) -> Optional[int]:
    """The largest step peak of a run's trace (a CPU smoke run has no allocator figures)."""
    return max((m.peak_allocated for m in tk.memory(str(run)).memory), default=None)


def fit(measured: dict, runs: dict[str, Path]) -> Optional[dict[str, Any]]:
    """The largest batch in X GiB: predicted from the baseline, then captured at that batch."""
    if "mlp_fit" not in runs or "mlp_base" not in runs:
        return None
    x = measured.get("fit_gib")
    d = tk.memory(str(runs["mlp_base"]), fit_gib=x, time=False).prediction.devices[0]
    at = d  # the prediction at the fitted batch
    if d.fit_batch_size and d.batch_size:
        scale = d.fit_batch_size / d.batch_size
        at = tk.memory(str(runs["mlp_base"]), batch_scale=scale, time=False).prediction.devices[0]
    m = measured["runs"].get("mlp_fit") or {}
    return {
        "gib": x,
        "batch": d.fit_batch_size,
        "scale": d.fit_batch_scale,
        "captured": batch_of(runs["mlp_fit"]),
        "baseline_batch": d.batch_size,
        "measured_reserved": m.get("reserved_peak_bytes"),
        "measured_allocated": m.get("allocated_peak_bytes"),
        "predicted_reserved": at.predicted_peak_reserved,
        "predicted_allocated": at.predicted_peak_allocated,
        "baseline_ratio": d.observed_peak_reserved / d.observed_peak_allocated
        if d.observed_peak_reserved and d.observed_peak_allocated
        else None,
    }


def checks(runs: dict[str, Path], bases: list[str]) -> list[dict[str, Any]]:
    """Each baseline's peak explained (tracekit analyze): its categories, the trace's largest allocated
    total, the allocator's max_memory_allocated of the same step."""
    out = []
    for base in sorted(bases):  # one loop per baseline
        r = tk.analyze(str(runs[base]), savings=False).report
        for m in r.memory:  # one loop per device
            p = m.peak
            if p is not None:
                out.append(
                    {
                        "baseline": base,
                        "peak": p.peak_allocated,
                        "categories": dict(p.by_category),
                        "trace_max": m.trace_max_allocated,
                        "allocator": m.allocator_peak,
                        "reserve": p.reserve_at_peak,
                    }
                )
    return out


# -- the page ---------------------------------------------------------------------------------------------


def render(fig: dict[str, Any]) -> list[str]:
    smoke = fig["device"] != "cuda"
    rows = []
    for r in fig["rows"]:  # one loop per changed run
        m = miss(r["predicted_peak"], r["measured_peak"])
        flag = " ✗" if m is not None and abs(m) > TARGET else ""
        step = r["measured_step_ms"]
        rows.append(
            [
                r["model"],
                r["change"],
                mib(r["baseline_peak"]),
                mib(r["measured_peak"]) if not r["missing"] else f"missing: {r['missing']}",
                mib(r["predicted_peak"])
                + (f" (up to {mib(r['predicted_upper'])})" if r.get("predicted_upper") is not None else ""),
                pct(m) + flag,
                ms(r["baseline_step_ms"]) + (" (mean)" if r["basis"] == "mean" else ""),
                ms(step),
                ms(r["predicted_step_ms"]),
                pct(miss(r["predicted_step_ms"], step)),
            ]
        )
    lines = _table(
        [
            "model",
            "change",
            "baseline peak MiB",
            "measured peak MiB",
            "predicted MiB",
            "miss",
            "baseline step ms",
            "measured step ms",
            "predicted ms",
            "miss",
        ],
        rows,
    )
    off_rows = [r for r in fig["rows"] if r.get("measured_categories")]
    if off_rows:
        names = [c for c in off_rows[0]["predicted_categories"]]
        lines += [
            "",
            f"**Where the peaks differ** (a miss of {EXPLAIN:.0%} or more): the categories at the predicted "
            "peak (`tracekit memory`) against the changed run's own at its peak (`tracekit analyze`), MiB.",
            "",
            *_table(
                ["model", "change", ""] + [n.replace("_", " ") for n in names],
                [
                    [r["model"], r["change"], which] + [mib(r[key].get(n, 0)) for n in names]
                    for r in off_rows
                    for which, key in (
                        ("predicted", "predicted_categories"),
                        ("measured", "measured_categories"),
                    )
                ],
            ),
        ]
    f = fig["fit"]
    if f:
        res, alloc, budget = f["measured_reserved"], f["measured_allocated"], f["gib"] * 2**30
        verdict = "-" if not res else ("fits" if res <= budget else "does not fit")
        ratio = f"{res / alloc:.2f}" if res and alloc else "-"
        base = f"{f['baseline_ratio']:.2f}" if f["baseline_ratio"] else "- (no reserve known: allocated)"
        lines += [
            "",
            f"**The largest batch in {f['gib']:g} GiB** (heavy_mlp, `tracekit memory mlp_base --fit-gib "
            f"{f['gib']:g}`): batch {f['batch']} (× {f['scale']:.2f} the baseline's {f['baseline_batch']}), "
            f"predicted to reserve {mib(f['predicted_reserved'])} MiB (allocated "
            f"{mib(f['predicted_allocated'])} × the baseline's reserved/allocated {base} at its peak); "
            f"captured at batch {f['captured']}: reserved peak {mib(res)} MiB of {mib(budget)} ({verdict}, "
            f"{pct(miss(res, budget))} of the budget), allocated peak {mib(alloc)} MiB (reserved/allocated "
            f"{ratio}).",
        ]
    if fig["oom"]:
        lines += [
            "",
            f"**A run that cannot fit** (heavy_mlp, a batch far too large): the capture says "
            f"`{fig['oom'].get('message')}` (status oom, exit 4).",
        ]
    crows = []
    for c in fig["checks"]:  # one loop per baseline device
        cats = c["categories"]
        crows.append(
            [
                c["baseline"],
                mib(c["peak"]),
                pct(miss(sum(cats.values()), c["peak"])),
                mib(c["trace_max"]),
                pct(miss(c["peak"], c["trace_max"])),
                mib(c["allocator"]),
                pct(miss(c["peak"], c["allocator"])),
                ", ".join(f"{k} {mib(v)}" for k, v in cats.items() if v),
                mib(c["reserve"]),
            ]
        )
    if crows:
        lines += [
            "",
            "**The baselines' peaks explained** (`tracekit analyze`): the categories against the peak; the "
            "peak against the trace's largest allocated total and against the allocator's "
            "max_memory_allocated of the same step (the capture's reading"
            + ("; none on the CPU" if smoke else "")
            + ").",
            "",
            *_table(
                [
                    "baseline",
                    "peak MiB",
                    "categories vs peak",
                    "trace max MiB",
                    "peak vs it",
                    "allocator MiB",
                    "peak vs it",
                    "categories at the peak (MiB)",
                    "reserve MiB",
                ],
                crows,
            ),
        ]
    return lines


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def write_page(page: Path, lines: list[str]) -> None:
    """The lines between the page's markers (the markers and the page made where missing)."""
    text = page.read_text() if page.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    page.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "out", type=Path, nargs="*", default=[DATA], help="run_gpu.sh's $OUT (of each call), or run folders"
    )
    ap.add_argument("--md", type=Path, default=PAGE, help="the page to write the tables into")
    ap.add_argument("--save", type=Path, help="keep the run folders, measured.json and log.txt here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = unpack(args.out, Path(tmp))
        if args.save:
            save(folder, args.save)
            folder = args.save
        lines = render(derive(folder))
    write_page(args.md, lines)
    print("\n".join(lines))
    print(f"wrote {args.md}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
