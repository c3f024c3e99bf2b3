"""The analysis of part of a capture (one rank, or any set of ranks): everything that needs only
that part's events, as a `Partial` that `tracekit.analysis.merge` combines with the others.

    part = analyze_partial(table, context)     # table: schema.SCHEMA rows of some ranks
    report = merge([part, ...], context)       # tracekit.analysis.merge

What crosses ranks waits for the merge: matching collectives (rule 5: the waits and the straggler),
the top gaps, sync sources, kernel and op statistics over the whole job. A Partial holds per-step
figures, aggregates and the collective kernels, never an event table (a worker ships it to the driver):
its size grows with steps, kernel names and collectives, not with events. Only with `evidence` does
it keep the idle and busy intervals (for `--check`, `--store` and `annotate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.analysis import intervals as iv
from tracekit.analysis.attribution import (
    DEFAULT_SYNC_TOLERANCE_NS,
    DeviceGaps,
    attribute_device,
    cause_totals,
    gap_causes,
)
from tracekit.analysis.causes import STATE_NAMES
from tracekit.analysis.comm import CommPart, collectives_frame, comm_parts, gpu_elements
from tracekit.analysis.events import load_frames
from tracekit.analysis.graph_capture import capture_info, capture_spans
from tracekit.analysis.host import Threads, dataloader_kinds, host_steps, op_stats
from tracekit.analysis.launch import kernel_partials
from tracekit.analysis.memory import device_memory, device_timelines
from tracekit.analysis.memory_model import DeviceMemory
from tracekit.analysis.model import (
    CAUSES,
    DeviceReport,
    GapHistogram,
    GraphCaptureInfo,
    HostStep,
    IdleGap,
    NoWorkInfo,
    OpStat,
    RuntimeCall,
    StepRule,
    StepSample,
    SyncSource,
)
from tracekit.analysis.sketch import Sketch
from tracekit.analysis.steps import cycle_starts_of, launch_times, step_windows
from tracekit.analysis.sync import pointer_index, pointer_of, resolve_pointers, runtime_calls, sync_sources
from tracekit.data.schema import device_properties

# Idle-gap histogram bucket edges, µs (eager PyTorch loses its time in thousands of 5-50 µs gaps).
GAP_EDGES_US = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000)
DEFAULT_TOP_GAPS = 20
DEFAULT_TOP_KERNELS = 50


@dataclass(frozen=True)
class Params:
    """The analysis parameters (thresholds with units), as a report's `parameters` lists them."""

    sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS
    top_gaps: int = DEFAULT_TOP_GAPS
    top_kernels: Optional[int] = DEFAULT_TOP_KERNELS
    evidence: bool = False  # keep the idle and busy intervals (check_invariants, --store, annotate)

    def to_json(self) -> dict[str, Any]:
        return {
            "sync_tolerance_ns": self.sync_tolerance_ns,
            "top_gaps": self.top_gaps,
            "top_kernels": self.top_kernels,
            "gap_edges_us": list(GAP_EDGES_US),
        }


@dataclass(frozen=True)
class CaptureContext:
    """What a part's analysis needs from the capture's metadata: the manifest (batch size, peak memory,
    unprofiled step times) and the device names of the trace metadata, by (rank, device)."""

    manifest: dict = field(default_factory=dict)
    device_names: dict = field(default_factory=dict)
    cycle_starts: dict = field(default_factory=dict)  # rank -> its trace files' starts (steps.cycles)
    step_marker: Optional[str] = None  # --step: the steps' marker (Capture.step_marker)

    @classmethod
    def of(cls, meta: dict, step_marker: Optional[str] = None) -> CaptureContext:
        names = {}
        for t in meta.get("traces") or []:
            for p in device_properties(t.get("metadata")):
                if isinstance(p.get("id"), int) and "name" in p:
                    names[(int(t.get("rank", 0)), int(p["id"]))] = p["name"]
        return cls(
            manifest=dict(meta.get("manifest") or {}),
            device_names=names,
            cycle_starts=cycle_starts_of(meta),
            step_marker=step_marker,
        )

    def for_ranks(self, ranks: set[int]) -> CaptureContext:
        """The context a worker needs for these ranks only (the device names of other ranks stay)."""
        return CaptureContext(
            self.manifest,
            {k: v for k, v in self.device_names.items() if k[0] in ranks},
            {r: v for r, v in self.cycle_starts.items() if r in ranks},
            self.step_marker,
        )


@dataclass
class Partial:
    """The analysis of some ranks of a capture (module docstring). Devices' samples have no
    collective wait yet, and no straggler: the merge adds them."""

    ranks: tuple[int, ...]
    devices: tuple[DeviceReport, ...]
    host_steps: tuple[HostStep, ...]
    step_ns: np.ndarray  # the duration of every step window (the profiler-overhead median)
    top_gaps: tuple[IdleGap, ...]  # this part's longest gaps, at most Params.top_gaps
    sync_sources: tuple[SyncSource, ...]  # steps = this part's device-steps
    histogram: GapHistogram
    kernels: dict[str, tuple[Sketch, Sketch, Sketch, int, int]]  # api, queue, kernel, launched, graph
    op_stats: tuple[OpStat, ...]
    region_stats: tuple[OpStat, ...]  # record_function regions (user annotations but the step markers)
    dataloader: Optional[tuple[dict[str, int], int, int]]  # (iterator kinds → calls, calls, ns)
    # comm.COLLECTIVE_COLUMNS: NCCL kernels and a CPU backend's spans (device -1); step -1: outside steps
    collectives: pd.DataFrame
    idle_intervals: Optional[pd.DataFrame] = None  # with Params.evidence
    busy_intervals: Optional[pd.DataFrame] = None
    checked: tuple[str, ...] = ()  # invariants a worker checked on this part (tracekit.scale.tasks)
    runtime_calls: tuple[RuntimeCall, ...] = ()  # steps = this part's device-steps
    step_rules: tuple[StepRule, ...] = ()  # how each rank's steps were found
    graph_captures: tuple[GraphCaptureInfo, ...] = ()  # ranks whose trace records a graph capture
    no_work: tuple[NoWorkInfo, ...] = ()  # ranks with stretches of no work between steps
    memory: tuple[DeviceMemory, ...] = ()  # each device's memory (tracekit.analysis.memory)
    comm: tuple[CommPart, ...] = ()  # each rank's communication (tracekit.analysis.comm)


def analyze_partial(
    table: pa.Table,
    context: CaptureContext = CaptureContext(),
    params: Params = Params(),
    *,
    frames: Any = None,
    threads: Optional[Threads] = None,
) -> Partial:
    """Attribute every nanosecond of device idle time in every step of the ranks in `table`.
    `frames`, `threads`: the table's (tracekit.analysis.pipeline.prepare), when the caller has them."""
    fr = (
        frames if frames is not None else load_frames(table, context.cycle_starts, marker=context.step_marker)
    )
    threads = threads if threads is not None else Threads(fr.host, fr.steps)
    dev, steps = fr.device, fr.steps
    wins = step_windows(steps, dev, launch_times(dev, fr.launches))  # the one step definition
    hsteps = host_steps(threads, steps, wins)
    dev_step = _assign_steps(dev, wins)
    # collectives (NCCL kernels, a CPU backend's spans), with their step (-1 outside every window:
    # matched across ranks all the same)
    coll = collectives_frame(dev, dev_step, fr.host, steps)
    gpu_elements(coll, dev, fr.launches, fr.comm_sizes)
    shared = _Shared(fr, threads, {(h.rank, h.step): h for h in hsteps}, context, params, wins)
    found = (_device(shared, int(r), int(d), acts) for (r, d), acts in dev.groupby(["rank", "device"]))
    per_device = [x for x in found if x is not None]
    devices = tuple(d for d, _, _ in per_device)
    all_gaps = [g for _, g, _ in per_device]
    busy_rows = [b for _, _, b in per_device if b is not None]
    pointers = pointer_index(resolve_pointers(all_gaps, threads))  # the sync call behind each drain
    memory = tuple(
        device_memory(tl, threads, context.manifest) for tl in device_timelines(fr, threads, context.manifest)
    )
    return Partial(
        ranks=tuple(sorted(set(steps["rank"].tolist()) | {d.rank for d in devices})),
        devices=devices,
        host_steps=tuple(hsteps),
        step_ns=np.asarray([h.step_ns for h in hsteps], np.int64),
        top_gaps=tuple(_top_gaps(all_gaps, steps, pointers, params.top_gaps)),
        sync_sources=tuple(sync_sources(all_gaps, pointers, n_steps=sum(d.steps for d in devices))),
        runtime_calls=tuple(runtime_calls(all_gaps, threads, n_steps=sum(d.steps for d in devices))),
        histogram=_histogram(all_gaps),
        kernels=kernel_partials(dev.loc[dev_step >= 0], fr.launches),
        op_stats=tuple(op_stats(fr.host, steps)),
        region_stats=tuple(op_stats(fr.host, steps, cat="user_annotation")),
        dataloader=dataloader_kinds(fr.host),
        collectives=coll.reset_index(drop=True),
        comm=tuple(comm_parts(fr, wins, coll)),
        idle_intervals=_idle_frame(all_gaps, steps) if params.evidence else None,
        busy_intervals=(pd.concat(busy_rows, ignore_index=True) if busy_rows else _EMPTY_BUSY)
        if params.evidence
        else None,
        step_rules=step_rules(fr.step_rules),
        graph_captures=capture_info(capture_spans(fr.host), steps),
        no_work=no_work_info(fr.no_work),
        memory=memory,
    )


def no_work_info(stretches: pd.DataFrame) -> tuple[NoWorkInfo, ...]:
    """Per rank, its no-work stretches (Frames.no_work) counted and summed."""
    out = []
    for r, g in stretches.groupby("rank"):  # one loop per rank with some
        dur = (g["end"] - g["ts"]).to_numpy(np.int64)
        out.append(NoWorkInfo(int(r), int(dur.size), int(dur.sum()), int(np.median(dur))))
    return tuple(out)


def step_rules(found: dict) -> tuple[StepRule, ...]:
    """The report's StepRules of the frames' `step_rules` (rank -> parse.iterations.Iterations)."""
    return tuple(StepRule(r, it.rule, it.marker, it.steps, it.units) for r, it in sorted(found.items()))


def idle_by_device(frames: Any, sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS) -> dict:
    """Only the idle attribution (rules 1-4) of each device of `frames`: (rank, device) -> idle ns per
    step by cause, as the report gives it (`DeviceReport.idle_ns_per_step`), without the host breakdown,
    statistics and evidence (the what-if replay attributes its predicted timeline with it)."""
    threads = Threads(frames.host, frames.steps)
    wins = step_windows(frames.steps, frames.device, launch_times(frames.device, frames.launches))
    out = {}
    for (r, d), acts in frames.device.groupby(["rank", "device"]):  # one loop per device
        rank, device = int(r), int(d)
        rsteps = wins.get((rank, device))
        if rsteps is None or rsteps.empty:
            continue
        launches = frames.launches[frames.launches["rank"] == rank].reset_index(drop=True)
        gaps, _, _ = attribute_device(
            rank,
            device,
            acts.reset_index(drop=True),
            rsteps,
            launches,
            threads,
            sync_tolerance_ns=sync_tolerance_ns,
        )
        idle = cause_totals(gaps, len(rsteps))
        out[(rank, device)] = {c: float(idle[:, j].sum()) / len(rsteps) for j, c in enumerate(CAUSES)}
    return out


@dataclass
class _Shared:
    """What every device's attribution shares: the frames, the host threads' states, the host steps."""

    fr: Any
    threads: Threads
    hstep_by: dict  # (rank, step) -> HostStep
    context: CaptureContext
    params: Params
    windows: dict  # (rank, device) -> the rank's steps with their bounds (tracekit.analysis.steps)


def _device(
    sh: _Shared, rank: int, device: int, acts: pd.DataFrame
) -> tuple[DeviceReport, DeviceGaps, Optional[pd.DataFrame]] | None:
    """One device: its idle gaps attributed (rules 1-4), its report, its busy intervals per step (with
    Params.evidence). Collective waits and the straggler come later (the merge: they need all ranks)."""
    rsteps = sh.windows.get((rank, device))
    if rsteps is None or rsteps.empty:
        return None
    launches = sh.fr.launches[sh.fr.launches["rank"] == rank].reset_index(drop=True)
    acts = acts.reset_index(drop=True)
    gaps, busy_s, busy_e = attribute_device(
        rank, device, acts, rsteps, launches, sh.threads, sync_tolerance_ns=sh.params.sync_tolerance_ns
    )
    ws = rsteps["ts"].to_numpy(np.int64)
    we = rsteps["end"].to_numpy(np.int64)
    busy = iv.total_overlap(busy_s, busy_e, ws, we)
    all_s, all_e = iv.union(acts["ts"].to_numpy(np.int64), acts["end"].to_numpy(np.int64))
    last = max(int(we[-1]), int(all_e.max())) if all_e.size else int(we[-1])  # all of them empty: none
    after = iv.total_overlap(all_s, all_e, we[-1:], np.array([last]))
    busy_rows = None
    if sh.params.evidence:
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
    manifest = sh.context.manifest
    report = DeviceReport(
        rank=rank,
        device=device,
        samples=tuple(_samples(sh, rank, device, rsteps, busy, gaps)),
        peak_memory_bytes=sh.fr.peak_memory.get((rank, device), _peak_memory(manifest, rank, device)),
        samples_per_step=manifest.get("samples_per_step") or manifest.get("batch_size"),
        name=sh.context.device_names.get((rank, device)),
        busy_after_last_step_ns=int(after[0]),
    )
    return report, gaps, busy_rows


def _samples(
    sh: _Shared, rank: int, device: int, rsteps: pd.DataFrame, busy: np.ndarray, gaps: DeviceGaps
) -> list[StepSample]:
    """One StepSample per step window of the rank: busy, idle by cause, host gaps (no collective wait
    yet: the merge adds it)."""
    idle = cause_totals(gaps, len(rsteps))
    ngaps = np.bincount(gaps.win, minlength=len(rsteps))
    samples = []
    for i, row in enumerate(rsteps.itertuples(index=False)):  # one loop per step
        h = sh.hstep_by.get((rank, int(row.step)))
        samples.append(
            StepSample(
                rank=rank,
                device=device,
                step=int(row.step),
                start_ns=int(row.ts),
                dur_ns=int(row.end - row.ts),
                host_dur_ns=int(row.host_end - row.host_ts),
                busy_ns=int(busy[i]),
                idle_ns={c: int(idle[i, j]) for j, c in enumerate(CAUSES)},
                dispatch_gap_ns=h.dispatch_gap_ns if h else 0,
                dispatch_gaps=h.dispatch_gaps if h else 0,
                idle_gaps=int(ngaps[i]),
            )
        )
    return samples


_EMPTY_BUSY = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "device", "step", "ts_ns", "dur_ns")})


def _assign_steps(df: pd.DataFrame, windows: dict) -> np.ndarray:
    """Step number of the step (of its rank and device, tracekit.analysis.steps) each device activity
    starts in; -1 outside every step."""
    out = np.full(len(df), -1, dtype=np.int64)
    for (rank, device), grp in windows.items():  # one loop per device
        m = ((df["rank"] == rank) & (df["device"] == device)).to_numpy()
        if not m.any():
            continue
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


def _top_gaps(all_gaps: list[DeviceGaps], steps: pd.DataFrame, pointers: dict, n: int) -> list[IdleGap]:
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


def _peak_memory(manifest: dict, rank: int, device: int) -> int | None:
    peaks = manifest.get("peak_memory_bytes")
    if isinstance(peaks, int):
        return peaks
    if isinstance(peaks, dict):
        v = peaks.get(f"{rank}:{device}", peaks.get(str(device)))
        return int(v) if v is not None else None
    return None
