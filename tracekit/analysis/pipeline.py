"""The analysis: pure functions from a capture's tables to a `tracekit.analysis.model.Report`.

    report = analyze(capture)            # capture: tracekit.data.store.Capture
    check_invariants(report)             # raises InvariantError when a rule is broken

Modules: intervals (the algebra), events (table → frames), host (thread states, host breakdown,
dispatch gaps, op stats), attribution (rules 1-4), collective (rule 5), launch (kernel statistics),
sync (sync sources), advice, invariants.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.advice import advise
from tracekit.analysis.attribution import (
    DEFAULT_SYNC_TOLERANCE_NS,
    DeviceGaps,
    attribute_device,
    cause_totals,
    gap_causes,
)
from tracekit.analysis.collective import collective_waits
from tracekit.analysis.events import STATE_NAMES, load_frames
from tracekit.analysis.host import Threads, dataloader_info, host_steps, op_stats
from tracekit.analysis.launch import kernel_stats
from tracekit.analysis.model import (
    CAUSES,
    DeviceReport,
    GapHistogram,
    HostReport,
    IdleGap,
    ProfilerOverhead,
    Report,
    StepSample,
)
from tracekit.analysis.sync import pointer_of, resolve_pointers, sync_sources

# Idle-gap histogram bucket edges, µs (eager PyTorch loses its time in thousands of 5-50 µs gaps).
GAP_EDGES_US = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000)
DEFAULT_TOP_GAPS = 20
DEFAULT_TOP_KERNELS = 50

__all__ = ["analyze", "prepare", "idle_by_device", "Context", "GAP_EDGES_US"]


def analyze(
    capture: Any,
    *,
    sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
    top_gaps: int = DEFAULT_TOP_GAPS,
    top_kernels: int | None = DEFAULT_TOP_KERNELS,
    context: Context | None = None,
) -> Report:
    """Attribute every nanosecond of device idle time in every step of `capture` to a cause.

    `sync_tolerance_ns`: how far (ns) a sync call may lie from the instant the device went idle and
    still count as the sync that drained the queue (rule 4). `top_gaps`: how many of the longest gaps
    to keep as evidence. `top_kernels`: kernel names kept in the launch statistics (None: all).
    `context`: `prepare(capture, sync_tolerance_ns)` when the caller keeps the frames for more work
    (the what-if savings reuse them); its tolerance is the one used."""
    ctx = (
        context if context is not None else prepare(capture, sync_tolerance_ns)
    )  # frames, thread states, host steps, waits
    sync_tolerance_ns = ctx.sync_tolerance_ns
    per_device = [
        _device(ctx, int(r), int(d), acts) for (r, d), acts in ctx.fr.device.groupby(["rank", "device"])
    ]
    per_device = [x for x in per_device if x is not None]
    devices = [d for d, _, _ in per_device]
    all_gaps = [g for _, g, _ in per_device]
    busy_rows = [b for _, _, b in per_device]
    pointers = resolve_pointers(all_gaps, ctx.threads)  # the sync call behind each drain (rule 4)
    steps, host = ctx.fr.steps, ctx.fr.host
    params = {
        "sync_tolerance_ns": sync_tolerance_ns,
        "top_gaps": top_gaps,
        "top_kernels": top_kernels,
        "gap_edges_us": list(GAP_EDGES_US),
    }
    report = Report(
        capture=_capture_info(capture),
        devices=tuple(devices),
        host=HostReport(steps=tuple(ctx.hsteps)),
        top_gaps=tuple(_top_gaps(all_gaps, steps, pointers, top_gaps)),
        sync_sources=tuple(sync_sources(all_gaps, pointers, n_steps=sum(d.steps for d in devices))),
        kernel_stats=tuple(
            kernel_stats(ctx.fr.device.loc[ctx.dev_step >= 0], ctx.fr.launches, limit=top_kernels)
        ),
        op_stats=tuple(op_stats(host, steps)),
        gap_histogram=_histogram(all_gaps),
        dataloader=dataloader_info(host, len(steps)),
        profiler_overhead=_overhead(ctx.manifest, steps),
        parameters=params,
        idle_intervals=_idle_frame(all_gaps, steps),
        busy_intervals=pd.concat(busy_rows, ignore_index=True) if busy_rows else _EMPTY_BUSY,
    )
    return replace(report, advice=tuple(advise(report)))


@dataclass
class Context:
    """What every device's attribution shares: the frames, the host threads' states, the host steps and
    the collective waits (rule 5, matched across all ranks at once)."""

    fr: Any
    threads: Threads
    hsteps: list
    manifest: dict
    names: dict
    dev_step: np.ndarray  # each device activity's step (-1 outside every window)
    wait_by: dict  # (rank, device, step) -> collective wait ns
    stragglers: dict  # (rank, device) -> straggler rank
    sync_tolerance_ns: int


def prepare(capture: Any, sync_tolerance_ns: int, frames: Any = None) -> Context:
    """The frames of the capture (`frames`: given, e.g. a replayed timeline's) and what is derived
    from them once for all devices."""
    fr = frames if frames is not None else load_frames(capture.table)
    threads = Threads(fr.host, fr.steps)
    dev = fr.device
    # collective kernels, with their step (-1 outside every window: matched across ranks all the same)
    dev_step = _assign_steps(dev, fr.steps)
    nccl = dev["nccl"].to_numpy()
    coll = dev.loc[nccl, ["rank", "device", "ts", "end", "name"]].assign(step=dev_step[nccl])
    waits, stragglers = collective_waits(coll)
    wait_by = {(int(r), int(d), int(s)): int(w) for r, d, s, w in waits.itertuples(index=False)}
    return Context(
        fr=fr,
        threads=threads,
        hsteps=host_steps(threads, fr.steps),
        manifest=dict(capture.manifest or {}),
        names=_device_names(capture),
        dev_step=dev_step,
        wait_by=wait_by,
        stragglers=stragglers,
        sync_tolerance_ns=sync_tolerance_ns,
    )


def idle_by_device(frames: Any, sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS) -> dict:
    """Only the idle attribution (rules 1-4) of each device of `frames`: (rank, device) -> idle ns per
    step by cause, as `analyze` reports it (`DeviceReport.idle_ns_per_step`), without the host breakdown,
    statistics and evidence (the what-if replay attributes its predicted timeline with it)."""
    threads = Threads(frames.host, frames.steps)
    out = {}
    for (r, d), acts in frames.device.groupby(["rank", "device"]):  # one loop per device
        got = _attributed(frames, threads, sync_tolerance_ns, int(r), int(d), acts)
        if got is not None:
            rsteps, gaps = got[0], got[2]
            idle = cause_totals(gaps, len(rsteps))
            out[(int(r), int(d))] = {c: float(idle[:, j].sum()) / len(rsteps) for j, c in enumerate(CAUSES)}
    return out


def _attributed(fr: Any, threads: Threads, tol: int, rank: int, device: int, acts: pd.DataFrame):
    """(the rank's steps, the activities, the attributed gaps, busy starts, busy ends) of one device, or
    None for a rank without steps."""
    rsteps = fr.steps[fr.steps["rank"] == rank].reset_index(drop=True)
    if rsteps.empty:
        return None
    launches = fr.launches[fr.launches["rank"] == rank].reset_index(drop=True)
    acts = acts.reset_index(drop=True)
    gaps, busy_s, busy_e = attribute_device(
        rank, device, acts, rsteps, launches, threads, sync_tolerance_ns=tol
    )
    return rsteps, acts, gaps, busy_s, busy_e


def _device(
    ctx: Context, rank: int, device: int, acts: pd.DataFrame
) -> tuple[DeviceReport, DeviceGaps, pd.DataFrame] | None:
    """One device: its idle gaps attributed (rules 1-4), its busy intervals per step, its report."""
    got = _attributed(ctx.fr, ctx.threads, ctx.sync_tolerance_ns, rank, device, acts)
    if got is None:
        return None
    rsteps, acts, gaps, busy_s, busy_e = got
    ws = rsteps["ts"].to_numpy(np.int64)
    we = rsteps["end"].to_numpy(np.int64)
    busy = iv.total_overlap(busy_s, busy_e, ws, we)
    all_s, all_e = iv.union(acts["ts"].to_numpy(np.int64), acts["end"].to_numpy(np.int64))
    after = iv.total_overlap(all_s, all_e, we[-1:], np.array([max(int(we[-1]), int(all_e.max()))]))
    win, _, bs, be = iv.intersect_windows(busy_s, busy_e, ws, we)
    busy_rows = pd.DataFrame(
        {
            "rank": np.full(win.size, rank, np.int64),
            "device": np.full(win.size, device, np.int64),
            "step": rsteps["step"].to_numpy(np.int64)[win],
            "ts_ns": bs,
            "dur_ns": be - bs,
        }
    )
    samples = _samples(ctx, rank, device, rsteps, busy, gaps)
    manifest = ctx.manifest
    report = DeviceReport(
        rank=rank,
        device=device,
        samples=tuple(samples),
        straggler_rank=ctx.stragglers.get((rank, device)),
        peak_memory_bytes=ctx.fr.peak_memory.get((rank, device), _peak_memory(manifest, rank, device)),
        samples_per_step=manifest.get("samples_per_step") or manifest.get("batch_size"),
        name=ctx.names.get((rank, device)),
        busy_after_last_step_ns=int(after[0]),
    )
    return report, gaps, busy_rows


def _samples(
    ctx: Context, rank: int, device: int, rsteps: pd.DataFrame, busy: np.ndarray, gaps: DeviceGaps
) -> list[StepSample]:
    """One StepSample per step window of the rank: busy, idle by cause, collective wait, host gaps."""
    idle = cause_totals(gaps, len(rsteps))
    ngaps = np.bincount(gaps.win, minlength=len(rsteps))
    hstep_by = {(h.rank, h.step): h for h in ctx.hsteps}
    samples = []
    for i, row in enumerate(rsteps.itertuples(index=False)):  # one loop per step
        h = hstep_by.get((rank, int(row.step)))
        samples.append(
            StepSample(
                rank=rank,
                device=device,
                step=int(row.step),
                start_ns=int(row.ts),
                dur_ns=int(row.end - row.ts),
                busy_ns=int(busy[i]),
                idle_ns={c: int(idle[i, j]) for j, c in enumerate(CAUSES)},
                collective_wait_ns=ctx.wait_by.get((rank, device, int(row.step)), 0),
                dispatch_gap_ns=h.dispatch_gap_ns if h else 0,
                dispatch_gaps=h.dispatch_gaps if h else 0,
                idle_gaps=int(ngaps[i]),
            )
        )
    return samples


_EMPTY_BUSY = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "device", "step", "ts_ns", "dur_ns")})


def _assign_steps(df: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step number of the window (same rank) each row starts in; -1 outside every window."""
    out = np.full(len(df), -1, dtype=np.int64)
    for rank, grp in steps.groupby("rank"):
        m = (df["rank"] == rank).to_numpy()
        wi = iv.window_of(grp["ts"], grp["end"], df["ts"].to_numpy(np.int64)[m])
        out[np.flatnonzero(m)] = np.where(wi >= 0, grp["step"].to_numpy(np.int64)[wi], -1)
    return out


def _idle_frame(all_gaps: list[DeviceGaps], steps: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for g in all_gaps:
        rsteps = steps[steps["rank"] == g.rank]["step"].to_numpy(np.int64)
        parts.append(
            pd.DataFrame(
                {
                    "rank": np.full(g.p_gap.size, g.rank, np.int64),
                    "device": np.full(g.p_gap.size, g.device, np.int64),
                    "step": rsteps[g.win[g.p_gap]] if g.p_gap.size else np.zeros(0, np.int64),
                    "ts_ns": g.p_start,
                    "dur_ns": g.p_end - g.p_start,
                    "cause": pd.Categorical.from_codes(g.p_cause, categories=pd.Index(CAUSES, dtype=object)),
                }
            )
        )
    if not parts:
        return pd.DataFrame(
            {c: np.zeros(0, np.int64) for c in ("rank", "device", "step", "ts_ns", "dur_ns")}
        ).assign(cause=pd.Series(dtype=object))
    return pd.concat(parts, ignore_index=True)


def _top_gaps(
    all_gaps: list[DeviceGaps], steps: pd.DataFrame, pointers: pd.DataFrame, n: int
) -> list[IdleGap]:
    rows = []
    for gi, g in enumerate(all_gaps):
        if g.a.size == 0:
            continue
        dur = g.b - g.a
        k = min(n, dur.size)
        idx = np.argpartition(-dur, k - 1)[:k] if k else np.zeros(0, np.int64)
        for i in idx:  # at most n per device
            rows.append((int(dur[i]), gi, int(i)))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    out = []
    for _, gi, i in rows[:n]:
        g = all_gaps[gi]
        by_cause, by_state = gap_causes_one(g, i)
        rsteps = steps[steps["rank"] == g.rank]["step"].to_numpy(np.int64)
        ptr = None
        if g.drain[i] and g.pointer[i] >= 0:
            ptr = pointer_of(pointers, g.thread_keys[g.thread[i]], int(g.pointer[i]))
        cause = CAUSES[int(np.argmax(by_cause))]
        slices = {name: int(by_state[j]) for j, name in enumerate((*STATE_NAMES, "queued")) if by_state[j]}
        out.append(
            IdleGap(
                rank=g.rank,
                device=g.device,
                step=int(rsteps[g.win[i]]),
                start_ns=int(g.a[i]),
                dur_ns=int(g.b[i] - g.a[i]),
                cause=cause,
                slices_ns=slices,
                next_kernel=g.next_kernel[i],
                sync=ptr,
            )
        )
    return out


def gap_causes_one(g: DeviceGaps, i: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.searchsorted(g.p_gap, i, side="left")
    hi = np.searchsorted(g.p_gap, i, side="right")
    sub = DeviceGaps(**{**g.__dict__})
    for f in ("p_gap", "p_start", "p_end", "p_state", "p_cause", "p_pointer"):
        setattr(sub, f, getattr(g, f)[lo:hi])
    sub.p_gap = np.zeros(hi - lo, dtype=np.int64)
    sub.a = g.a[i : i + 1]
    by_cause, by_state = gap_causes(sub)
    return by_cause[0], by_state[0]


def _histogram(all_gaps: list[DeviceGaps]) -> GapHistogram:
    edges_ns = np.asarray(GAP_EDGES_US, dtype=np.int64) * 1000
    nb = len(GAP_EDGES_US)
    counts = np.zeros(nb, dtype=np.int64)
    idle = np.zeros(nb, dtype=np.int64)
    by_cause = np.zeros((len(CAUSES), nb), dtype=np.int64)
    for g in all_gaps:
        dur = g.b - g.a
        bucket = np.searchsorted(edges_ns, dur, side="right") - 1
        counts += np.bincount(bucket, minlength=nb)
        idle += np.bincount(bucket, weights=dur, minlength=nb).astype(np.int64)
        pb = bucket[g.p_gap]
        np.add.at(by_cause, (g.p_cause, pb), g.p_end - g.p_start)
    return GapHistogram(
        edges_us=tuple(float(x) for x in GAP_EDGES_US),
        counts=tuple(int(x) for x in counts),
        idle_ns=tuple(int(x) for x in idle),
        idle_ns_by_cause={c: tuple(int(x) for x in by_cause[j]) for j, c in enumerate(CAUSES)},
    )


def _capture_info(capture: Any) -> dict:
    meta = capture.meta or {}
    info: dict[str, Any] = {}
    if capture.manifest:
        info.update(capture.manifest)
    traces = meta.get("traces") or []
    if traces:
        info.setdefault("ranks", sorted({t.get("rank", 0) for t in traces}))
        md = traces[0].get("metadata") or {}
        props = md.get("deviceProperties") or []
        if props and "device" not in info:
            info["device"] = props[0].get("name")
    sources = meta.get("sources") or []
    if sources:
        info.setdefault("sources", [s.get("path") for s in sources])
    if capture.path is not None:
        info.setdefault("path", str(capture.path))
    return info


def _device_names(capture: Any) -> dict[tuple[int, int], str]:
    out = {}
    for t in capture.traces:
        for p in (t.get("metadata") or {}).get("deviceProperties") or []:
            if "id" in p and "name" in p:
                out[(int(t.get("rank", 0)), int(p["id"]))] = p["name"]
    return out


def _peak_memory(manifest: dict, rank: int, device: int) -> int | None:
    peaks = manifest.get("peak_memory_bytes")
    if isinstance(peaks, int):
        return peaks
    if isinstance(peaks, dict):
        v = peaks.get(f"{rank}:{device}", peaks.get(str(device)))
        return int(v) if v is not None else None
    return None


def _overhead(manifest: dict, steps: pd.DataFrame) -> ProfilerOverhead | None:
    """Profiled vs unprofiled step time (manifest `unprofiled_step_ns` or `unprofiled_step_ms`)."""
    un = manifest.get("unprofiled_step_ns")
    scale = 1e-6
    if not un:
        un = manifest.get("unprofiled_step_ms")
        scale = 1.0
    if not un or steps.empty:
        return None
    un_ms = float(np.median(np.asarray(un, dtype=np.float64))) * scale
    prof_ms = float(np.median((steps["end"] - steps["ts"]).to_numpy(np.float64))) / 1e6
    return ProfilerOverhead(profiled_step_ms=prof_ms, unprofiled_step_ms=un_ms)
