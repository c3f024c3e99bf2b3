"""What changed between captures, and only when it is real: Reports in, a `DiffResult` out (pure).

`diff([A, B, C])` compares each later report with the first. Every figure is compared on per-step values
(`stats.rank_shift`, a Hodges–Lehmann shift with its Mann–Whitney interval), except ratios of sums over
steps (GPU utilisation, total time: `stats.bootstrap_shift`) and peaks (one value per capture: shown, never
called significant). A change is significant only when its interval excludes zero.

**Sign convention.** The antisymmetric quantities are the shift B − A (in the figure's unit) and the log
ratio log(B/A), with their intervals: ``diff(B, A)`` negates them exactly (property-tested). The relative
change shown to people, ``B/A − 1 = exp(log ratio) − 1``, is derived from the log ratio for display; it is
not itself antisymmetric (+25 % one way is −20 % the other).

**Several devices or ranks.** Samples are grouped by step number: the step time is the longest window
of that step over ranks; busy, idle per cause, utilisation and collective wait are the mean over devices;
host figures the mean over ranks.

**Several runs per side** (`group.merge_reports`, `tracekit diff A1,A2 B1,B2`): the steps of one run
share the machine's state, so when a side pools runs the unit of comparison is the run — each run's
median (or ratio of sums) — and the same rank test runs on those (`stats.METHOD_RUNS`); the columns are
then the median of the runs' values and the change is the change of those columns (`stats.median_shift`),
so a column that rises never shows a fall.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tracekit.analysis.memory_model import CATEGORIES, CATEGORY_NAMES
from tracekit.analysis.model import CAUSES, HOST_STATES, Report
from tracekit.compare import comparable, control
from tracekit.compare.comparable import Comparability, Facts
from tracekit.compare.stats import (
    DEFAULT_CONFIDENCE,
    METHOD_RUNS,
    Estimate,
    bootstrap_shift,
    median_shift,
    rank_shift,
    single_values,
)
from tracekit.errors import NotComparableError

DIFF_VERSION = 1
TOP_OPS = 10  # framework ops listed per pair
OP_MIN_SHARE = 0.005  # an op is listed only if its CPU time per step is ≥ 0.5 % of the step in A or B
OP_MIN_STEPS = 2  # ... and it is called in at least this many steps of each capture

SECTION_TIME = "time"
SECTION_DEVICE = "device"
SECTION_IDLE = "idle per step"
SECTION_HOST = "host per step"
SECTION_OPS = "framework ops, CPU time per call"
SECTION_MEMORY = "device memory at the step's peak"


@dataclass(frozen=True)
class FigureDiff:
    """One figure in A and B and its change. `a`/`b` are the median of the per-step values (or the
    ratio of sums / the peak, as `estimate.method` says); None when the capture lacks the figure."""

    key: str
    label: str
    unit: str
    section: str
    better: Optional[str]  # "lower" | "higher" | None (neither direction is better)
    a: Optional[float]
    b: Optional[float]
    estimate: Optional[Estimate]

    def to_json(self) -> dict[str, Any]:
        """This figure in `tracekit diff --json` (unbounded interval ends are null)."""
        e = self.estimate
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "section": self.section,
            "better": self.better,
            "a": self.a,
            "b": self.b,
            "change": self.change,
            "change_ci": list(self.change_ci) if self.change_ci else None,
            "shift": e.shift if e else None,
            "shift_ci": _interval_json(e.shift_ci) if e else None,
            "log_ratio": e.log_ratio if e else None,
            "log_ratio_ci": _interval_json(e.log_ratio_ci) if e else None,
            "method": e.method if e else None,
            "n_a": e.n_a if e else None,
            "n_b": e.n_b if e else None,
            "significant": self.significant,
            "direction": self.direction,
            "verdict": self.verdict,
        }

    @property
    def significant(self) -> bool:
        return self.estimate is not None and self.estimate.significant

    @property
    def change(self) -> Optional[float]:
        """Relative change B/A − 1 (display only; see the module's sign convention)."""
        e = self.estimate
        return None if e is None or e.log_ratio is None else math.expm1(e.log_ratio)

    @property
    def change_ci(self) -> Optional[tuple[float, float]]:
        e = self.estimate
        if e is None or e.log_ratio_ci is None:
            return None
        return (math.expm1(e.log_ratio_ci.low), math.expm1(e.log_ratio_ci.high))

    @property
    def direction(self) -> Optional[str]:
        """ "higher" / "lower" when significant, else None."""
        if not self.significant:
            return None
        assert self.estimate is not None
        return "higher" if self.estimate.shift > 0 else "lower"

    @property
    def improved(self) -> Optional[bool]:
        """True/False when significant and one direction is better, else None."""
        if self.direction is None or self.better is None:
            return None
        return self.direction == self.better

    @property
    def verdict(self) -> str:
        e = self.estimate
        if e is None:
            missing = " and ".join(s for s, v in (("A", self.a), ("B", self.b)) if v is None)
            return f"not in {missing}" if missing else "no data"
        if e.shift_ci is None:
            return "no interval (one value)"
        if not e.shift_ci.bounded:
            return "too few runs" if e.method == METHOD_RUNS else "too few steps"
        if not e.significant:
            return "no significant change"
        word = self.direction or ""
        if self.improved is not None:
            word += " (better)" if self.improved else " (worse)"
        return word


@dataclass(frozen=True)
class CaptureInfo:
    """Who a capture is, in the report's words."""

    label: str
    path: Optional[str]
    workload: Optional[str]
    python: Optional[str]
    torch: Optional[str]
    device: Optional[str]
    steps: int
    cpu_only: bool
    runs: int = 1  # pooled repeats (`tracekit diff A1,A2,...`)


@dataclass(frozen=True)
class Composition:
    """Mean time per step split into parts (busy + each idle cause, or the host states), in ms."""

    label: str
    kind: str  # "device" | "host"
    parts: tuple[tuple[str, float], ...]

    @property
    def total_ms(self) -> float:
        return sum(v for _, v in self.parts)


@dataclass(frozen=True)
class PairDiff:
    """B against A."""

    a: CaptureInfo
    b: CaptureInfo
    comparability: Comparability
    figures: tuple[FigureDiff, ...]
    ops: tuple[FigureDiff, ...]
    ops_compared: int = 0  # ops that passed the listing threshold; the op intervals are Bonferroni over them
    control_notes: tuple[str, ...] = ()  # what the machine-speed control says (compare.control)

    @property
    def ops_confidence(self) -> float:
        return self.ops[0].estimate.confidence if self.ops and self.ops[0].estimate else 0.0

    def figure(self, key: str) -> FigureDiff:
        for f in self.figures + self.ops:
            if f.key == key:
                return f
        raise KeyError(key)


@dataclass(frozen=True)
class DiffResult:
    """Each later capture against the first."""

    captures: tuple[CaptureInfo, ...]
    compositions: tuple[Composition, ...]
    pairs: tuple[PairDiff, ...]
    confidence: float = DEFAULT_CONFIDENCE
    parameters: Mapping[str, Any] = field(default_factory=dict)
    version: int = DIFF_VERSION

    def to_json(self) -> dict[str, Any]:
        """The `tracekit diff --json` document (unbounded interval ends are null)."""

        def info(c: CaptureInfo) -> dict[str, Any]:
            return {k: getattr(c, k) for k in c.__dataclass_fields__}

        return {
            "tracekit_diff": DIFF_VERSION,
            "confidence": self.confidence,
            "parameters": dict(self.parameters),
            "captures": [info(c) for c in self.captures],
            "compositions": [
                {"label": c.label, "kind": c.kind, "ms_per_step": dict(c.parts)} for c in self.compositions
            ],
            "pairs": [
                {
                    "a": p.a.label,
                    "b": p.b.label,
                    "comparable": p.comparability.comparable,
                    "summary": p.comparability.summary(),
                    "differences": [
                        {"field": d.field, "label": d.label, "a": d.a, "b": d.b, "role": d.role.value}
                        for d in p.comparability.differences
                    ],
                    "unchecked": list(p.comparability.unchecked),
                    "figures": [f.to_json() for f in p.figures],
                    "ops": [f.to_json() for f in p.ops],
                    "ops_compared": p.ops_compared,
                    "control_notes": list(p.control_notes),
                }
                for p in self.pairs
            ],
        }


def _interval_json(ci: Any) -> Optional[list[Optional[float]]]:
    """An interval (compare.stats.Interval) as [low, high], an unbounded end as null."""
    if ci is None:
        return None
    return [ci.low if math.isfinite(ci.low) else None, ci.high if math.isfinite(ci.high) else None]


# -- per-step values of one report ------------------------------------------------------------------------


@dataclass(frozen=True)
class StepValues:
    """A report's figures as per-step arrays (one entry per step number, ascending)."""

    steps: tuple[int, ...]
    dur_ns: np.ndarray
    busy_ns: Optional[np.ndarray]  # mean over devices; None for CPU-only captures
    utilization: Optional[np.ndarray]  # mean over devices of busy/dur
    idle_ns: Mapping[str, np.ndarray]  # cause → mean over devices
    collective_wait_ns: Optional[np.ndarray]
    host_ns: Mapping[str, np.ndarray]  # host state → mean over ranks
    dispatch_gap_ns: Optional[np.ndarray]
    dispatch_gaps: Optional[np.ndarray]
    samples_per_step: Optional[int]
    peak_memory_bytes: Optional[int]
    unprofiled_step_ns: Optional[np.ndarray]
    peak_memory_per_step: Optional[np.ndarray]  # bytes, when the manifest has them per step
    ops_per_call_ns: Mapping[str, np.ndarray]  # op → CPU ns per call in each step it was called
    ops_ns_per_step: Mapping[str, float]  # op → mean CPU ns per step (for the listing threshold)
    ops_calls_per_step: Mapping[str, float]  # op → median calls per step (workload fingerprint)
    # Which run each value comes from (`group`: pooled repeats number their steps run·STEP_OFFSET + n).
    step_runs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    host_runs: Optional[np.ndarray] = None
    ops_runs: Mapping[str, np.ndarray] = field(default_factory=dict)
    unprofiled_runs: Optional[np.ndarray] = None
    # host time getting each unprofiled step's batch (same steps as unprofiled_step_ns; None: not timed)
    unprofiled_loader_wait_ns: Optional[np.ndarray] = None
    # the trace's memory (Report.memory): per step, the largest over devices of its peak allocated and
    # reserved bytes and of each category at the peak (MEMORY_FIGURES); empty without memory events
    memory: Mapping[str, np.ndarray] = field(default_factory=dict)
    memory_runs: Optional[np.ndarray] = None

    @property
    def runs(self) -> int:
        return len(np.unique(self.step_runs)) if len(self.step_runs) else 1


STEP_OFFSET = control.STEP_OFFSET  # a pooled run i numbers its step n as i·STEP_OFFSET + n (compare.group)


def _run_of(steps: Sequence[int]) -> np.ndarray:
    return np.asarray(steps, dtype=np.int64) // STEP_OFFSET


def _mean_by_step(rows: Sequence[tuple[int, float]], steps: Sequence[int]) -> np.ndarray:
    acc: dict[int, list[float]] = defaultdict(list)
    for step, value in rows:
        acc[step].append(value)
    return np.array([statistics.fmean(acc[s]) if acc[s] else 0.0 for s in steps], dtype=np.float64)


def _max_by_step(rows: Sequence[tuple[int, float]], steps: Sequence[int]) -> np.ndarray:
    acc: dict[int, float] = {}
    for step, value in rows:
        acc[step] = max(acc.get(step, value), value)
    return np.array([acc[s] for s in steps], dtype=np.float64)


def _unprofiled_step_ns(manifest: Mapping[str, Any]) -> Optional[np.ndarray]:
    """Step times measured without the profiler just before the profiled run (capture manifest)."""
    for key, scale in (("unprofiled_step_ns", 1.0), ("unprofiled_step_ms", 1e6)):
        value = manifest.get(key)
        if isinstance(value, (list, tuple)) and value:
            return np.asarray(value, dtype=np.float64) * scale
    return None


def _unprofiled_loader_wait_ns(manifest: Mapping[str, Any]) -> Optional[np.ndarray]:
    """The loader wait of each unprofiled step (capture manifest, where the capture timed its fetches)."""
    value = manifest.get("unprofiled_loader_wait_ms")
    if isinstance(value, (list, tuple)) and value:
        return np.asarray(value, dtype=np.float64) * 1e6
    return None


def _unprofiled_runs(manifest: Mapping[str, Any]) -> Optional[np.ndarray]:
    """The run of each unprofiled step time of a pooled group (`group` records the counts)."""
    counts = manifest.get("group_unprofiled_counts")
    if not isinstance(counts, (list, tuple)):
        return None
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _peak_memory_per_step(manifest: Mapping[str, Any]) -> Optional[np.ndarray]:
    """Peak device memory of each profiled step, max over ranks (capture manifest, when recorded)."""
    per_rank = []
    for rec in manifest.get("ranks") or []:
        peaks = (rec.get("profiled") or {}).get("peak_memory_bytes") if isinstance(rec, Mapping) else None
        if (
            isinstance(peaks, (list, tuple))
            and peaks
            and all(isinstance(p, (int, float)) and p for p in peaks)
        ):
            per_rank.append(peaks)
    if not per_rank:
        return None
    n = min(len(p) for p in per_rank)
    return np.max(np.asarray([p[:n] for p in per_rank], dtype=np.float64), axis=0)


def _memory_values(report: Report) -> tuple[dict[str, np.ndarray], Optional[np.ndarray]]:
    """The per-step memory figures of a report (the largest over its devices), and each step's run."""
    rows = [s for m in report.memory for s in m.steps]
    if not rows:
        return {}, None
    steps = sorted({s.step for s in rows})
    out = {
        "peak_allocated": _max_by_step([(s.step, s.peak_allocated) for s in rows], steps),
        "peak_reserved": _max_by_step([(s.step, s.peak_reserved) for s in rows], steps),
    }
    for c in CATEGORY_NAMES:
        out[c] = _max_by_step([(s.step, s.by_category.get(c, 0)) for s in rows], steps)
    return out, _run_of(steps)


def step_values(report: Report) -> StepValues:
    """The per-step arrays every figure of the diff is computed from."""
    samples = [s for d in report.devices for s in d.samples]
    host = list(report.host.steps)
    busy: Optional[np.ndarray]
    util: Optional[np.ndarray]
    wait: Optional[np.ndarray]
    if samples:
        steps = tuple(sorted({s.step for s in samples}))
        dur = _max_by_step([(s.step, s.dur_ns) for s in samples], steps)
        busy = _mean_by_step([(s.step, s.busy_ns) for s in samples], steps)
        util = _mean_by_step([(s.step, s.busy_ns / s.dur_ns if s.dur_ns else 0.0) for s in samples], steps)
        idle = {c: _mean_by_step([(s.step, s.idle_ns.get(c, 0)) for s in samples], steps) for c in CAUSES}
        wait = _mean_by_step([(s.step, s.collective_wait_ns) for s in samples], steps)
    elif host:
        steps = tuple(sorted({h.step for h in host}))
        dur = _max_by_step([(h.step, h.step_time_ns) for h in host], steps)
        busy = util = wait = None
        idle = {}
    else:
        raise NotComparableError(
            f"capture {report.capture.get('label') or report.capture.get('workload') or ''} has no steps "
            "(no ProfilerStep spans and no events): nothing to compare; capture more steps"
        )
    if host:
        hsteps = [s for s in steps if any(h.step == s for h in host)]
        host_ns = {
            k: _mean_by_step([(h.step, h.breakdown_ns.get(k, 0)) for h in host], hsteps) for k in HOST_STATES
        }
        gap_ns = _mean_by_step([(h.step, h.dispatch_gap_ns) for h in host], hsteps)
        gaps = _mean_by_step([(h.step, h.dispatch_gaps) for h in host], hsteps)
    else:
        host_ns, gap_ns, gaps = {}, None, None
        hsteps = []

    per_call: dict[str, np.ndarray] = {}
    op_runs: dict[str, np.ndarray] = {}
    per_step: dict[str, float] = {}
    calls_med: dict[str, float] = {}
    for op in report.op_stats:
        rows = [(st, ns, c) for st, ns, c in zip(op.steps, op.ns_per_step, op.calls_per_step) if c > 0]
        if rows:
            per_call[op.name] = np.array([ns / c for _, ns, c in rows], dtype=np.float64)
            op_runs[op.name] = _run_of([st for st, _, _ in rows])
        per_step[op.name] = sum(op.ns_per_step) / max(len(steps), 1)
        calls_med[op.name] = comparable.median_calls(
            list(op.calls_per_step) + [0] * max(0, len(steps) - len(op.calls_per_step))
        )

    spp = next((d.samples_per_step for d in report.devices if d.samples_per_step), None)
    manifest = report.capture or {}
    if spp is None and isinstance(manifest.get("samples_per_step"), (int, float)):
        spp = int(manifest["samples_per_step"])
    peaks = [d.peak_memory_bytes for d in report.devices if d.peak_memory_bytes]
    memory, memory_runs = _memory_values(report)
    return StepValues(
        steps=steps,
        dur_ns=dur,
        busy_ns=busy,
        utilization=util,
        idle_ns=idle,
        collective_wait_ns=wait,
        host_ns=host_ns,
        dispatch_gap_ns=gap_ns,
        dispatch_gaps=gaps,
        samples_per_step=spp,
        peak_memory_bytes=max(peaks) if peaks else None,
        unprofiled_step_ns=_unprofiled_step_ns(manifest),
        peak_memory_per_step=_peak_memory_per_step(manifest),
        ops_per_call_ns=per_call,
        ops_ns_per_step=per_step,
        ops_calls_per_step=calls_med,
        step_runs=_run_of(steps),
        host_runs=_run_of(hsteps) if host else None,
        ops_runs=op_runs,
        unprofiled_runs=_unprofiled_runs(manifest),
        unprofiled_loader_wait_ns=_unprofiled_loader_wait_ns(manifest),
        memory=memory,
        memory_runs=memory_runs,
    )


# -- figures ----------------------------------------------------------------------------------------------


def _median(x: Optional[np.ndarray]) -> Optional[float]:
    return None if x is None or len(x) == 0 else float(np.median(x))


def _ranked(
    key: str,
    label: str,
    unit: str,
    section: str,
    better: Optional[str],
    xa: Optional[np.ndarray],
    xb: Optional[np.ndarray],
    scale: float,
    confidence: float,
    runs: tuple[Optional[np.ndarray], Optional[np.ndarray]] = (None, None),
) -> FigureDiff:
    """A figure compared on per-step values (scaled to the shown unit). When a side pools several runs
    (`runs` gives each value's run), the unit of comparison is the run: each run's median."""
    va = None if xa is None else xa * scale
    vb = None if xb is None else xb * scale
    if va is not None and vb is not None and _pooled(*runs):
        va, vb = _per_run(va, runs[0]), _per_run(vb, runs[1])
        # the columns are the medians of the runs' medians, and the change is theirs
        est = median_shift(va, vb, confidence)
        return FigureDiff(key, label, unit, section, better, _median(va), _median(vb), est)
    est = rank_shift(va, vb, confidence) if va is not None and vb is not None else None
    return FigureDiff(key, label, unit, section, better, _median(va), _median(vb), est)


def _pooled(ra: Optional[np.ndarray], rb: Optional[np.ndarray]) -> bool:
    return any(r is not None and len(r) and len(np.unique(r)) > 1 for r in (ra, rb))


def _per_run(x: np.ndarray, runs: Optional[np.ndarray]) -> np.ndarray:
    """The median of each run's values (in run order); one run when `runs` is None."""
    if runs is None or len(runs) != len(x):
        return np.array([np.median(x)]) if len(x) else x
    return np.array([np.median(x[runs == r]) for r in np.unique(runs)])


def _sum_ratio(columns: np.ndarray) -> np.ndarray:
    """Σ column 0 / Σ column 1 over steps, for stacks of resamples of shape (..., steps, 2)."""
    num = columns[..., 0].sum(axis=-1)
    den = columns[..., 1].sum(axis=-1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _sum(columns: np.ndarray) -> np.ndarray:
    return columns.sum(axis=-1)


def _sum_per_run(x: np.ndarray, runs: np.ndarray) -> np.ndarray:
    return np.array([x[runs == r].sum() for r in np.unique(runs)]) if len(runs) == len(x) else x


MS, S = 1e-6, 1e-9


def _figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """Every figure of one pair, section by section (the order of the report's tables)."""
    out: list[FigureDiff] = []
    for section in (_time_figures, _device_figures, _memory_figures, _idle_figures, _host_figures):
        out += section(a, b, confidence)
    return out


def _time_figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """Step time, total time, throughput, step time without the profiler."""
    runs = (a.step_runs, b.step_runs)
    out = [
        _ranked(
            "step_time", "step time", "ms", SECTION_TIME, "lower", a.dur_ns, b.dur_ns, MS, confidence, runs
        )
    ]
    total = _total_time(a, b, confidence)
    if total is not None:
        out.append(total)
    if a.samples_per_step and b.samples_per_step:
        ta, tb = a.samples_per_step / (a.dur_ns * S), b.samples_per_step / (b.dur_ns * S)
        out.append(
            _ranked(
                "throughput", "throughput", "samples/s", SECTION_TIME, "higher", ta, tb, 1.0, confidence, runs
            )
        )
    if a.unprofiled_step_ns is not None or b.unprofiled_step_ns is not None:
        xa, xb = a.unprofiled_step_ns, b.unprofiled_step_ns
        label, uruns = "step time without profiler", (a.unprofiled_runs, b.unprofiled_runs)
        out.append(
            _ranked("unprofiled_step_time", label, "ms", SECTION_TIME, "lower", xa, xb, MS, confidence, uruns)
        )
    if a.unprofiled_loader_wait_ns is not None or b.unprofiled_loader_wait_ns is not None:
        xa, xb = a.unprofiled_loader_wait_ns, b.unprofiled_loader_wait_ns
        label, uruns = "loader wait per step without profiler", (a.unprofiled_runs, b.unprofiled_runs)
        out.append(
            _ranked(
                "unprofiled_loader_wait", label, "ms", SECTION_TIME, "lower", xa, xb, MS, confidence, uruns
            )
        )
    return out


def _total_time(a: StepValues, b: StepValues, confidence: float) -> Optional[FigureDiff]:
    """Total time of the profiled steps: one total per run when a side pools runs (runs of one
    configuration have equal step counts); nothing when the two sides have different step counts."""
    total_a, total_b = a.dur_ns * S, b.dur_ns * S
    label = "total time, profiled steps"
    if _pooled(a.step_runs, b.step_runs):
        xa, xb = _sum_per_run(total_a, a.step_runs), _sum_per_run(total_b, b.step_runs)
        est = median_shift(xa, xb, confidence)
        return FigureDiff("total_time", label, "s", SECTION_TIME, "lower", _median(xa), _median(xb), est)
    if len(total_a) != len(total_b):  # totals over different numbers of steps say nothing
        return None
    est = bootstrap_shift(total_a, total_b, _sum, confidence)
    return FigureDiff(
        "total_time", label, "s", SECTION_TIME, "lower", float(total_a.sum()), float(total_b.sum()), est
    )


def _device_figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """GPU utilisation (mean and peak step), peak device memory, collective wait."""
    out = []
    if a.busy_ns is not None or b.busy_ns is not None:
        out += _utilization(a, b, confidence)
    out += _peak_memory(a, b, confidence)
    waits = [v.collective_wait_ns for v in (a, b) if v.collective_wait_ns is not None]
    if any(w.any() for w in waits):
        xa, xb, runs = a.collective_wait_ns, b.collective_wait_ns, (a.step_runs, b.step_runs)
        out.append(
            _ranked(
                "collective_wait",
                "collective wait",
                "ms",
                SECTION_DEVICE,
                "lower",
                xa,
                xb,
                MS,
                confidence,
                runs,
            )
        )
    return out


def _utilization(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """Mean utilisation as Σ busy / Σ step time (run against run when pooled), and the peak step."""

    def util_cols(v: StepValues) -> Optional[np.ndarray]:
        return None if v.busy_ns is None else np.stack([v.busy_ns, v.dur_ns], axis=1)

    def per_run(cols: np.ndarray, runs: np.ndarray) -> np.ndarray:
        return np.array([_sum_ratio(cols[runs == r][None])[0] * 100 for r in np.unique(runs)])

    ca, cb = util_cols(a), util_cols(b)
    ua = None if ca is None else float(_sum_ratio(ca[None])[0]) * 100
    ub = None if cb is None else float(_sum_ratio(cb[None])[0]) * 100
    est = None
    if ca is not None and cb is not None and _pooled(a.step_runs, b.step_runs):
        # run against run: the columns are the median of the runs' utilisations, the change theirs
        ra, rb = per_run(ca, a.step_runs), per_run(cb, b.step_runs)
        ua, ub = float(np.median(ra)), float(np.median(rb))
        est = median_shift(ra, rb, confidence)
    elif ca is not None and cb is not None:
        est = bootstrap_shift(ca, cb, lambda x: _sum_ratio(x) * 100, confidence)
    mean = FigureDiff("gpu_util_mean", "GPU utilisation, mean", "%", SECTION_DEVICE, "higher", ua, ub, est)
    pa = None if a.utilization is None else float(a.utilization.max()) * 100
    pb = None if b.utilization is None else float(b.utilization.max()) * 100
    est = single_values(pa, pb) if pa is not None and pb is not None else None
    peak = FigureDiff(
        "gpu_util_peak", "GPU utilisation, peak step", "%", SECTION_DEVICE, "higher", pa, pb, est
    )
    return [mean, peak]


def _peak_memory(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """Per-step peaks when both sides have them (one run each), else the capture-wide peak."""
    pooled = _pooled(a.step_runs, b.step_runs)
    if a.peak_memory_per_step is not None and b.peak_memory_per_step is not None and not pooled:
        xa, xb = a.peak_memory_per_step, b.peak_memory_per_step
        return [
            _ranked(
                "peak_memory",
                "peak device memory",
                "MiB",
                SECTION_DEVICE,
                "lower",
                xa,
                xb,
                1 / 2**20,
                confidence,
            )
        ]
    if a.peak_memory_bytes or b.peak_memory_bytes:
        ma = a.peak_memory_bytes / 2**20 if a.peak_memory_bytes else None
        mb = b.peak_memory_bytes / 2**20 if b.peak_memory_bytes else None
        est = single_values(ma, mb) if ma is not None and mb is not None else None
        return [FigureDiff("peak_memory", "peak device memory", "MiB", SECTION_DEVICE, "lower", ma, mb, est)]
    return []


def _memory_figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """The trace's memory per step (tracekit.analysis.memory): the peak allocated and reserved, and each
    category at the peak, where both sides have memory events (run against run when pooled)."""
    if not (a.memory and b.memory):
        return []
    runs = (a.memory_runs, b.memory_runs)
    figures = [("peak_allocated", "allocated at the peak"), ("peak_reserved", "reserved, the step's peak")]
    figures += [(c.name, f"at the peak: {c.title}") for c in CATEGORIES]
    out = []
    for key, label in figures:
        xa, xb = a.memory.get(key), b.memory.get(key)
        if xa is None or xb is None or not (xa.any() or xb.any()):
            continue
        out.append(
            _ranked(
                f"memory.{key}", label, "MiB", SECTION_MEMORY, "lower", xa, xb, 1 / 2**20, confidence, runs
            )
        )
    return out


def _idle_figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """Idle time in all and per cause."""
    if not (a.idle_ns or b.idle_ns):
        return []

    def idle_total(v: StepValues) -> Optional[np.ndarray]:
        return sum(v.idle_ns.values()) if v.idle_ns else None  # type: ignore[return-value]

    runs = (a.step_runs, b.step_runs)
    xa, xb = idle_total(a), idle_total(b)
    out = [_ranked("idle", "idle (all causes)", "ms", SECTION_IDLE, "lower", xa, xb, MS, confidence, runs)]
    for cause in CAUSES:
        xa = a.idle_ns.get(cause) if a.idle_ns else None
        xb = b.idle_ns.get(cause) if b.idle_ns else None
        out.append(
            _ranked(
                f"idle.{cause}", f"idle: {cause}", "ms", SECTION_IDLE, "lower", xa, xb, MS, confidence, runs
            )
        )
    return out


def _host_figures(a: StepValues, b: StepValues, confidence: float) -> list[FigureDiff]:
    """The host breakdown per state and the host dispatch gaps (time and count)."""
    if not (a.host_ns or b.host_ns):
        return []
    runs = (a.host_runs, b.host_runs)
    out = []
    for state in HOST_STATES:
        xa = a.host_ns.get(state) if a.host_ns else None
        xb = b.host_ns.get(state) if b.host_ns else None
        out.append(
            _ranked(f"host.{state}", f"host: {state}", "ms", SECTION_HOST, None, xa, xb, MS, confidence, runs)
        )
    xa, xb = a.dispatch_gap_ns, b.dispatch_gap_ns
    label = "host dispatch gaps, time"
    out.append(_ranked("dispatch_gap", label, "ms", SECTION_HOST, "lower", xa, xb, MS, confidence, runs))
    xa, xb = a.dispatch_gaps, b.dispatch_gaps
    label = "host dispatch gaps, count"
    out.append(_ranked("dispatch_gaps", label, "", SECTION_HOST, None, xa, xb, 1.0, confidence, runs))
    return out


def op_candidates(a: StepValues, b: StepValues) -> list[str]:
    """Ops in both captures, called in at least OP_MIN_STEPS steps of each, and taking at least
    OP_MIN_SHARE of the step in one of them."""
    step_a = float(np.mean(a.dur_ns)) if len(a.dur_ns) else 0.0
    step_b = float(np.mean(b.dur_ns)) if len(b.dur_ns) else 0.0
    names = []
    for name in sorted(set(a.ops_per_call_ns) & set(b.ops_per_call_ns)):
        if len(a.ops_per_call_ns[name]) < OP_MIN_STEPS or len(b.ops_per_call_ns[name]) < OP_MIN_STEPS:
            continue
        share_a = a.ops_ns_per_step.get(name, 0.0) / step_a if step_a else 0.0
        share_b = b.ops_ns_per_step.get(name, 0.0) / step_b if step_b else 0.0
        if max(share_a, share_b) >= OP_MIN_SHARE:
            names.append(name)
    return names


def ops_confidence(confidence: float, candidates: int) -> float:
    """The per-op confidence that keeps the whole op listing at `confidence` (Bonferroni): screening
    dozens of ops at 95 % each would call some of them changed by chance alone."""
    return 1.0 - (1.0 - confidence) / max(candidates, 1)


def _op_figures(a: StepValues, b: StepValues, confidence: float, top: int) -> list[FigureDiff]:
    names = op_candidates(a, b)
    conf = ops_confidence(confidence, len(names))
    candidates = [
        _ranked(
            f"op:{n}",
            n,
            "µs/call",
            SECTION_OPS,
            "lower",
            a.ops_per_call_ns[n],
            b.ops_per_call_ns[n],
            1e-3,
            conf,
            runs=(a.ops_runs.get(n), b.ops_runs.get(n)),
        )
        for n in names
    ]

    def order(f: FigureDiff) -> tuple[int, float, str]:
        lr = f.estimate.log_ratio if f.estimate and f.estimate.log_ratio is not None else 0.0
        # Significant changes first, then the largest |log ratio|; the name breaks ties so that the
        # order (and therefore diff(A, B) vs diff(B, A)) never depends on anything else.
        return (0 if f.significant else 1, -abs(lr), f.label)

    return sorted(candidates, key=order)[:top]


# -- the diff ---------------------------------------------------------------------------------------------


def facts(report: Report, values: StepValues) -> Facts:
    """What the traces tell about a capture, for the comparability check."""
    names = tuple(sorted({d.name for d in report.devices if d.name}))
    ranks = len({d.rank for d in report.devices} | {h.rank for h in report.host.steps}) or 1
    return Facts(report.cpu_only, names, ranks, values.ops_calls_per_step)


def _get(doc: Mapping[str, Any], *path: str) -> Any:
    cur: Any = doc
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def capture_info(report: Report, label: str, values: StepValues) -> CaptureInfo:
    m = report.capture or {}
    python = _get(m, "python", "version") if isinstance(m.get("python"), Mapping) else m.get("python")
    torch = _get(m, "torch", "version") if isinstance(m.get("torch"), Mapping) else m.get("torch")
    device = _get(m, "device", "name") if isinstance(m.get("device"), Mapping) else m.get("device")
    if device is None:
        names = sorted({d.name for d in report.devices if d.name})
        device = ", ".join(names) if names else ("CPU" if report.cpu_only else None)
    path = m.get("path") or m.get("source")
    return CaptureInfo(
        label=label,
        path=str(path) if path else None,
        workload=m.get("workload"),
        python=str(python) if python is not None else None,
        torch=str(torch) if torch is not None else None,
        device=str(device) if device is not None else None,
        steps=len(values.steps),
        cpu_only=report.cpu_only,
        runs=values.runs,
    )


def composition(report: Report, label: str) -> Composition:
    """Mean time per step split into busy + idle causes (devices), or host states (CPU-only)."""
    samples = [s for d in report.devices for s in d.samples]
    if samples:
        n = len(samples)
        parts = [("busy", sum(s.busy_ns for s in samples) / n / 1e6)]
        parts += [(c, sum(s.idle_ns.get(c, 0) for s in samples) / n / 1e6) for c in CAUSES]
        return Composition(label, "device", tuple(parts))
    host = report.host.steps
    n = max(len(host), 1)
    return Composition(
        label, "host", tuple((k, sum(h.breakdown_ns.get(k, 0) for h in host) / n / 1e6) for k in HOST_STATES)
    )


def default_labels(reports: Sequence[Report], fallbacks: Optional[Sequence[str]] = None) -> list[str]:
    """A label per capture: its run name, else its Python version, else the fallback (say, the file
    name); made unique by appending #1, #2."""
    raw = []
    for i, r in enumerate(reports):
        m = r.capture or {}
        py = m.get("python")
        py = py.get("version") if isinstance(py, Mapping) else py
        fallback = fallbacks[i] if fallbacks else f"capture {i + 1}"
        raw.append(str(m.get("run") or (f"py{py}" if py else None) or fallback))
    out = []
    for i, label in enumerate(raw):
        out.append(label if raw.count(label) == 1 else f"{label} #{raw[: i + 1].count(label)}")
    return out


def diff_pair(
    a: Report,
    b: Report,
    labels: tuple[str, str] = ("A", "B"),
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    top_ops: int = TOP_OPS,
    compared: Sequence[str] = (),
) -> PairDiff:
    """B against A. `compared`: manifest fields (or knob names) the comparison means to vary."""
    va, vb = step_values(a), step_values(b)
    comp = comparable.check(a.capture, b.capture, facts(a, va), facts(b, vb), compared)
    controls, notes = control.control_figures(a, b, confidence)
    shown = [
        FigureDiff(c.key, c.label, c.unit, control.SECTION_CONTROL, None, c.a, c.b, c.estimate)
        for c in controls
    ]
    return PairDiff(
        a=capture_info(a, labels[0], va),
        b=capture_info(b, labels[1], vb),
        comparability=comp,
        figures=tuple(_figures(va, vb, confidence)) + tuple(shown),
        ops=tuple(_op_figures(va, vb, confidence, top_ops)),
        ops_compared=len(op_candidates(va, vb)),
        control_notes=tuple(notes),
    )


def check_arguments(captures: int, labels: Optional[Sequence[str]], confidence: float) -> None:
    """What a diff refuses, before any capture is read (tracekit.api.diff calls it first): fewer than
    two captures, a number of labels other than one per capture, a confidence outside [0.5, 1)."""
    if captures < 2:
        raise NotComparableError(f"diff needs at least two captures, got {captures}: `tracekit diff A B`")
    if labels is not None and len(labels) != captures:
        raise NotComparableError(
            f"{len(labels)} labels for {captures} captures; give one per capture, in order"
        )
    if not 0.5 <= confidence < 1.0:
        raise NotComparableError(f"confidence {confidence} is not in [0.5, 1); e.g. 0.95")


def diff(
    reports: Sequence[Report],
    labels: Optional[Sequence[str]] = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    top_ops: int = TOP_OPS,
    compared: Sequence[str] = (),
) -> DiffResult:
    """Each later report against the first (the arguments as `check_arguments` accepts them)."""
    check_arguments(len(reports), labels, confidence)
    names = list(labels) if labels is not None else default_labels(reports)
    pairs = tuple(
        diff_pair(
            reports[0], r, (names[0], names[i]), confidence=confidence, top_ops=top_ops, compared=compared
        )
        for i, r in enumerate(reports[1:], start=1)
    )
    infos = (pairs[0].a,) + tuple(p.b for p in pairs)
    return DiffResult(
        captures=infos,
        compositions=tuple(composition(r, n) for r, n in zip(reports, names)),
        pairs=pairs,
        confidence=confidence,
        parameters={
            "confidence": confidence,
            "top_ops": top_ops,
            "compared": list(compared),
            "op_min_share": OP_MIN_SHARE,
            "op_min_steps": OP_MIN_STEPS,
            "min_op_call_overlap": comparable.MIN_OP_CALL_OVERLAP,
        },
    )
