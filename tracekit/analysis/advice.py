"""Short advice, only where the evidence is strong. Each rule names its threshold (a fraction of step
time) and the evidence it quotes; a rule that does not fire says nothing."""

from __future__ import annotations

import numpy as np

from tracekit.analysis.model import Advice, Report

DATALOADER_MIN_FRACTION = 0.20  # dataloader idle ≥ 20 % of step time
SYNC_MIN_FRACTION = 0.10  # sync idle ≥ 10 % of step time
HOST_BOUND_MIN_FRACTION = 0.30  # launch + framework + interpreter idle ≥ 30 % of step time
TINY_KERNEL_MAX_US = 20.0  # "tiny": median kernel time below 20 µs
GRAPHED_MAX_FRACTION = 0.5  # no CUDA-graph advice when half the kernels already run in graph launches
COLLECTIVE_MIN_FRACTION = 0.10  # collective wait ≥ 10 % of step time
CPU_DISPATCH_MIN_FRACTION = 0.30  # CPU-only: dispatch gaps ≥ 30 % of step time


def _fraction(report: Report, causes: tuple[str, ...]) -> float:
    total = sum(s.dur_ns for d in report.devices for s in d.samples)
    idle = sum(s.idle_ns.get(c, 0) for d in report.devices for s in d.samples for c in causes)
    return idle / total if total else 0.0


def advise(report: Report) -> list[Advice]:
    out: list[Advice] = []
    dl = _fraction(report, ("dataloader",))
    if dl >= DATALOADER_MIN_FRACTION:
        it = report.dataloader
        if it is not None and it.multi_worker is False:
            msg = "DataLoader stalls with a single-process iterator: set num_workers > 0 and pin_memory=True."
        else:
            msg = "DataLoader stalls: raise num_workers or prefetch_factor, or make __getitem__ cheaper."
        kind = it.iterator if it and it.iterator else "unknown iterator"
        out.append(
            Advice("dataloader_workers", msg, f"dataloader idle {dl:.0%} of step time ({kind})", "dataloader")
        )
    sy = _fraction(report, ("sync",))
    if sy >= SYNC_MIN_FRACTION and report.sync_sources:
        top = report.sync_sources[0]
        where = top.source or top.op or top.call
        if top.op in ("aten::item", "aten::_local_scalar_dense"):
            msg = (
                f"A host read of a device value (.item()) at {where} drains the GPU queue: "
                "move it out of the loop or batch the reads."
            )
        else:
            msg = f"Host synchronisation ({top.call}) at {where} drains the GPU queue: remove it or defer it."
        out.append(
            Advice(
                "sync_drain",
                msg,
                f"sync idle {sy:.0%} of step time; top source {top.idle_ms_per_step:.3f} ms/step "
                f"over {top.gaps} gaps",
                "sync",
            )
        )
    hb = _fraction(report, ("launch", "framework", "interpreter"))
    medians = [k.kernel.median_ns for k in report.kernel_stats if k.kernel.count]
    counts = [k.kernel.count for k in report.kernel_stats]
    graphed = sum(k.graph_launched for k in report.kernel_stats)
    if hb >= HOST_BOUND_MIN_FRACTION and medians and graphed < GRAPHED_MAX_FRACTION * sum(counts):
        med_us = float(np.average(medians, weights=counts)) / 1e3
        if med_us <= TINY_KERNEL_MAX_US:
            if report.compiled is not None:
                msg = (
                    "Compiled, but the host still launches kernel by kernel and cannot keep up: "
                    "torch.compile(mode='reduce-overhead') replays the step as CUDA graphs."
                )
            else:
                msg = (
                    "Many tiny kernels and the host cannot keep up: capture the step with CUDA graphs or "
                    "fuse it with torch.compile (`tracekit whatif CAPTURE --cuda-graphs` predicts the graph)."
                )
            out.append(
                Advice(
                    "cuda_graphs",
                    msg,
                    f"launch+framework+interpreter idle {hb:.0%} of step time; "
                    f"typical kernel {med_us:.1f} µs",
                    "launch",
                )
            )
    out.extend(_straggler_advice(report))
    if not report.devices and report.host.steps:
        total = sum(h.dur_ns for h in report.host.steps)
        gaps = sum(h.dispatch_gap_ns for h in report.host.steps)
        if total and gaps / total >= CPU_DISPATCH_MIN_FRACTION:
            out.append(
                Advice(
                    "interpreter",
                    "The Python interpreter between framework calls dominates the step: batch small "
                    "operations, or try torch.compile.",
                    f"host dispatch gaps {gaps / total:.0%} of step time",
                    "interpreter",
                )
            )
    return out


def _straggler_advice(report: Report) -> list[Advice]:
    """One advice per straggler rank: the devices whose collective wait is at least
    COLLECTIVE_MIN_FRACTION of their step time, grouped by the rank they wait for."""
    waiting: dict[int, list[tuple[float, int, int]]] = {}
    for d in report.devices:
        total = sum(s.dur_ns for s in d.samples)
        wait = sum(s.collective_wait_ns for s in d.samples)
        if total and wait / total >= COLLECTIVE_MIN_FRACTION and d.straggler_rank is not None:
            waiting.setdefault(d.straggler_rank, []).append((wait / total, d.rank, d.device))
    out = []
    for straggler, devs in sorted(waiting.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(devs) == 1:
            frac, rank, device = devs[0]
            out.append(
                Advice(
                    "straggler",
                    f"Rank {rank} waits for rank {straggler} in collectives: balance its work "
                    "(data, compute, placement).",
                    f"collective wait {frac:.0%} of step time on rank {rank} device {device}",
                    None,
                )
            )
            continue
        fracs = [f for f, _, _ in devs]
        top = max(devs)
        ranks = sorted({r for _, r, _ in devs})
        out.append(
            Advice(
                "straggler",
                f"{len(ranks)} ranks ({_ranges(ranks)}) wait for rank {straggler} in collectives: "
                "balance its work (data, compute, placement).",
                f"collective wait median {float(np.median(fracs)):.0%} of step time on {len(devs)} "
                f"devices, max {top[0]:.0%} on rank {top[1]} device {top[2]}",
                None,
            )
        )
    return out


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] → '0-2, 5, 7-8'."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts)
