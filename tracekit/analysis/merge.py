"""The driver's half of an analysis: per-part results (`tracekit.analysis.partial`) → one Report.

    report = merge(parts, meta, params)

What needs the whole job happens here, on compact inputs: rule 5 (collective wait and the straggler)
matches the parts' collective kernels across ranks; the longest gaps, sync sources, kernel and op
statistics, the DataLoader figures and the profiler overhead are combined from the parts' aggregates.
Every combination is exact and independent of how the ranks were split into parts (the kernel
medians: see tracekit.analysis.sketch), so one process, a pool and Ray give the same report.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Optional

import numpy as np
import pandas as pd

from tracekit.analysis.advice import advise
from tracekit.analysis.collective import collective_waits
from tracekit.analysis.comm import communication
from tracekit.analysis.compiled import compiled_summary
from tracekit.analysis.host import dataloader_info
from tracekit.analysis.launch import kernel_stats, merge_kernel_partials
from tracekit.analysis.loader import active_window, foreign_loader, input_pipeline
from tracekit.analysis.model import (
    CAUSES,
    DeviceReport,
    GapHistogram,
    HostReport,
    OpStat,
    ProfilerOverhead,
    Report,
    RuntimeCall,
    SyncSource,
)
from tracekit.analysis.partial import Params, Partial
from tracekit.analysis.ranks import job_summary
from tracekit.analysis.steps import median_ns, spread_ns
from tracekit.data.schema import device_properties


def merge(parts: Iterable[Partial], meta: dict, params: Params = Params(), path: Any = None) -> Report:
    """One Report from the partial analyses of a capture's ranks (each rank in exactly one part).
    `meta`: the capture's metadata document; `path`: where the capture is (for the report)."""
    parts = sorted(parts, key=lambda p: p.ranks)
    coll = [p.collectives for p in parts if len(p.collectives)]
    every = pd.concat(coll, ignore_index=True) if coll else _NO_COLLECTIVES
    waits, stragglers = collective_waits(every[every["device"].to_numpy() >= 0])
    wait_by = {(int(r), int(d), int(s)): int(w) for r, d, s, w in waits.itertuples(index=False)}
    devices = tuple(
        _with_waits(d, wait_by, stragglers.get((d.rank, d.device))) for p in parts for d in p.devices
    )
    n_steps = sum(p.step_ns.size for p in parts)
    dl = [p.dataloader for p in parts if p.dataloader is not None]
    manifest = dict(meta.get("manifest") or {})
    kernels = kernel_stats(merge_kernel_partials(p.kernels for p in parts))
    ops = tuple(_op_stats(parts))
    regions = tuple(_op_stats(parts, "region_stats"))
    step_ns = np.concatenate([p.step_ns for p in parts]) if parts else None
    dataloader = _dataloader(dl, n_steps) if dl else None
    report = Report(
        capture=capture_info(meta, path),
        devices=devices,
        host=HostReport(steps=tuple(h for p in parts for h in p.host_steps)),
        top_gaps=tuple(
            sorted(
                (g for p in parts for g in p.top_gaps),
                key=lambda g: (-g.dur_ns, g.rank, g.device, g.start_ns),
            )[: params.top_gaps]
        ),
        sync_sources=tuple(_sync_sources(parts, n_device_steps=sum(d.steps for d in devices))),
        runtime_calls=tuple(_runtime_calls(parts, n_device_steps=sum(d.steps for d in devices))),
        kernel_stats=tuple(kernels[: params.top_kernels] if params.top_kernels is not None else kernels),
        op_stats=ops,
        region_stats=regions,
        compiled=compiled_summary(ops, kernels),
        gap_histogram=_histogram([p.histogram for p in parts]),
        dataloader=dataloader,
        profiler_overhead=_overhead(manifest, step_ns),
        parameters=params.to_json(),
        input_pipeline=input_pipeline(manifest, step_ns, dataloader.ns_per_step if dataloader else 0.0)
        or foreign_loader(
            manifest, dataloader, active_window(h for p in parts for h in p.host_steps), step_ns
        ),
        job=job_summary(devices),
        memory=tuple(m for p in parts for m in p.memory),
        idle_intervals=_concat([p.idle_intervals for p in parts]),
        busy_intervals=_concat([p.busy_intervals for p in parts]),
        step_rules=tuple(sorted((r for p in parts for r in p.step_rules), key=lambda r: r.rank)),
        graph_captures=tuple(sorted((g for p in parts for g in p.graph_captures), key=lambda g: g.rank)),
        no_work=tuple(sorted((n for p in parts for n in p.no_work), key=lambda n: n.rank)),
    )
    comm = communication([c for p in parts for c in p.comm], every, report.host.steps, devices)
    report = replace(report, communication=comm)
    return replace(report, advice=tuple(advise(report, kernels)))


def rank_report(
    part: Partial, job: Report, rank: int, meta: dict, params: Params, path: Any = None
) -> Report:
    """The full report of one rank (`part`: the partial analysis of that rank alone), with its
    devices' collective waits and straggler as the whole `job` found them."""
    report = merge([part], meta, params, path=path)
    devices = tuple(d for d in job.devices if d.rank == rank)
    report = replace(report, devices=devices, capture={**report.capture, "rank_of_job": rank})
    return replace(report, advice=tuple(advise(report)))


_NO_COLLECTIVES = pd.DataFrame(
    {
        "rank": np.zeros(0, np.int64),
        "device": np.zeros(0, np.int64),
        "ts": np.zeros(0, np.int64),
        "end": np.zeros(0, np.int64),
        "name": np.zeros(0, object),
        "step": np.zeros(0, np.int64),
        "elements": np.zeros(0, np.int64),
        "correlation": np.zeros(0, np.float64),
    }
)


def _with_waits(d: DeviceReport, wait_by: dict, straggler: Optional[int]) -> DeviceReport:
    samples = tuple(
        replace(s, collective_wait_ns=wait_by.get((s.rank, s.device, s.step), 0)) for s in d.samples
    )
    return replace(d, samples=samples, straggler_rank=straggler)


def _sync_sources(parts: list[Partial], n_device_steps: int) -> list[SyncSource]:
    """Sync idle by (call, op, source, function) over all parts, largest first (ties: in the order
    the sources first appear, by rank)."""
    total: dict[tuple, list[int]] = {}
    for p in parts:
        for s in p.sync_sources:
            acc = total.setdefault((s.call, s.op, s.source, s.function), [0, 0])
            acc[0] += s.idle_ns
            acc[1] += s.gaps
    ranked = sorted(total.items(), key=lambda kv: -kv[1][0])  # stable: first appearance breaks ties
    return [
        SyncSource(
            call=call,
            op=op,
            source=source,
            function=function,
            idle_ns=ns,
            gaps=gaps,
            steps=max(int(n_device_steps), 1),
        )
        for (call, op, source, function), (ns, gaps) in ranked
    ]


def _runtime_calls(parts: list[Partial], n_device_steps: int) -> list[RuntimeCall]:
    """`runtime` idle by call over all parts, largest first (ties: in the order the calls first
    appear, by rank)."""
    total: dict[str, list[int]] = {}
    for p in parts:
        for c in p.runtime_calls:
            acc = total.setdefault(c.call, [0, 0])
            acc[0] += c.idle_ns
            acc[1] += c.gaps
    ranked = sorted(total.items(), key=lambda kv: -kv[1][0])
    return [
        RuntimeCall(call=call, idle_ns=ns, gaps=gaps, steps=max(int(n_device_steps), 1))
        for call, (ns, gaps) in ranked
    ]


def _op_stats(parts: list[Partial], field: str = "op_stats") -> list[OpStat]:
    """Calls and time per op name and step, summed over the parts' ranks; the longest total first
    (ties: by name). Steps are the union of the parts' step numbers."""
    steps = sorted({s for p in parts for o in getattr(p, field) for s in o.steps})
    col = {s: i for i, s in enumerate(steps)}
    calls: dict[str, np.ndarray] = {}
    ns: dict[str, np.ndarray] = {}
    for p in parts:
        for o in getattr(p, field):  # one loop per op name of each part (hundreds)
            c = calls.setdefault(o.name, np.zeros(len(steps), np.int64))
            t = ns.setdefault(o.name, np.zeros(len(steps), np.int64))
            idx = [col[s] for s in o.steps]
            c[idx] += o.calls_per_step
            t[idx] += o.ns_per_step
    names = sorted(calls, key=lambda n: (-int(ns[n].sum()), n))
    return [
        OpStat(
            name=n,
            steps=tuple(steps),
            calls_per_step=tuple(int(x) for x in calls[n]),
            ns_per_step=tuple(int(x) for x in ns[n]),
        )
        for n in names
    ]


def _histogram(hists: list[GapHistogram]) -> Optional[GapHistogram]:
    if not hists:
        return None
    first = hists[0]
    return GapHistogram(
        edges_us=first.edges_us,
        counts=tuple(int(sum(h.counts[i] for h in hists)) for i in range(len(first.edges_us))),
        idle_ns=tuple(int(sum(h.idle_ns[i] for h in hists)) for i in range(len(first.edges_us))),
        idle_ns_by_cause={
            c: tuple(int(sum(h.idle_ns_by_cause[c][i] for h in hists)) for i in range(len(first.edges_us)))
            for c in CAUSES
        },
    )


def _dataloader(dl: list[tuple[dict[str, int], int, int]], n_steps: int):
    kinds: dict[str, int] = {}
    for counts, _, _ in dl:
        for k, v in counts.items():
            kinds[k] = kinds.get(k, 0) + v
    return dataloader_info(kinds, sum(d[1] for d in dl), sum(d[2] for d in dl), n_steps)


def _overhead(manifest: dict, step_ns: Optional[np.ndarray]) -> Optional[ProfilerOverhead]:
    """Profiled vs unprofiled step time (manifest `unprofiled_step_ns` or `unprofiled_step_ms`)."""
    un = manifest.get("unprofiled_step_ns")
    scale = 1e-6
    if not un:
        un = manifest.get("unprofiled_step_ms")
        scale = 1.0
    if not un or step_ns is None or step_ns.size == 0:
        return None
    un = np.asarray(un, dtype=np.float64) * scale
    return ProfilerOverhead(
        profiled_step_ms=median_ns(step_ns) / 1e6,
        unprofiled_step_ms=median_ns(un),
        profiled_spread_ms=spread_ns(step_ns) / 1e6,
        unprofiled_spread_ms=spread_ns(un),
        profiled_steps=int(step_ns.size),
        unprofiled_steps=int(un.size),
    )


def _concat(frames: list[Optional[pd.DataFrame]]) -> Optional[pd.DataFrame]:
    if any(f is None for f in frames) or not frames:
        return None
    return pd.concat(frames, ignore_index=True)


def capture_info(meta: dict, path: Any = None) -> dict:
    """The report's `capture`: the manifest, else what the trace metadata tells, plus the sources."""
    info: dict[str, Any] = {}
    if meta.get("manifest"):
        info.update(meta["manifest"])
    traces = meta.get("traces") or []
    if traces:
        info.setdefault("ranks", sorted({t.get("rank", 0) for t in traces}))
        props = device_properties(traces[0].get("metadata"))
        if props and "device" not in info:
            info["device"] = props[0].get("name")
    sources = meta.get("sources") or []
    if sources:
        info.setdefault("sources", [s.get("path") for s in sources])
    if meta.get("failed"):
        info.setdefault("failed", meta["failed"])
    odd = [f"{t.get('source')}: {w}" for t in traces for w in t.get("warnings") or []]
    if odd:  # parse.sanity's warnings, repeated by every report of the capture
        info.setdefault("warnings", odd)
    if path is not None:
        info.setdefault("path", str(path))
    return info
