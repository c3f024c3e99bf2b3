"""A job of many ranks in a few figures: the job's step time, how each figure spreads across ranks,
who the others wait for, and which ranks differ from the rest (`tracekit analyze` on > 8 ranks).

Every figure is per device and per step (a device's mean over its steps), then summarised across
devices: median, p90 and max, with the rank that holds the max.

    job step time: per step number, the slowest rank's step (a synchronous job advances at the pace
                   of its slowest rank), then median / max over the steps.
    stragglers:    the ranks that devices name as their straggler (tracekit.analysis.collective: the
                   rank a device spent most collective wait on), with how many devices wait for each
                   and their collective wait per step.
    outliers:      a device differs from the rest on a figure when |x - median| exceeds both
                   OUTLIER_MADS robust standard deviations (1.4826 × the median absolute deviation)
                   and OUTLIER_MIN_STEP_FRACTION of the median step time (differences below that are
                   noise at the scale of a step). Needs at least OUTLIER_MIN_DEVICES devices (with
                   fewer, the median says nothing about "the rest"); the largest deviations first.
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np

from tracekit.analysis.model import (
    CAUSES,
    DeviceReport,
    FigureSpread,
    JobSummary,
    OutlierRank,
    StragglerRank,
)

OUTLIER_MADS = 3.0
OUTLIER_MIN_STEP_FRACTION = 0.01
OUTLIER_MIN_DEVICES = 5
MAX_OUTLIERS = 8
MAX_STRAGGLERS = 5
# The figures compared across ranks, in report order (ns per step of a device: `_figures`).
FIGURES: tuple[str, ...] = ("step", "busy", *(f"idle: {c}" for c in CAUSES), "collective wait")


def _figures(d: DeviceReport) -> list[float]:
    n = max(d.steps, 1)
    return [
        sum(d.step_ns) / n,
        sum(s.busy_ns for s in d.samples) / n,
        *(sum(s.idle_ns.get(c, 0) for s in d.samples) / n for c in CAUSES),
        sum(s.collective_wait_ns for s in d.samples) / n,
    ]


def job_summary(devices: tuple[DeviceReport, ...]) -> Optional[JobSummary]:
    """The many-rank summary of a report's devices; None with fewer than two ranks."""
    devs = [d for d in devices if d.samples]
    if len({d.rank for d in devs}) < 2:
        return None
    values = np.array([_figures(d) for d in devs], dtype=np.float64)  # devices × figures
    ranks = np.array([d.rank for d in devs])
    spreads = tuple(
        FigureSpread(
            figure=name,
            median_ms=float(np.median(values[:, j])) / 1e6,
            p90_ms=float(np.percentile(values[:, j], 90)) / 1e6,
            max_ms=float(values[:, j].max()) / 1e6,
            max_rank=int(ranks[int(np.argmax(values[:, j]))]),
        )
        for j, name in enumerate(FIGURES)
    )
    step_median_ms, step_max_ms, slowest, steps = _job_steps(devs)
    return JobSummary(
        ranks=len(set(ranks.tolist())),
        devices=len(devs),
        steps=steps,
        step_median_ms=step_median_ms,
        step_max_ms=step_max_ms,
        slowest_rank=slowest,
        spreads=spreads,
        stragglers=_stragglers(devs),
        outliers=_outliers(devs, values),
    )


def _job_steps(devs: list[DeviceReport]) -> tuple[float, float, Optional[int], int]:
    """(median and max over step numbers of the slowest rank's step, the rank slowest most often,
    the number of step numbers)."""
    slowest: dict[int, tuple[int, int]] = {}
    for d in devs:
        for s in d.samples:
            if s.step not in slowest or s.dur_ns > slowest[s.step][0]:
                slowest[s.step] = (s.dur_ns, d.rank)
    durs = np.array([v[0] for v in slowest.values()], dtype=np.float64)
    often = collections.Counter(v[1] for v in slowest.values()).most_common()
    rank = min(r for r, n in often if n == often[0][1]) if often else None
    return float(np.median(durs)) / 1e6, float(durs.max()) / 1e6, rank, len(slowest)


def _stragglers(devs: list[DeviceReport]) -> tuple[StragglerRank, ...]:
    waits: dict[int, list[float]] = collections.defaultdict(list)
    for d in devs:
        if d.straggler_rank is not None:
            waits[d.straggler_rank].append(d.collective_wait_ms_per_step)
    ranked = sorted(waits.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:MAX_STRAGGLERS]
    return tuple(
        StragglerRank(
            rank=r,
            waited_on_by=len(w),
            wait_ms_per_step_total=float(sum(w)),
            wait_ms_per_step_median=float(np.median(w)),
        )
        for r, w in ranked
    )


def _outliers(devs: list[DeviceReport], values: np.ndarray) -> tuple[OutlierRank, ...]:
    if len(devs) < OUTLIER_MIN_DEVICES:
        return ()
    median = np.median(values, axis=0)
    mad = np.median(np.abs(values - median), axis=0) * 1.4826
    floor = OUTLIER_MIN_STEP_FRACTION * median[0]
    limit = np.maximum(OUTLIER_MADS * mad, floor)
    dev = np.abs(values - median)
    hits = []
    for i, j in zip(*np.nonzero(dev > limit)):  # one loop per outlying (device, figure)
        score = dev[i, j] / max(mad[j], floor, 1.0)
        hits.append((-score, devs[i].rank, devs[i].device, j))
    hits.sort()
    out = []
    seen: set[tuple[int, int]] = set()
    for _, rank, device, j in hits:  # the largest deviation of each device, largest first
        if (rank, device) in seen:
            continue
        seen.add((rank, device))
        i = next(k for k, d in enumerate(devs) if d.rank == rank and d.device == device)
        out.append(
            OutlierRank(
                rank=rank,
                device=device,
                figure=FIGURES[j],
                value_ms=float(values[i, j]) / 1e6,
                median_ms=float(median[j]) / 1e6,
                others=tuple(FIGURES[k] for k in range(len(FIGURES)) if k != j and dev[i, k] > limit[k]),
            )
        )
        if len(out) == MAX_OUTLIERS:
            break
    return tuple(out)
