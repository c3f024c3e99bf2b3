"""The profiler's own cost, estimated from a capture and its unprofiled step time.

The profiler adds host time to every event it records (a cpu_op's enter and exit callbacks, CUPTI's
runtime-API callbacks, the Python tracer's frames). Model: one cost c per recorded host event, half
after its start and half after its end, taken off the host segment there (never below zero). The
replayed step time is then a non-increasing function of c, and c is found by bisection so that the
replay matches the step time measured without the profiler.

Where the step does not depend on c (a device-bound capture: any c in a range gives the same step, or
no c reaches the unprofiled step because the device alone takes longer), the unprofiled step says
nothing about c: the measured default is kept and the result says so (fitting c to the host's own
unprofiled time instead gave 31 µs/event on a TF32 pair, 5× the default, and a prediction for the other
capture of 0.28 of A's step where 0.46 was measured). A fitted c above the range fitted on real captures
(MEASURED_RANGE_US) is clipped to it and said (the replay lacks a dependency, or the profiler slows more
than its recorded events). One below it is kept, and said: the profiled steps were hardly slower than the
unprofiled ones (the host ran faster while profiled), and only that cost replays the capture at its
unprofiled step; clipping it up made the replay of A faster than A measured, and every saving a
difference from the wrong step (an H100 MLP's CUDA graph: 4.2 ms predicted at the clipped 1.5 µs/event,
6.1 at its fitted 0.22 and 6.1 measured; docs/results/advice.md). Where no unprofiled step fixes c, each
prediction without the profiler is also replayed at both ends of that range (its sensitivity to c).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

# Per-event cost (µs): the median of the costs identified on the H200 captures of fixtures/h200 and
# fixtures/h200_default (14 of 21; one cost per event is a coarse model), and their least and largest,
# printed by `.venv/bin/python benchmarks/profiler_cost.py`.
DEFAULT_COST_US = 5.3
MEASURED_RANGE_US = (1.5, 12.5)
MAX_COST_US = 50.0
# The precision of a fitted cost (µs/event): reports give it to 0.01.
XTOL_US = 0.002
# A cost is identified when the costs that match the unprofiled step lie within this factor of each other.
IDENTIFIED_RATIO = 2.0
# How close (relative) the replayed step must come to the unprofiled one: the unprofiled step times of
# the H200 captures vary by ~0.5 % from step to step.
TOLERANCE = 0.005
# A replay whose device alone (every recorded event's cost removed) comes within this much below the
# unprofiled step says that step is the device's: the cost then has only a lower bound (the device-bound
# H100 captures of docs/results/advice.md replay their device 0.6-1.2 % off the measured step, and a
# DenseNet-121 capture 0.7 % under it fitted 3.4 µs/event at the knee, where its channels_last pair
# showed the host far faster).
FLOOR_MARGIN = 0.02


def default_note(default_us: float = DEFAULT_COST_US) -> str:
    """Why and which default cost is assumed, with the range of the costs fitted on real captures."""
    lo, hi = MEASURED_RANGE_US
    return (
        f"no unprofiled step time (manifest or --unprofiled-step-ms): the default profiler cost "
        f"{default_us:g} µs/event is assumed (the median of the costs fitted on H200 captures, which ranged "
        f"{lo:g}-{hi:g} µs/event: predictions at both ends are shown)"
    )


def untrusted_default(loader_iterator: Optional[str]) -> Optional[str]:
    """Where a default cost cannot give the step without the profiler: a multi-worker DataLoader, whose
    stall the profiler's pauses can hide from the trace (its workers queue batches meanwhile), so the
    unprofiled step may be longer than any profiler cost removed from the trace says (None otherwise)."""
    if not loader_iterator or "MultiProcess" not in loader_iterator:
        return None
    return (
        f"the step without the profiler cannot be trusted from this trace alone: its DataLoader is "
        f"multi-worker ({loader_iterator}), the profiler's pauses let its workers queue batches, and a "
        "loader stall the window hid makes the unprofiled step longer than any profiler cost removed from "
        "the trace predicts; `tracekit capture --script` measures it (the workers' batches and every fetch "
        "without the profiler)"
    )


@dataclass(frozen=True)
class CostEstimate:
    cost_us: float  # the cost used
    low_us: Optional[float]  # the costs that match the unprofiled step (None: none does)
    high_us: Optional[float]
    note: str
    fitted: bool = False  # the target fixes the cost (the step depends on it), else default or clipped


def estimate_cost(
    step_ms: Callable[[float], float],
    target_ms: float,
    default_us: float = DEFAULT_COST_US,
    max_us: float = MAX_COST_US,
    tolerance: float = TOLERANCE,
    iterations: int = 24,
) -> CostEstimate:
    """`step_ms(c_us)`: the replayed step time with c µs removed per event (non-increasing in c).
    Returns the cost whose replay matches `target_ms` (within `tolerance`), see the module docstring."""
    s0 = step_ms(0.0)
    s_max = step_ms(max_us)
    hi_target = target_ms * (1 + tolerance)
    lo_target = target_ms * (1 - tolerance)
    if s_max > hi_target:
        return CostEstimate(
            default_us,
            None,
            None,
            f"the unprofiled step does not identify the profiler's cost: even without the host's recorded "
            f"events the replay takes {s_max:.3f} ms > {target_ms:.3f} ms (the device, or work the profiler "
            f"slows that is not a recorded event, sets the step); the measured default {default_us:g} "
            "µs/event is kept",
        )
    if s0 < lo_target:
        return CostEstimate(
            0.0,
            None,
            None,
            f"the profiled replay ({s0:.3f} ms) is already faster than the unprofiled step "
            f"({target_ms:.3f} ms); no profiler cost removed",
        )
    # the costs whose replay lies within the tolerance of the target: [low, high]; every replay is kept,
    # and each search starts from the tightest bracket the replays so far give
    seen = {0.0: s0, max_us: s_max}

    def f(c: float) -> float:
        if c not in seen:
            seen[c] = step_ms(c)
        return seen[c]

    low = 0.0 if s0 <= hi_target else _bisect(f, hi_target, iterations, True, seen)
    high = max_us if s_max >= lo_target else _bisect(f, lo_target, iterations, False, seen)
    high = max(high, low)
    at_floor = s_max >= target_ms * (1 - FLOOR_MARGIN)
    if s0 > hi_target and at_floor:
        high = max_us  # the device's pace, within what the replay's device can tell: a lower bound only
    if s0 > hi_target and high > IDENTIFIED_RATIO * max(low, 1e-3):
        # only a lower bound is identified (the step stops depending on c above `low`)
        c = min(max(default_us, low), high)
        why = (
            f"the replay's device alone takes {s_max:.3f} ms, within {FLOOR_MARGIN:.0%} of it: any cost from "
            f"{low:.2f} µs/event matches it"
            if at_floor
            else f"{low:.2f} to {high:.2f} µs/event match it"
        )
        return CostEstimate(
            c,
            low,
            high,
            f"the unprofiled step identifies the profiler's cost only loosely ({why}): the measured default "
            f"{default_us:g} µs/event" + (" is kept" if c == default_us else f", raised to {c:.2f}, is used"),
        )
    if s0 > hi_target:
        return _fitted(low, high)
    c = min(default_us, high)
    return CostEstimate(
        c,
        low,
        high,
        f"the unprofiled step does not identify the profiler's cost: the profiled replay already matches "
        f"it, and any cost up to {high:.2f} µs/event does (device-bound: the step hardly depends on the "
        f"host); the measured default {default_us:g} µs/event is kept"
        + (f", at most {high:.2f}" if high < default_us else ""),
    )


def _fitted(low: float, high: float) -> CostEstimate:
    """The cost the unprofiled step identifies (the middle of the costs that match it): clipped above
    MEASURED_RANGE_US, kept below it (module docstring)."""
    c = (low + high) / 2
    lo_m, hi_m = MEASURED_RANGE_US
    if c > hi_m:
        return _clipped(c, low, high)
    if c < lo_m:
        return CostEstimate(
            c,
            low,
            high,
            f"estimated from the unprofiled step time: {c:.2f} µs/event, below the {lo_m:g}-{hi_m:g} "
            "µs/event fitted on real captures (the profiled steps are hardly slower than the unprofiled "
            "ones: the host ran faster while profiled)",
            True,
        )
    return CostEstimate(c, low, high, "estimated from the unprofiled step time", True)


def _clipped(c: float, low: float, high: float) -> CostEstimate:
    """A fitted cost above MEASURED_RANGE_US, clipped to it, with why."""
    lo_m, hi_m = MEASURED_RANGE_US
    clipped = hi_m
    why = "the replay lacks a dependency, or the profiler slows more than its recorded events"
    return CostEstimate(
        clipped,
        low,
        high,
        f"the unprofiled step asks for {c:.2f} µs/event, outside the {lo_m:g}-{hi_m:g} µs/event fitted on "
        f"real captures: clipped to {clipped:g} ({why})",
    )


def _bisect(
    f: Callable[[float], float], target: float, iterations: int, first_below: bool, seen: dict
) -> float:
    """first_below: the smallest c with f(c) <= target; else the largest c with f(c) >= target (f
    non-increasing), to within XTOL_US, from the tightest bracket of the replays in `seen` (c -> f(c),
    holding 0 above and the largest cost below the target). Regula falsi (Illinois), halving where the
    bracket shrinks slowly: each f is a whole replay."""
    below = (lambda v: v <= target) if first_below else (lambda v: v < target)
    lo = max(c for c, v in seen.items() if not below(v))
    hi = min(c for c, v in seen.items() if below(v) and c > lo)
    flo, fhi = seen[lo], seen[hi]
    side, slow = 0, 0
    for _ in range(iterations):
        width = hi - lo
        if width <= XTOL_US:
            break
        if slow >= 2 or flo == fhi:
            c, slow = (lo + hi) / 2, 0
        else:
            c = lo + (flo - target) * width / (flo - fhi)
            c = min(max(c, lo + 0.05 * width), hi - 0.05 * width)
        fc = f(c)
        if below(fc):
            hi, fhi = c, fc
            flo = target + (flo - target) / 2 if side == 1 else flo  # Illinois: the stale end halves
            side = 1
        else:
            lo, flo = c, fc
            fhi = target + (fhi - target) / 2 if side == -1 else fhi
            side = -1
        slow = slow + 1 if hi - lo > 0.5 * width else 0
    return hi if first_below else lo


__all__ = [
    "estimate_cost",
    "default_note",
    "untrusted_default",
    "CostEstimate",
    "DEFAULT_COST_US",
    "MAX_COST_US",
    "MEASURED_RANGE_US",
]
