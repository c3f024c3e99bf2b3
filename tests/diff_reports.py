"""Tiny Reports for diff tests, built straight from per-step values (the analysis has its own tests).

`gpu_report(dur_ms=[...], idle_ms={"sync": [...]}, ...)` gives one device, one host thread and the
given steps; busy is what the idle causes leave of each step, so the model's invariant holds.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from tracekit.analysis.model import (
    CAUSES,
    HOST_STATES,
    DeviceReport,
    HostReport,
    HostStep,
    OpStat,
    Report,
    StepSample,
)


def _ns(ms: float) -> int:
    return int(round(ms * 1e6))


def host_steps(
    dur_ms: Sequence[float], host_ms: Optional[Mapping[str, Sequence[float]]] = None, gaps_ms=None
) -> tuple[HostStep, ...]:
    out = []
    start = 0
    for i, d in enumerate(dur_ms):
        dur = _ns(d)
        breakdown = {k: _ns(host_ms[k][i]) if host_ms and k in host_ms else 0 for k in HOST_STATES}
        breakdown["interpreter"] += dur - sum(breakdown.values())  # the rest: sums exactly to dur
        gap = _ns(gaps_ms[i]) if gaps_ms is not None else breakdown["interpreter"]
        out.append(
            HostStep(
                rank=0,
                pid=1,
                tid=1,
                step=i + 1,
                start_ns=start,
                dur_ns=dur,
                breakdown_ns=breakdown,
                dispatch_gaps=100 + i % 3,
                dispatch_gap_ns=gap,
            )
        )
        start += dur
    return tuple(out)


def ops(per_call_us: Mapping[str, Sequence[float]], calls: int = 10) -> tuple[OpStat, ...]:
    return tuple(
        OpStat(
            name=name,
            steps=tuple(range(1, len(v) + 1)),
            calls_per_step=tuple(calls for _ in v),
            ns_per_step=tuple(int(round(x * 1e3 * calls)) for x in v),
        )
        for name, v in per_call_us.items()
    )


def gpu_report(
    dur_ms: Sequence[float],
    idle_ms: Optional[Mapping[str, Sequence[float]]] = None,
    *,
    manifest: Optional[dict] = None,
    op_us: Optional[Mapping[str, Sequence[float]]] = None,
    samples_per_step: Optional[int] = 256,
    peak_memory_bytes: Optional[int] = 2**30,
    name: str = "NVIDIA H200",
) -> Report:
    samples = []
    start = 0
    for i, d in enumerate(dur_ms):
        dur = _ns(d)
        idle = {c: _ns(idle_ms[c][i]) if idle_ms and c in idle_ms else 0 for c in CAUSES}
        samples.append(
            StepSample(
                rank=0,
                device=0,
                step=i + 1,
                start_ns=start,
                dur_ns=dur,
                busy_ns=dur - sum(idle.values()),
                idle_ns=idle,
                dispatch_gap_ns=_ns(d / 10),
                dispatch_gaps=50,
            )
        )
        start += dur
    device = DeviceReport(
        rank=0,
        device=0,
        samples=tuple(samples),
        peak_memory_bytes=peak_memory_bytes,
        samples_per_step=samples_per_step,
        name=name,
    )
    return Report(
        capture=manifest or {},
        devices=(device,),
        host=HostReport(host_steps(dur_ms)),
        op_stats=ops(op_us or {}),
    )


def cpu_report(
    dur_ms: Sequence[float],
    host_ms: Optional[Mapping[str, Sequence[float]]] = None,
    *,
    manifest: Optional[dict] = None,
    op_us: Optional[Mapping[str, Sequence[float]]] = None,
) -> Report:
    return Report(
        capture=manifest or {},
        devices=(),
        host=HostReport(host_steps(dur_ms, host_ms)),
        op_stats=ops(op_us or {}),
    )


def manifest(python: str = "3.11.7", **changes) -> dict:
    doc = {
        "workload": "heavy_mlp",
        "knobs": {"batch_size": 256, "num_workers": 0},
        "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 2},
        "python": {"version": python, "implementation": "CPython"},
        "torch": {"version": "2.8.0+cu128", "cuda": "12.8"},
        "device": {"type": "cpu", "name": "x86_64", "count": 1},
        "host": {"name": "box", "cpu_count": 2},
    }
    for path, value in changes.items():
        cur = doc
        parts = path.split("__")
        for p in parts[:-1]:
            cur = cur[p]
        cur[parts[-1]] = value
    return doc
