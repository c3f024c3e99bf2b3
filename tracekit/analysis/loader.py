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

**The steady state, from the source** (`steady_state`). The capture's DataLoader workers time every batch
they make (tracekit.capture.workers: wall, CPU, run-queue wait), so whether the loader keeps up does not
depend on what the profiler's pauses did to the queue. Per step, without the profiler, the loop takes at
least each of

    consumer   the training step without waiting for its batch: median(step − loader wait) of the
               unprofiled steps (else of the profiled ones: an upper bound, the profiler's cost inside)
    pool       k × production / workers: a batch's production time with a CPU of its own (wall less the
               time its worker waited for a CPU; the mean over the timed batches, `batch_time`), k batches
               per step, the workers in parallel
    cpu floor  (k × a batch's mean CPU + the trainer's CPU per step) / usable CPUs: what the machine's CPUs
               allow once workers and trainer compete for them (workers + trainer threads > CPUs)

and the steady-state step is the largest; `bound` names it ("training step" when the largest is within
STEADY_MARGIN of the consumer: the loader keeps up). On a 2-core CPU the seed recipe (2 workers, 2 torch
threads) is CPU-bound: the workers' pool alone would keep up, the CPUs they share with the trainer do not.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Mapping, Optional

import numpy as np

from tracekit.analysis.model import (
    BOUND_CPUS,
    BOUND_PIPELINE,
    BOUND_TRAINING,
    InputPipeline,
    SteadyState,
)
from tracekit.capture.loader import window_hides_loader

LOADER_STALL_MIN_SHARE = 0.20  # the unprofiled steps wait for their batch ≥ 20 % of their time
PROFILED_FASTER_MARGIN = 0.10  # profiled mean step < 90 % of the unprofiled mean
# A trace made without tracekit's capture does not say how many workers its DataLoader had: at torch's
# default prefetch_factor of 2, up to 8 workers queue up to 16 batches during the profiler's pauses.
TYPICAL_MAX_DEPTH = 16
STEADY_MARGIN = 0.10  # the loader or the CPUs set the step when they take > 10 % longer than the consumer
MIN_BATCHES = 4  # fewer timed batches than this: no steady state
THIN_BASELINE = 3  # fewer unprofiled steps than this: the recorded profiled steps are a second estimate


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
    manifest: Mapping[str, Any],
    step_ns: Optional[np.ndarray],
    dataloader_ns_per_step: float,
) -> Optional[InputPipeline]:
    """The input pipeline's figures (None when the capture timed no fetches and no worker batches).
    `step_ns`: the trace's step durations; `dataloader_ns_per_step`: the trace's DataLoader __next__
    time per step."""
    steps, waits = unprofiled_waits(manifest)
    steady = steady_state(manifest)
    if not steps and steady is None:
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
        steady=steady,
    )
    return replace(ip, warnings=tuple(_warnings(ip, schedule)))


def active_window(steps: Any) -> int:
    """The longest run of consecutively numbered profiled steps of one rank: the schedule's active window
    as the trace shows it (`steps`: host steps with `.rank` and `.step`)."""
    best, last, run = 0, None, 0
    for h in sorted(steps, key=lambda h: (h.rank, h.step)):
        run = run + 1 if last is not None and (h.rank, h.step) == (last[0], last[1] + 1) else 1
        last, best = (h.rank, h.step), max(best, run)
    return best


def foreign_loader(
    manifest: Mapping[str, Any],
    dataloader: Any,
    active: int,
    step_ns: Optional[np.ndarray],
) -> Optional[InputPipeline]:
    """A trace made without tracekit's capture whose DataLoader is multi-worker: the figures the trace
    has and a warning that its window may be too short to show a stall (None where tracekit's capture
    timed the loader, or the loader is not multi-worker, or the window is longer than any usual depth).
    A trace that shows the loader waiting already gets it too: the queue the profiler's pauses refilled
    served part of the window, so the stall without the profiler can be longer than the wait it shows
    (the seed recipe on an H100, docs/results/foreign.md)."""
    if manifest or active <= 0:  # a capture of tracekit's: its manifest says what it timed
        return None
    if dataloader is None or not dataloader.multi_worker or active > TYPICAL_MAX_DEPTH:
        return None
    prof_ms = (
        float(np.mean(step_ns.astype(np.float64))) / 1e6 if step_ns is not None and step_ns.size else 0.0
    )
    if prof_ms <= 0:
        return None
    wait_ms = dataloader.ns_per_step / 1e6
    shown = (
        f" (it shows the loader waiting {wait_ms / prof_ms:.0%} of the step already: without the profiler "
        "the wait can be longer)"
        if wait_ms / prof_ms >= LOADER_STALL_MIN_SHARE
        else ""
    )
    warning = (
        f"the trace's DataLoader is multi-worker ({dataloader.iterator}), and a trace does not say how many "
        f"workers it had: its prefetch depth (num_workers x prefetch_factor, 2 per worker by default: 4 "
        f"batches with 2 workers, {TYPICAL_MAX_DEPTH} with 8) may not be shorter than the profiled window "
        f"({active} active steps), and the batches the workers queue during the profiler's pauses can hide "
        f"a loader stall from the trace{shown}. Capture with `tracekit capture --script` (it times the "
        "workers' batches and every fetch without the profiler), or profile an active window longer than "
        "num_workers x prefetch_factor steps"
    )
    ip = InputPipeline(
        unprofiled_step_ms=(),
        unprofiled_wait_ms=(),
        profiled_step_ms=prof_ms,
        profiled_wait_ms=wait_ms,
        active_steps=active,
        loader={"type": f"{dataloader.iterator} (from the trace: its settings unknown)"},
    )
    return replace(ip, warnings=(warning,))


def _floats(xs: Any) -> list[float]:
    return [float(x) for x in xs or [] if x is not None]


def steady_state(manifest: Mapping[str, Any]) -> Optional[SteadyState]:
    """The loop's step without the profiler from its workers' timings (module docstring), or None when
    the capture has none (no DataLoader workers, or fewer than MIN_BATCHES batches timed)."""
    loader = manifest.get("loader") or {}
    prods = [p for p in loader.get("production") or [] if isinstance(p, Mapping)]
    if not prods:
        return None
    prod = prods[0]  # the iterator with the most batches: the training loop's
    workers = int(prod.get("workers") or 0)
    if workers < 1 or int(prod.get("batches") or 0) < MIN_BATCHES:
        return None
    wall = batch_time(prod["wall_ms"])
    own = batch_time(prod.get("own_ms") or prod["wall_ms"])
    cpu = batch_time(prod["cpu_ms"])
    rank = next((r for r in manifest.get("ranks") or [] if isinstance(r, Mapping)), {})
    un, pr = rank.get("unprofiled") or {}, rank.get("profiled") or {}
    # batches per step: the fetches of the steps (a loop may fetch several per optimizer step)
    fetches = [int(x) for x in (un.get("loader_fetches") or []) + (pr.get("loader_fetches") or []) if x]
    k = float(statistics.median(fetches)) if fetches else 1.0
    consumer, basis = _consumer(un, pr)
    trainer_cpu, cpu_basis = _trainer_cpu(un, pr)
    usable = loader.get("usable_cpus") or (manifest.get("host") or {}).get("cpu_count")
    usable = int(usable) if usable else None
    pool = k * own / workers
    floor = (k * cpu + trainer_cpu) / usable if usable and trainer_cpu is not None else None
    candidates = [(pool, BOUND_PIPELINE)] + ([(floor, BOUND_CPUS)] if floor is not None else [])
    worst, bound = max(candidates)
    if consumer is not None and worst <= consumer * (1 + STEADY_MARGIN):
        step, bound = max(consumer, worst), BOUND_TRAINING
    else:
        step = worst if consumer is None else max(worst, consumer)
    threads = loader.get("trainer_threads")
    if manifest.get("device_kind") == "cuda" and threads is not None:
        threads = 1  # the training process' busy thread is the one launching kernels
    return SteadyState(
        step_ms=step,
        bound=bound,
        consumer_ms=consumer,
        consumer_basis=basis,
        pool_ms=pool,
        cpu_floor_ms=floor,
        workers=workers,
        batches_per_step=k,
        production_ms=own,
        production_wall_ms=wall,
        worker_cpu_ms=cpu,
        trainer_cpu_ms=trainer_cpu,
        trainer_cpu_basis=cpu_basis,
        usable_cpus=usable,
        trainer_threads=int(threads) if threads is not None else None,
        batches=int(prod.get("batches") or 0),
        unprofiled_steps=len(_floats(un.get("step_ms"))),
    )


def batch_time(stats: Mapping[str, Any]) -> float:
    """A batch's time in the workers' pace: the mean of the timed batches (their sum over the workers
    is how long the pool takes to make them: a few slow batches cost their whole time, which a median
    leaves out), the median where a manifest has no mean."""
    return float(stats["mean"] if stats.get("mean") is not None else stats["median"])


def _active(rec: Mapping[str, Any], key: str) -> list[Optional[float]]:
    """`rec[key]` of the recorded (active) steps of a profiled record."""
    values = rec.get(key) or []
    return [values[i] for i, ph in enumerate(rec.get("phases") or []) if ph == "active" and i < len(values)]


def _estimate(un: Mapping[str, Any], pr: Mapping[str, Any], of: Any) -> tuple[Optional[float], str]:
    """The median of per-step samples `of(record, clock_key)` of the unprofiled steps; where they are fewer
    than THIN_BASELINE, the smaller of their median and the recorded profiled steps' median. Both are then
    upper bounds of the training step alone: a wait step right after the profiler's pause runs while the
    Python objects of its recording are collected (on a 2-core CPU the same wait step took 10 ms in one run
    and 190 ms in the next), a recorded step carries the profiler's own cost."""
    got = of(un, "step_ms")
    if len(got) >= THIN_BASELINE:
        return statistics.median(got), "unprofiled"
    active = {k: _active(pr, k) for k in ("host_step_ms", "loader_wait_ms", "cpu_ms")}
    more = of(active, "host_step_ms")
    if not more:
        return (statistics.median(got), "unprofiled") if got else (None, "none")
    if not got:
        return statistics.median(more), f"{len(more)} profiled steps"
    return (
        min(statistics.median(got), statistics.median(more)),
        f"the smaller of {len(got)} unprofiled and {len(more)} profiled steps' medians",
    )


def _consumer(un: Mapping[str, Any], pr: Mapping[str, Any]) -> tuple[Optional[float], str]:
    """The training step without waiting for its batch: median(step − wait) of the unprofiled steps
    (`_estimate` where they are few)."""

    def of(rec: Mapping[str, Any], clock: str) -> list[float]:
        step, wait = rec.get(clock) or [], rec.get("loader_wait_ms") or []
        return [max(float(s) - float(w), 0.0) for s, w in zip(step, wait) if s is not None and w is not None]

    return _estimate(un, pr, of)


def _trainer_cpu(un: Mapping[str, Any], pr: Mapping[str, Any]) -> tuple[Optional[float], str]:
    """The training process' CPU per step: the unprofiled steps' median (`_estimate` where they are few)."""

    def of(rec: Mapping[str, Any], clock: str) -> list[float]:
        return _floats(rec.get("cpu_ms"))

    return _estimate(un, pr, of)


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
        if ip.steady is not None:
            seen = f"the workers' own timings say the loop runs at {ip.steady.step_ms:.3g} ms/step"
        fix = (
            f"give the script's schedule active={depth + 2} or more"
            if ip.loader.get("marked_by") == "adopted"
            else f"capture with --schedule active={depth + 2}"
        )
        out.append(
            f"the profiled window (active={ip.active_steps} steps) is not longer than the DataLoader's "
            f"prefetch depth ({ip.loader.get('num_workers')} workers x prefetch_factor "
            f"{ip.loader.get('prefetch_factor')} = {depth} batches): the batches queued during the "
            f"profiler's pauses can hide a loader stall from the trace; "
            f"{seen}; {fix} to see it in the trace"
        )
    un = ip.unprofiled_step_mean_ms
    if stalls and un > 0 and ip.profiled_step_ms < un * (1 - PROFILED_FASTER_MARGIN):
        out.append(
            f"the profiled steps ({ip.profiled_step_ms:.3g} ms) are faster than the unprofiled ones "
            f"({un:.3g} ms), which wait {ip.unprofiled_wait_mean_ms:.3g} ms for their batch: the profiled "
            f"window ({ip.profiled_wait_share:.0%} loader wait) did not see the loader stall"
        )
    return out
