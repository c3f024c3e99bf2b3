"""The result of `tracekit whatif`: frozen dataclasses, per-step samples inside, `to_json()` = the
contract of docs/DESIGN.md ("What if: the JSON contract"). Field names are stable: add, never rename."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from tracekit.analysis.model import CAUSES
from tracekit.analysis.steps import median_ns, outliers, spread_ns

WHATIF_VERSION = 1


def _median_ms(ns: tuple[int, ...]) -> float:
    """The step of a sequence of steps: their median (tracekit.analysis.steps.median_ns), ms."""
    return median_ns(ns) / 1e6


def _spread_ms(ns: tuple[int, ...]) -> float:
    return spread_ns(ns) / 1e6


@dataclass(frozen=True)
class DevicePrediction:
    """One device of one rank: step times per step (ns) observed, replayed unchanged, and predicted.

    A step ends when its host window has ended and the device work launched in it is done
    (tracekit.analysis.steps); `observed_host_window_ns` are the ProfilerStep windows alone. The
    `*_step_ms` figures are medians over steps (a slow step is named in `outlier_steps`, not averaged in)."""

    rank: int
    device: int  # -1: a rank without device activity (the host windows alone)
    steps: tuple[int, ...]
    observed_step_ns: tuple[int, ...]
    replayed_step_ns: tuple[int, ...]
    predicted_step_ns: tuple[int, ...]
    observed_host_window_ns: tuple[int, ...] = ()
    predicted_busy_ns: int = 0  # device busy time over the predicted steps
    predicted_idle_ns_per_step: Mapping[str, float] = field(default_factory=dict)
    unprofiled_predicted_step_ns: Optional[tuple[int, ...]] = None

    @property
    def observed_step_ms(self) -> float:
        return _median_ms(self.observed_step_ns)

    @property
    def replayed_step_ms(self) -> float:
        return _median_ms(self.replayed_step_ns)

    @property
    def predicted_step_ms(self) -> float:
        return _median_ms(self.predicted_step_ns)

    @property
    def outlier_steps(self) -> list[tuple[int, int]]:
        """(step, observed ns) of the observed steps far from the median (analysis.steps.outliers)."""
        return outliers(self.steps, self.observed_step_ns)

    @property
    def change(self) -> float:
        r = self.replayed_step_ms
        return self.predicted_step_ms / r - 1 if r else 0.0

    @property
    def replay_error(self) -> float:
        o = self.observed_step_ms
        return self.replayed_step_ms / o - 1 if o else 0.0

    @property
    def predicted_gpu_utilization(self) -> float:
        total = sum(self.predicted_step_ns)
        return min(self.predicted_busy_ns / total, 1.0) if total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "device": self.device,
            "steps": len(self.steps),
            "observed_step_ms": self.observed_step_ms,
            "replayed_step_ms": self.replayed_step_ms,
            "predicted_step_ms": self.predicted_step_ms,
            "change": self.change,
            "predicted_gpu_utilization": self.predicted_gpu_utilization,
            "predicted_idle_ms_per_step": {
                c: self.predicted_idle_ns_per_step.get(c, 0.0) / 1e6 for c in CAUSES
            },
            "step_ms_spread": {
                "observed": _spread_ms(self.observed_step_ns),
                "replayed": _spread_ms(self.replayed_step_ns),
                "predicted": _spread_ms(self.predicted_step_ns),
            },
            "replay_error": self.replay_error,
            "observed_host_window_ms": _median_ms(self.observed_host_window_ns),
            "unprofiled_predicted_step_ms": None
            if self.unprofiled_predicted_step_ns is None
            else _median_ms(self.unprofiled_predicted_step_ns),
            "outlier_steps": [{"step": s, "observed_ms": v / 1e6} for s, v in self.outlier_steps],
            "samples": {
                "step": list(self.steps),
                "observed_ns": list(self.observed_step_ns),
                "replayed_ns": list(self.replayed_step_ns),
                "predicted_ns": list(self.predicted_step_ns),
            },
        }


@dataclass(frozen=True)
class Unprofiled:
    """The prediction without the profiler. `source`: where the unprofiled step time came from
    (manifest, flag) or `default` (none: the default cost is used and nothing is compared)."""

    source: str
    observed_step_ms: Optional[float]
    replayed_step_ms: float  # the unchanged capture, with the profiler cost removed
    predicted_step_ms: float
    profiler_cost_us_per_event: float
    cost_range_us: Optional[tuple[float, float]] = None
    note: str = ""
    # per rank with a producer (tracekit.whatif.loader): its period observed and predicted, and more
    loader: tuple = ()
    # ((cost µs/event, predicted step ms), ...) at the ends of the range of costs fitted on real captures
    predicted_step_ms_by_cost: tuple = ()

    @property
    def change(self) -> float:
        return self.predicted_step_ms / self.replayed_step_ms - 1 if self.replayed_step_ms else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "observed_step_ms": self.observed_step_ms,
            "replayed_step_ms": self.replayed_step_ms,
            "predicted_step_ms": self.predicted_step_ms,
            "change": self.change,
            "profiler_cost_us_per_event": self.profiler_cost_us_per_event,
            "cost_range_us": list(self.cost_range_us) if self.cost_range_us else None,
            "note": self.note,
            "loader": [dict(x) for x in self.loader],
            "predicted_step_ms_by_cost": [
                {"profiler_cost_us_per_event": c, "predicted_step_ms": v}
                for c, v in self.predicted_step_ms_by_cost
            ],
        }


@dataclass(frozen=True)
class WhatIfResult:
    capture: Mapping[str, Any]
    scenario: Mapping[str, Any]  # WhatIfOptions.to_json()
    scenario_text: str
    devices: tuple[DevicePrediction, ...]
    unprofiled: Optional[Unprofiled]
    graph: Mapping[str, Any] = field(default_factory=dict)  # what the replay found: diagnostics
    notes: tuple[str, ...] = ()

    @property
    def replay_error(self) -> float:
        """The largest |replayed / observed - 1| over devices."""
        return max((abs(d.replay_error) for d in self.devices), default=0.0)

    def slowest(self, attr: str = "predicted_step_ms") -> float:
        return max((getattr(d, attr) for d in self.devices), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "tracekit_whatif": WHATIF_VERSION,
            "scenario": dict(self.scenario),
            "devices": [d.to_json() for d in self.devices],
            "unprofiled": None if self.unprofiled is None else self.unprofiled.to_json(),
            "replay_error": self.replay_error,
            "graph": dict(self.graph),
            "notes": list(self.notes),
            "capture": dict(self.capture),
        }


__all__ = ["WhatIfResult", "DevicePrediction", "Unprofiled", "WHATIF_VERSION"]
