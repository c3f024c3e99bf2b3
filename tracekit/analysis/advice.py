"""Short advice, only where the evidence is strong. Each rule names its threshold (a fraction of step
time) and the evidence it quotes; a rule that does not fire says nothing.

Ranking: each advice carries the share of the step its cause accounts for, and the list is ordered by it.
Where the capture timed its fetches without the profiler (`Report.input_pipeline`), the shares are of the
*unprofiled* step: the loader's is its measured wait, the others are their profiled idle time per step
over the unprofiled step (an upper bound: the profiler's own cost inflates host time). The profiled window
can hide a loader stall entirely (tracekit.analysis.loader), so the unprofiled evidence decides.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracekit.analysis.model import Advice, InputPipeline, Report

DATALOADER_MIN_FRACTION = 0.20  # dataloader idle ≥ 20 % of step time
SYNC_MIN_FRACTION = 0.10  # sync idle ≥ 10 % of step time
HOST_BOUND_MIN_FRACTION = 0.30  # launch + framework + interpreter idle ≥ 30 % of step time
TINY_KERNEL_MAX_US = 20.0  # "tiny": median kernel time below 20 µs
GRAPHED_MAX_FRACTION = 0.5  # no CUDA-graph advice when half the kernels already run in graph launches
COLLECTIVE_MIN_FRACTION = 0.10  # collective wait ≥ 10 % of step time
CPU_DISPATCH_MIN_FRACTION = 0.30  # CPU-only: dispatch gaps ≥ 30 % of step time
CAPTURE_MIN_FRACTION = 0.50  # a graph capture ≥ 50 % of a rank's steps: a capture trace, not a loop's


def _fraction(report: Report, causes: tuple[str, ...]) -> float:
    total = sum(s.dur_ns for d in report.devices for s in d.samples)
    idle = sum(s.idle_ns.get(c, 0) for d in report.devices for s in d.samples for c in causes)
    return idle / total if total else 0.0


def advise(report: Report) -> list[Advice]:
    """The advice that fires, ranked by the share of the step its cause accounts for (module docstring)."""
    out = _advise(report)
    ip = report.input_pipeline
    if ip is None or ip.unprofiled_step_mean_ms <= 0:
        return out
    # everything on the unprofiled step's scale, then the largest share first (stable for ties)
    scale = _profiled_step_ms(report) / ip.unprofiled_step_mean_ms
    ranked = [
        a
        if a.basis == "unprofiled" or a.share is None
        else replace(a, share=a.share * scale, basis="unprofiled")
        for a in out
    ]
    return sorted(ranked, key=lambda a: -(a.share if a.share is not None else 0.0))


def _profiled_step_ms(report: Report) -> float:
    steps = [s.dur_ns for d in report.devices for s in d.samples] or [h.dur_ns for h in report.host.steps]
    return float(np.mean(steps)) / 1e6 if steps else 0.0


def _loader_advice(report: Report, dl: float) -> Advice | None:
    """The loader stalls: by the unprofiled steps' measured waits where the capture timed them, else by
    the trace's dataloader idle time."""
    ip: InputPipeline | None = report.input_pipeline
    it = report.dataloader
    if ip is not None and ip.unprofiled_wait_share >= DATALOADER_MIN_FRACTION:
        cfg = ip.loader or {}
        workers = cfg.get("num_workers")
        setting = (
            f" ({workers} workers, prefetch_factor {cfg.get('prefetch_factor')})"
            if cfg.get("dataloader")
            else ""
        )
        if workers == 0:
            msg = "The steps wait for their batch, loaded in the training process: set num_workers > 0."
        else:
            msg = "The steps wait for their batch: raise num_workers, or make __getitem__ cheaper."
        evidence = (
            f"without the profiler the steps wait {ip.unprofiled_wait_mean_ms:.3g} ms of "
            f"{ip.unprofiled_step_mean_ms:.3g} ms for their batch ({ip.unprofiled_wait_share:.0%}){setting}"
        )
        if ip.hidden:
            evidence += f"; the profiled window shows {ip.profiled_wait_share:.0%}"
        return Advice(
            "dataloader_workers", msg, evidence, "dataloader", ip.unprofiled_wait_share, "unprofiled"
        )
    if dl < DATALOADER_MIN_FRACTION:
        return None
    if it is not None and it.multi_worker is False:
        msg = "DataLoader stalls with a single-process iterator: set num_workers > 0 and pin_memory=True."
    else:
        msg = "DataLoader stalls: raise num_workers or prefetch_factor, or make __getitem__ cheaper."
    kind = it.iterator if it and it.iterator else "unknown iterator"
    return Advice(
        "dataloader_workers",
        msg,
        f"dataloader idle {dl:.0%} of step time ({kind})",
        "dataloader",
        dl,
        "profiled",
    )


def _capture_advice(report: Report) -> Advice | None:
    """A trace whose steps are mostly a CUDA/HIP graph capture: profile the replay instead."""
    capture = max(report.graph_captures, key=lambda g: g.share_of_steps, default=None)
    if capture is None or capture.share_of_steps < CAPTURE_MIN_FRACTION:
        return None
    return Advice(
        "graph_capture",
        "This trace records a graph capture, not its replay: the device idles while the kernels "
        "are recorded. Profile steps that replay the graph to see where their time goes.",
        f"rank {capture.rank}: {capture.share_of_steps:.0%} of the steps inside {capture.call} … "
        f"EndCapture and the instantiate ({capture.launches} kernel launches recorded, not run)",
        None,
        capture.share_of_steps,
        "profiled",
    )


def _advise(report: Report) -> list[Advice]:
    capture = _capture_advice(report)
    if capture is not None:  # the idle time is the capture's (analysis/graph_capture.py): no cause's advice
        return [capture]
    out: list[Advice] = []
    dl = _fraction(report, ("dataloader",))
    loader = _loader_advice(report, dl)
    if loader is not None:
        out.append(loader)
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
                sy,
                "profiled",
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
                    hb,
                    "profiled",
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
                    gaps / total,
                    "profiled",
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
                    frac,
                    "profiled",
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
                float(np.median(fracs)),
                "profiled",
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
