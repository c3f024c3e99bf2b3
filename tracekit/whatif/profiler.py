"""The profiler's own cost, estimated from a capture and its unprofiled step time.

The profiler adds host time to every event it records (a cpu_op's enter and exit callbacks, CUPTI's
runtime-API callbacks, the Python tracer's frames). Model: one cost c per recorded host event, half
after its start and half after its end, taken off the host segment there (never below zero). The
replayed step time is then a non-increasing function of c, and c is found by bisection so that the
replay matches the step time measured without the profiler.

Where the step does not depend on c (a device-bound capture: any c in a range gives the same step),
c is not identifiable from the step; `tracekit capture` also records the host's own step time without
the profiler (the loop's wall time per step, which on a device-bound run is the host's work alone), and
c is then fitted to that instead. Without either, the default cost is taken (clipped to the range of
costs that match, where there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

# Per-event cost (µs): the median of the costs fitted on the H200 captures of fixtures/h200 (10 of 12
# identifiable; they range from 0.4 to 46 µs/event: one cost per event is a coarse model), printed by
# `.venv/bin/python benchmarks/profiler_cost.py`.
DEFAULT_COST_US = 6.2
MAX_COST_US = 50.0
# How close (relative) the replayed step must come to the unprofiled one: the unprofiled step times of
# the H200 captures vary by ~0.5 % from step to step.
TOLERANCE = 0.005


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
            f"no profiler cost explains the unprofiled step: even without the host's recorded events the "
            f"replay takes {s_max:.3f} ms > {target_ms:.3f} ms (device-bound); default cost used",
        )
    if s0 < lo_target:
        return CostEstimate(
            0.0,
            None,
            None,
            f"the profiled replay ({s0:.3f} ms) is already faster than the unprofiled step "
            f"({target_ms:.3f} ms); no profiler cost removed",
        )
    # the costs whose replay lies within the tolerance of the target: [low, high]
    low = 0.0 if s0 <= hi_target else _bisect(step_ms, hi_target, max_us, iterations, first_below=True)
    high = (
        max_us if s_max >= lo_target else _bisect(step_ms, lo_target, max_us, iterations, first_below=False)
    )
    high = max(high, low)
    if s0 > hi_target:
        return CostEstimate((low + high) / 2, low, high, "estimated from the unprofiled step time", True)
    c = min(default_us, high)
    return CostEstimate(
        c,
        low,
        high,
        f"the profiled replay already matches the unprofiled step: any cost up to {high:.2f} µs/event "
        "does (the step hardly depends on the host); default cost, at most that",
    )


def _bisect(
    f: Callable[[float], float], target: float, hi: float, iterations: int, first_below: bool
) -> float:
    """first_below: the smallest c with f(c) <= target; else the largest c with f(c) >= target."""
    lo = 0.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        below = f(mid) <= target if first_below else f(mid) < target
        if below:
            hi = mid
        else:
            lo = mid
    return hi if first_below else lo


__all__ = ["estimate_cost", "CostEstimate", "DEFAULT_COST_US", "MAX_COST_US"]
