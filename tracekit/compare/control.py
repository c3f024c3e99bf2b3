"""A machine-speed control for comparisons across Python versions: is the change the interpreter's, or the
machine's?

A shared host drifts: neighbours, clocks and caches change how fast *everything* runs, by more than a Python
version changes the interpreter (on an H200 host, aten ops' CPU time per call moved +15 % to +61 % between
two groups of runs of one workload). Two controls that no Python version changes sit beside the figures:

- **in the trace**: framework ops' CPU time per call — aten's C++ (dispatcher, kernels on the CPU,
  autograd), the same code whatever calls it. Per step: Σ CPU time / Σ calls over the ops both captures
  call, so the mix of ops is the same on both sides;
- **in the manifest**: the calibration `tracekit capture` runs before and after each run
  (tracekit/capture/calibrate.py): a fixed aten op on the CPU (`aten_cpu`) and, on CUDA, a fixed kernel
  (`cuda_kernel`), beside the interpreter-dependent figures (a pure-Python loop, a torch op called from
  Python, a CUDA launch from Python). Each run contributes the mean of its before and after medians; one
  run alone contributes both.

Interpreter time is then also shown *normalised* by the in-trace control — host interpreter time per step ÷
framework op time per call, i.e. in units of "framework op calls" — which cancels a drift that slows C++ and
Python alike. `control_figures` returns the figures (section SECTION_CONTROL) and plain sentences: how far
the control moved, and whether that drift is larger than the effect on interpreter time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tracekit.analysis.model import Report
from tracekit.compare.stats import Estimate, median_shift, rank_shift

SECTION_CONTROL = "machine-speed control"
# (calibration figure, label, unit, scale from ns); the controls first.
CALIBRATION_FIGURES: tuple[tuple[str, str, str, float], ...] = (
    ("aten_cpu", "cal. aten CPU op (control)", "µs", 1e-3),
    ("cuda_kernel", "cal. CUDA kernel (control)", "µs", 1e-3),
    ("python_loop", "cal. Python loop", "ns/iter", 1.0),
    ("torch_call", "cal. torch op from Python", "µs", 1e-3),
    ("cuda_launch", "cal. CUDA launch from Python", "µs", 1e-3),
)
# Interpreter figures divided by the aten control within each calibration: the machine's speed cancels.
NORMALISED_FIGURES: tuple[tuple[str, str], ...] = (
    ("python_loop", "cal. Python loop ÷ control"),
    ("torch_call", "cal. torch op ÷ control"),
    ("cuda_launch", "cal. CUDA launch ÷ control"),
)
KEY_OP_CONTROL = "control.framework_op"
KEY_INTERPRETER_NORMALISED = "control.interpreter_normalised"


def run_calibrations(manifest: Optional[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The calibration document of each run of a side: a pooled side's `group_calibration`, else its own."""
    m = manifest or {}
    group = m.get("group_calibration")
    docs = group if isinstance(group, (list, tuple)) else [m.get("calibration")]
    return [d for d in docs if isinstance(d, Mapping)]


def _figure_ns(doc: Mapping[str, Any], when: str, figure: str, stat: str) -> float:
    fig = (((doc.get(when) or {}).get("figures") or {}).get(figure)) or {}
    return float(fig.get(stat) or 0)


def calibration_values(
    manifest: Optional[Mapping[str, Any]], figure: str, *, stat: str = "ns", per: Optional[str] = None
) -> Optional[np.ndarray]:
    """`figure` per run: the mean of its before and after calibrations (a single run gives both). `stat`:
    "ns" (the median trial) or "min_ns" (the fastest). `per`: a control figure to divide by within each
    calibration — the host's speed can switch between two runs, or between a run's before and after (on the
    H200 host: every CPU figure ~1.65× slower at once), so the ratio is taken where both were measured."""
    runs = run_calibrations(manifest)
    per_run = []
    for doc in runs:
        vals = []
        for when in ("before", "after"):
            v = _figure_ns(doc, when, figure, stat)
            d = _figure_ns(doc, when, per, stat) if per else 1.0
            if v > 0 and d > 0:
                vals.append(v / d)
        if vals:
            per_run.append(vals)
    if not per_run:
        return None
    if len(per_run) == 1:
        return np.array(per_run[0], dtype=np.float64)
    return np.array([sum(v) / len(v) for v in per_run], dtype=np.float64)


@dataclass(frozen=True)
class ControlFigure:
    """One control figure; `tracekit.compare.diff` shows it as a FigureDiff of SECTION_CONTROL."""

    key: str
    label: str
    unit: str
    a: float
    b: float
    estimate: Optional[Estimate]

    @property
    def significant(self) -> bool:
        return self.estimate is not None and self.estimate.significant


def _figure(key: str, label: str, unit: str, xa, xb, scale: float, confidence: float, pooled: bool) -> Any:
    va, vb = xa * scale, xb * scale
    # pooled runs: the change of the run medians shown (stats.median_shift), as the diff's own figures
    est = median_shift(va, vb, confidence) if pooled else rank_shift(va, vb, confidence)
    return ControlFigure(key, label, unit, float(np.median(va)), float(np.median(vb)), est)


def op_time_per_call(report: Report, names: set[str]) -> dict[int, float]:
    """step → Σ CPU ns / Σ calls over the ops in `names` (the in-trace control)."""
    ns: dict[int, float] = defaultdict(float)
    calls: dict[int, int] = defaultdict(int)
    for op in report.op_stats:
        if op.name in names:
            for step, c, t in zip(op.steps, op.calls_per_step, op.ns_per_step):
                ns[step] += t
                calls[step] += c
    return {s: ns[s] / calls[s] for s in ns if calls[s] > 0}


def interpreter_per_step(report: Report) -> dict[int, float]:
    """step → host interpreter ns, the mean over ranks."""
    acc: dict[int, list[int]] = defaultdict(list)
    for h in report.host.steps:
        acc[h.step].append(h.breakdown_ns.get("interpreter", 0))
    return {s: sum(v) / len(v) for s, v in acc.items()}


STEP_OFFSET = 1_000_000  # a pooled run i numbers its step n as i·STEP_OFFSET + n (tracekit.compare.group)


def _per_run(values: dict[int, float], pooled: bool) -> np.ndarray:
    steps = sorted(values)
    x = np.array([values[s] for s in steps], dtype=np.float64)
    if not pooled:
        return x
    runs = np.array(steps, dtype=np.int64) // STEP_OFFSET
    return np.array([np.median(x[runs == r]) for r in np.unique(runs)])


def _pooled(report: Report) -> bool:
    return len(run_calibrations(report.capture)) > 1 or bool((report.capture or {}).get("group"))


def wanted(a: Report, b: Report) -> bool:
    """The control is shown where the Python differs or both sides carry a calibration."""

    def py(r: Report) -> Any:
        p = (r.capture or {}).get("python")
        return p.get("version") if isinstance(p, Mapping) else p

    return py(a) != py(b) or bool(run_calibrations(a.capture) and run_calibrations(b.capture))


def control_figures(a: Report, b: Report, confidence: float) -> tuple[list[ControlFigure], list[str]]:
    """The control's figures for B against A, and what they say (see the module docstring)."""
    if not wanted(a, b):
        return [], []
    pa, pb = _pooled(a), _pooled(b)
    pooled = pa or pb
    out = []
    for name, label, unit, scale in CALIBRATION_FIGURES:
        xa, xb = calibration_values(a.capture, name), calibration_values(b.capture, name)
        if xa is not None and xb is not None:
            out.append(_figure(f"control.{name}", label, unit, xa, xb, scale, confidence, pooled))
    for name, label in NORMALISED_FIGURES:
        xa = calibration_values(a.capture, name, per="aten_cpu")
        xb = calibration_values(b.capture, name, per="aten_cpu")
        if xa is not None and xb is not None:
            out.append(_figure(f"control.{name}_per_aten", label, "ratio", xa, xb, 1.0, confidence, pooled))
    names = {op.name for op in a.op_stats} & {op.name for op in b.op_stats}
    ca, cb = op_time_per_call(a, names), op_time_per_call(b, names)
    ia, ib = interpreter_per_step(a), interpreter_per_step(b)
    if ca and cb:
        label = "op time per call (control)"
        out.append(
            _figure(KEY_OP_CONTROL, label, "µs", _per_run(ca, pa), _per_run(cb, pb), 1e-3, confidence, pooled)
        )
        na = {s: ia[s] / ca[s] for s in ia if s in ca and ca[s] > 0}
        nb = {s: ib[s] / cb[s] for s in ib if s in cb and cb[s] > 0}
        if na and nb and any(na.values()) and any(nb.values()):
            label = "interpreter ÷ op per call"
            xa, xb = _per_run(na, pa), _per_run(nb, pb)
            out.append(_figure(KEY_INTERPRETER_NORMALISED, label, "calls", xa, xb, 1.0, confidence, pooled))
    return out, _sentences(out, _interpreter_change(ia, ib, pa, pb, confidence))


def _interpreter_change(ia, ib, pa: bool, pb: bool, confidence: float) -> Optional[float]:
    if not ia or not ib:
        return None
    est = rank_shift(_per_run(ia, pa), _per_run(ib, pb), confidence)
    return None if est is None or est.log_ratio is None else est.log_ratio


def _pct(log_ratio: float) -> str:
    return f"{(np.exp(log_ratio) - 1) * 100:+.1f}%".replace("-", "−")


def _with_interval(est: Estimate) -> str:
    ci, lr = est.log_ratio_ci, est.log_ratio if est.log_ratio is not None else 0.0
    if ci is None or not ci.bounded:
        return f"{_pct(lr)} (interval unbounded)"
    return f"{_pct(lr)} [{_pct(ci.low)}, {_pct(ci.high)}]"


def _reach(est: Estimate) -> float:
    """How far the control's interval reaches from no change (in log ratio); inf when unbounded."""
    ci = est.log_ratio_ci
    if ci is None or not ci.bounded:
        return float("inf")
    return max(abs(ci.low), abs(ci.high))


def _sentences(figures: Sequence[Any], interp_log_ratio: Optional[float]) -> list[str]:
    by_key = {f.key: f for f in figures}
    control = by_key.get(KEY_OP_CONTROL) or by_key.get("control.aten_cpu")
    if control is None or control.estimate is None or control.estimate.log_ratio is None:
        return []
    est = control.estimate
    drift = est.log_ratio
    what = "framework ops' CPU time per call" if control.key == KEY_OP_CONTROL else "the aten calibration"
    lines = [
        f"machine-speed control: {what} (C++ that no Python version changes) moved {_with_interval(est)} "
        "from A to B"
    ]
    if interp_log_ratio is None:
        return lines
    norm = by_key.get(KEY_INTERPRETER_NORMALISED)
    normalised = (
        f"; normalised by the control, interpreter time changed {_with_interval(norm.estimate)}"
        + (" (significant)" if norm.significant else " (no significant change)")
        if norm is not None and norm.estimate is not None and norm.estimate.log_ratio is not None
        else ""
    )
    effect = f"the change in interpreter time ({_pct(interp_log_ratio)})"
    if abs(drift) >= abs(interp_log_ratio):
        verdict = f"the machine's drift is larger than {effect}: the raw figures say more about the machine"
    elif _reach(est) >= abs(interp_log_ratio):
        verdict = (
            f"the machine's speed varied as much as {effect} (the control's interval reaches that far): the "
            "raw figures cannot tell Python from the machine"
        )
    else:
        verdict = f"the machine's drift is smaller than {effect}, and its interval stays below it"
    return lines + [verdict + normalised]
