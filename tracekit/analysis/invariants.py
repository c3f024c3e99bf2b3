"""Invariants as code (docs/STYLE.md 5). `check_invariants(report)` raises InvariantError naming the first
broken rule; tests call it after every analysis, and `tracekit analyze --check` runs it."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from tracekit.analysis.events import load_frames
from tracekit.analysis.model import CAUSES, HOST_STATES, Report
from tracekit.errors import TracekitError


class InvariantError(TracekitError):
    """An analysis result broke one of its invariants (a bug in tracekit: please report it)."""

    exit_code = 3


def check_invariants(report: Report, capture: Any = None) -> list[str]:
    """Check every invariant; returns the names of those checked, raises InvariantError on the first
    broken one.

    1. per step and device: busy + Σ causes == step duration, the causes are exactly CAUSES, none < 0;
    2. per host step: Σ host states == step duration;
    3. idle pieces (when present): per (device, step) they sum to the sample's idle, and no idle
       piece overlaps a busy interval or another idle piece;
    4. with `capture`: no idle piece overlaps any raw device activity event of the capture (checked
       against the events themselves, independently of the busy-interval algebra).
    5. no "saved if removed" exceeds the device's step (the median over steps, as the savings are).
    """
    checked = []
    for d in report.devices:
        for s in d.samples:
            if tuple(s.idle_ns) != CAUSES:
                raise InvariantError(
                    f"rank {s.rank} device {s.device} step {s.step}: causes {list(s.idle_ns)}"
                )
            if any(v < 0 for v in s.idle_ns.values()) or s.busy_ns < 0:
                raise InvariantError(f"rank {s.rank} device {s.device} step {s.step}: negative time {s}")
            if s.busy_ns + s.idle_total_ns != s.dur_ns:
                raise InvariantError(
                    f"rank {s.rank} device {s.device} step {s.step}: busy {s.busy_ns} + idle "
                    f"{s.idle_total_ns} != step {s.dur_ns} ns"
                )
    checked.append("causes sum to idle per step and device")
    for h in report.host.steps:
        if sum(h.breakdown_ns.get(k, 0) for k in HOST_STATES) != h.dur_ns:
            raise InvariantError(f"rank {h.rank} step {h.step}: host states do not sum to the step")
    checked.append("host states sum to the step")
    for d in report.devices:
        step_ms = statistics.median(d.step_ns) / 1e6 if d.samples else 0.0
        for label, saved in (d.savings_ms_per_step or {}).items():
            worst = max(saved.values(), default=0.0)
            if worst > step_ms + 1e-9:
                raise InvariantError(
                    f"rank {d.rank} device {d.device}: a {label} saving of {worst:.3f} ms exceeds the step "
                    f"({step_ms:.3f} ms)"
                )
    checked.append("no saving exceeds the step")
    idle, busy = report.idle_intervals, report.busy_intervals
    if idle is None or busy is None:
        return checked
    want = {(s.rank, s.device, s.step): s.idle_total_ns for d in report.devices for s in d.samples}
    got = idle.groupby(["rank", "device", "step"])["dur_ns"].sum().to_dict() if len(idle) else {}
    for key, ns in want.items():
        if int(got.get(key, 0)) != ns:
            raise InvariantError(f"rank/device/step {key}: idle pieces sum to {got.get(key, 0)}, sample {ns}")
    checked.append("idle intervals sum to the samples")
    for (rank, device), g in idle.groupby(["rank", "device"]):
        b = busy[(busy["rank"] == rank) & (busy["device"] == device)]
        starts = np.concatenate([g["ts_ns"].to_numpy(np.int64), b["ts_ns"].to_numpy(np.int64)])
        ends = starts + np.concatenate([g["dur_ns"].to_numpy(np.int64), b["dur_ns"].to_numpy(np.int64)])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        bad = np.flatnonzero(starts[1:] < np.maximum.accumulate(ends)[:-1])
        if bad.size:
            i = int(bad[0]) + 1
            raise InvariantError(
                f"rank {rank} device {device}: an idle interval overlaps device activity or another "
                f"idle interval at {int(starts[i])} ns"
            )
    checked.append("idle never overlaps busy")
    if capture is not None:
        _check_against_events(idle, capture)
        checked.append("idle never overlaps a device activity event")
    return checked


def _check_against_events(idle, capture: Any) -> None:

    dev = load_frames(capture.table).device
    # An activity without a duration ([t, t): `dur` 0, or missing and read as 0) holds no time, so it
    # overlaps nothing; counted as one, it failed --check on fuzzed traces whose kernel lost its `dur`.
    dev = dev[dev["end"] > dev["ts"]]
    for (rank, device), g in idle.groupby(["rank", "device"]):
        acts = dev[(dev["rank"] == rank) & (dev["device"] == device)]
        if acts.empty:
            continue
        order = np.argsort(acts["ts"].to_numpy(np.int64), kind="stable")
        a_s = acts["ts"].to_numpy(np.int64)[order]
        reach = np.maximum.accumulate(acts["end"].to_numpy(np.int64)[order])
        ps = g["ts_ns"].to_numpy(np.int64)
        pe = ps + g["dur_ns"].to_numpy(np.int64)
        k = np.searchsorted(a_s, pe, side="left") - 1  # last activity starting before the piece ends
        hit = (k >= 0) & (reach[np.maximum(k, 0)] > ps)
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            raise InvariantError(
                f"rank {rank} device {device}: idle piece at {int(ps[i])} ns overlaps a device activity event"
            )
