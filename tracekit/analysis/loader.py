"""What the profiler hid about the input pipeline: the unprofiled steps' loader waits beside the trace.

`tracekit capture` times each step's fetches with the host clock, profiled or not (tracekit.capture.loader;
the manifest's `ranks[r].unprofiled.loader_wait_ms`). A loader-bound run's profiled window often shows no
stall: the profiler's pauses (start-up, the trace export between cycles) let the workers refill their
queue, and an active window of at most `num_workers × prefetch_factor` steps is served from it. On the
lead's ResNet-50 capture (H200, 3 workers, default schedule) the unprofiled steps took 88-105 ms, loader
bound, and the profiled ones 44-48 ms with no DataLoader wait.

    unprofiled step   |fetch..........wait...........|compute|   the loader's share: wait / step
    profiled step     |f|compute|                              served from the refilled queue

`input_pipeline(manifest, step_ns, dataloader_ns_per_step)` returns the figures and the warnings (one line
each) for why the profiled window cannot show a stall:
- `window`: the schedule's active steps are at most the loader's prefetch depth (the capture side's rule,
  `tracekit.capture.loader.window_hides_loader`, defined once);
- `faster`: the unprofiled steps wait for their batch (share ≥ LOADER_STALL_MIN_SHARE) and the profiled
  steps are faster than the unprofiled ones by more than PROFILED_FASTER_MARGIN (the profiler only adds
  time: a faster profiled step did not wait as the unprofiled ones did).
Steps are compared by their means: a loader's stalls come in bursts (on the lead's H200 ResNet capture,
3 workers: steps of ~25 ms with one of 350-450 ms every third, median 28 ms, mean ~120 ms), and the
mean is the step the job runs at.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Optional

import numpy as np

from tracekit.analysis.model import InputPipeline
from tracekit.capture.loader import window_hides_loader

LOADER_STALL_MIN_SHARE = 0.20  # the unprofiled steps wait for their batch ≥ 20 % of their time
PROFILED_FASTER_MARGIN = 0.10  # profiled mean step < 90 % of the unprofiled mean


def unprofiled_waits(manifest: Mapping[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(step ms, loader wait ms) of the unprofiled timed steps of every rank that timed its fetches."""
    steps: list[float] = []
    waits: list[float] = []
    for rank in manifest.get("ranks") or []:
        un = (rank or {}).get("unprofiled") or {} if isinstance(rank, dict) else {}
        w, s = un.get("loader_wait_ms"), un.get("step_ms")
        if not w or not s or len(w) != len(s):
            continue
        steps += [float(x) for x in s]
        waits += [min(float(a), float(b)) for a, b in zip(w, s)]  # a wait never exceeds its step
    return tuple(steps), tuple(waits)


def input_pipeline(
    manifest: Mapping[str, Any], step_ns: Optional[np.ndarray], dataloader_ns_per_step: float
) -> Optional[InputPipeline]:
    """The input pipeline's figures (None when the capture timed no fetches). `step_ns`: the trace's
    step durations; `dataloader_ns_per_step`: the trace's DataLoader __next__ time per step."""
    steps, waits = unprofiled_waits(manifest)
    if not steps:
        return None
    schedule = dict(manifest.get("schedule") or {})
    loader = dict(manifest.get("loader") or {})
    prof_ms = 0.0
    if step_ns is not None and step_ns.size:
        prof_ms = float(np.mean(step_ns.astype(np.float64))) / 1e6
    ip = InputPipeline(
        unprofiled_step_ms=steps,
        unprofiled_wait_ms=waits,
        profiled_step_ms=prof_ms,
        profiled_wait_ms=dataloader_ns_per_step / 1e6,
        active_steps=int(schedule.get("active", 0)),
        loader=loader,
    )
    return replace(ip, warnings=tuple(_warnings(ip, schedule)))


def _warnings(ip: InputPipeline, schedule: Mapping[str, int]) -> list[str]:
    out = []
    stalls = ip.unprofiled_wait_share >= LOADER_STALL_MIN_SHARE
    if window_hides_loader(dict(schedule), ip.loader):
        depth = ip.loader["prefetch_depth"]
        seen = (
            f"the unprofiled steps wait {ip.unprofiled_wait_share:.0%} of their time for their batch"
            if stalls
            else f"the unprofiled steps show no stall either (loader wait {ip.unprofiled_wait_share:.0%})"
        )
        out.append(
            f"the profiled window (active={ip.active_steps} steps) is not longer than the DataLoader's "
            f"prefetch depth ({ip.loader.get('num_workers')} workers x prefetch_factor "
            f"{ip.loader.get('prefetch_factor')} = {depth} batches): the batches queued during the "
            f"profiler's pauses can hide a loader stall from the trace; "
            f"{seen}; capture with --schedule active={depth + 2} to see it in the trace"
        )
    un = ip.unprofiled_step_mean_ms
    if stalls and un > 0 and ip.profiled_step_ms < un * (1 - PROFILED_FASTER_MARGIN):
        out.append(
            f"the profiled steps ({ip.profiled_step_ms:.3g} ms) are faster than the unprofiled ones "
            f"({un:.3g} ms), which wait {ip.unprofiled_wait_mean_ms:.3g} ms for their batch: the profiled "
            f"window ({ip.profiled_wait_share:.0%} loader wait) did not see the loader stall"
        )
    return out
