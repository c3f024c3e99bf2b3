"""The results of `tracekit analyze`: frozen dataclasses, built from per-step samples.

Every figure a report shows (means, medians, utilisation, idle per cause) is derived from the per-step
samples it holds (`StepSample`, `HostStep`, `OpStat.ns_per_step`), so the diff can compare distributions
of steps, not single numbers. Times are integer nanoseconds; derived figures name their unit (`_ms`, `_us`).

`Report.to_json()` produces the JSON contract of DESIGN.md ("The JSON report") plus the samples;
`Report.from_json()` reads it back (it is what `analyze --store` keeps in the capture's metadata).
Field names are stable: add fields, never rename them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Mapping, Optional

from tracekit.analysis.causes import CAUSES, HOST_STATES
from tracekit.analysis.memory_model import DeviceMemory
from tracekit.parse.iterations import RULE

REPORT_VERSION = 1


def _ms(ns: float) -> float:
    return ns / 1e6


def _summary_ms(values_ns: list[int] | tuple[int, ...]) -> dict[str, float]:
    if not values_ns:
        return {"mean": 0.0, "median": 0.0, "min": 0.0, "max": 0.0}
    return {
        "mean": _ms(statistics.fmean(values_ns)),
        "median": _ms(statistics.median(values_ns)),
        "min": _ms(min(values_ns)),
        "max": _ms(max(values_ns)),
    }


@dataclass(frozen=True)
class StepSample:
    """One step on one device (tracekit.analysis.steps: until both its host window and the device work
    launched in it are done): its bounds, its busy time and its idle time split by cause.

    Invariant: ``busy_ns + sum(idle_ns.values()) == dur_ns`` and the causes are exactly CAUSES.
    `collective_wait_ns` is part of busy (a collective kernel runs while it waits for peers).
    `dispatch_gap_ns` / `dispatch_gaps` are the host dispatch gaps of the step thread of this rank.
    """

    rank: int
    device: int
    step: int
    start_ns: int
    dur_ns: int
    busy_ns: int
    idle_ns: Mapping[str, int]
    collective_wait_ns: int = 0
    dispatch_gap_ns: int = 0
    dispatch_gaps: int = 0
    idle_gaps: int = 0  # number of idle gaps in the window
    host_dur_ns: int = 0  # the host window (ProfilerStep#N) alone; the step (dur_ns) may be longer

    @property
    def idle_total_ns(self) -> int:
        return sum(self.idle_ns.values())


@dataclass(frozen=True)
class DeviceReport:
    """One device of one rank over all steps: per-step samples and their summaries."""

    rank: int
    device: int
    samples: tuple[StepSample, ...]
    straggler_rank: Optional[int] = None  # the rank the collective waits of this device waited for
    peak_memory_bytes: Optional[int] = None
    samples_per_step: Optional[int] = None  # from the manifest (batch size), for throughput
    name: Optional[str] = None  # device name from deviceProperties
    # Device busy time after the rank's last step window ended: the host ran ahead of this device (e.g.
    # a DDP rank whose all-reduce waits for a slower peer), so its step windows hold only part of its work.
    busy_after_last_step_ns: int = 0
    # The step time saved (ms/step) if one host cause alone were removed, predicted by the what-if replay
    # with and without the profiler's cost: {"profiled": {cause: ms}, "unprofiled": {cause: ms}}, for
    # the causes a host change can remove (HOST_STATES; `queued` is device-side). None: not computed
    # (`tracekit.api.analyze` adds it, `Report.savings` says how: the replay is a later stage than the
    # analysis) or not trusted (the unchanged replay misses the observed step by more than 2 %).
    savings_ms_per_step: Optional[Mapping[str, Mapping[str, float]]] = None

    @property
    def steps(self) -> int:
        return len(self.samples)

    @property
    def step_ns(self) -> list[int]:
        return [s.dur_ns for s in self.samples]

    @property
    def gpu_utilization(self) -> float:
        total = sum(s.dur_ns for s in self.samples)
        return sum(s.busy_ns for s in self.samples) / total if total else 0.0

    def idle_ns_per_step(self) -> dict[str, float]:
        n = max(self.steps, 1)
        return {c: sum(s.idle_ns.get(c, 0) for s in self.samples) / n for c in CAUSES}

    @property
    def idle_ms_per_step(self) -> dict[str, float]:
        return {c: _ms(v) for c, v in self.idle_ns_per_step().items()}

    @property
    def idle_fraction(self) -> float:
        total = sum(s.dur_ns for s in self.samples)
        return sum(s.idle_total_ns for s in self.samples) / total if total else 0.0

    @property
    def collective_wait_ms_per_step(self) -> float:
        return _ms(sum(s.collective_wait_ns for s in self.samples) / max(self.steps, 1))

    @property
    def throughput_per_s(self) -> Optional[float]:
        if not self.samples_per_step or not self.samples:
            return None
        mean_ns = statistics.fmean(self.step_ns)
        return self.samples_per_step / (mean_ns / 1e9) if mean_ns else None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "device": self.device,
            "name": self.name,
            "steps": self.steps,
            "step_ms": _summary_ms(self.step_ns),
            "gpu_utilization": self.gpu_utilization,
            "idle_fraction": self.idle_fraction,
            "idle_ms_per_step": self.idle_ms_per_step,
            "collective_wait_ms_per_step": self.collective_wait_ms_per_step,
            "straggler_rank": self.straggler_rank,
            "busy_after_last_step_ms": _ms(self.busy_after_last_step_ns),
            "peak_memory_bytes": self.peak_memory_bytes,
            "samples_per_step": self.samples_per_step,
            "throughput_per_s": self.throughput_per_s,
            "savings_ms_per_step": None
            if self.savings_ms_per_step is None
            else {k: dict(v) for k, v in self.savings_ms_per_step.items()},
            "samples": [_plain(s) for s in self.samples],
        }


@dataclass(frozen=True)
class HostStep:
    """One step on the host thread that owns the step span: what the thread did, and its dispatch gaps.

    `breakdown_ns` holds HOST_STATES and sums exactly to `dur_ns`.
    """

    rank: int
    pid: int
    tid: int
    step: int
    start_ns: int
    dur_ns: int
    breakdown_ns: Mapping[str, int]
    dispatch_gaps: int = 0
    dispatch_gap_ns: int = 0
    dispatch_gap_median_ns: int = 0
    dispatch_gap_p95_ns: int = 0
    # the step by the one definition (tracekit.analysis.steps), which the host window is part of: on a
    # rank with devices its slowest device's, else from this window's start to the next one's
    step_ns: int = 0

    @property
    def step_time_ns(self) -> int:
        """The step (tracekit.analysis.steps); the host window where a report predates it."""
        return self.step_ns or self.dur_ns


@dataclass(frozen=True)
class StepRule:
    """How one rank's steps were found (tracekit.parse.iterations): ProfilerStep spans, the user's
    --step marker, a repeated annotation, module or op sequence, or none (one window: cannot tell)."""

    rank: int
    rule: str
    marker: Optional[str] = None
    steps: int = 0
    units_per_step: int = 0

    def says(self) -> str:
        """The sentence the report says of it (the rule's own, parse.iterations.RULES)."""
        return RULE[self.rule].says.format(marker=self.marker, units=self.units_per_step)


@dataclass(frozen=True)
class GraphCaptureInfo:
    """A rank's CUDA/HIP graph capture (tracekit.analysis.graph_capture): kernels recorded, not run."""

    rank: int
    captures: int  # capture spans (BeginCapture … EndCapture, and the instantiate after)
    capture_ns: int  # their union's time inside the rank's steps
    launches: int  # kernel launch calls recorded in them
    share_of_steps: float  # capture_ns over the rank's steps
    call: str = ""  # the begin call's name (cudaStreamBeginCapture, hipStreamBeginCapture, ...)


@dataclass(frozen=True)
class NoWorkInfo:
    """A rank's stretches with no work between its steps (tracekit.analysis.no_work): in no step."""

    rank: int
    stretches: int
    no_work_ns: int  # their total
    median_ns: int  # the median stretch


@dataclass(frozen=True)
class HostReport:
    """The host side of every rank: per-step samples of the step thread."""

    steps: tuple[HostStep, ...] = ()

    def _per_step(self, values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    @property
    def dispatch_gap_ms_per_step(self) -> float:
        return _ms(self._per_step([s.dispatch_gap_ns for s in self.steps]))

    @property
    def dispatch_gaps_per_step(self) -> float:
        return self._per_step([s.dispatch_gaps for s in self.steps])

    @property
    def breakdown_ms_per_step(self) -> dict[str, float]:
        return {k: _ms(self._per_step([s.breakdown_ns.get(k, 0) for s in self.steps])) for k in HOST_STATES}

    def to_json(self) -> dict[str, Any]:
        return {
            "dispatch_gap_ms_per_step": self.dispatch_gap_ms_per_step,
            "dispatch_gaps_per_step": self.dispatch_gaps_per_step,
            "dispatch_gap_median_us": statistics.median([s.dispatch_gap_median_ns for s in self.steps]) / 1e3
            if self.steps
            else 0.0,
            "dispatch_gap_p95_us": statistics.median([s.dispatch_gap_p95_ns for s in self.steps]) / 1e3
            if self.steps
            else 0.0,
            "breakdown_ms_per_step": self.breakdown_ms_per_step,
            "steps": [_plain(s) for s in self.steps],
        }


@dataclass(frozen=True)
class SyncPointer:
    """The synchronising host call behind a sync-drain gap: the call, its enclosing op, the user line."""

    call: str  # e.g. cudaStreamSynchronize
    op: Optional[str] = None  # innermost enclosing cpu_op, e.g. aten::item
    source: Optional[str] = None  # innermost user frame "train.py:57" (python_function events)
    function: Optional[str] = None  # that frame's function; the line is where it starts ("main")
    start_ns: int = 0
    dur_ns: int = 0


@dataclass(frozen=True)
class IdleGap:
    """One idle gap [start_ns, start_ns + dur_ns) on a device, with its cause and evidence.

    `slices_ns` is what the host thread did during the gap (HOST_STATES plus "queued"/"launch" pending);
    it sums to dur_ns. `next_kernel` is the activity that ended the gap (None for a tail gap).
    """

    rank: int
    device: int
    step: int
    start_ns: int
    dur_ns: int
    cause: str
    slices_ns: Mapping[str, int] = field(default_factory=dict)
    next_kernel: Optional[str] = None
    sync: Optional[SyncPointer] = None


@dataclass(frozen=True)
class SyncSource:
    """Sync-drain idle aggregated by (call, enclosing op, user source line)."""

    call: str
    op: Optional[str]
    source: Optional[str]
    idle_ns: int  # total over all steps and devices
    gaps: int
    steps: int  # steps the report covers (for per-step figures)
    function: Optional[str] = None  # the function of the source frame (its line is the def line)

    @property
    def idle_ms_per_step(self) -> float:
        return _ms(self.idle_ns / max(self.steps, 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "function": self.function,
            "op": self.op,
            "call": self.call,
            "idle_ms_per_step": self.idle_ms_per_step,
            "gaps": self.gaps,
            "idle_ns": self.idle_ns,
            "steps": self.steps,
        }


@dataclass(frozen=True)
class RuntimeCall:
    """Idle time of cause `runtime` by the runtime/driver call that held the host (the innermost one)."""

    call: str
    idle_ns: int  # total over all steps and devices
    gaps: int
    steps: int  # steps the report covers (for per-step figures)

    @property
    def idle_ms_per_step(self) -> float:
        return _ms(self.idle_ns / max(self.steps, 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "idle_ms_per_step": self.idle_ms_per_step,
            "gaps": self.gaps,
            "idle_ns": self.idle_ns,
            "steps": self.steps,
        }


@dataclass(frozen=True)
class Dist:
    """A distribution summary of a duration, in ns."""

    count: int = 0
    total_ns: int = 0
    mean_ns: float = 0.0
    median_ns: float = 0.0
    min_ns: int = 0
    max_ns: int = 0


@dataclass(frozen=True)
class KernelStat:
    """Launch statistics of one kernel name, as Nsight Systems' cuda_kern_exec_sum splits them:
    launch-call (API) time, queue time (API call end → kernel start, clipped at 0) and kernel time.
    Kernels without a launch record count in `kernel` only (`launched` < `kernel.count`); kernels run by
    a CUDA graph (their launch record is the graph's cudaGraphLaunch) count in `kernel` and
    `graph_launched`, not in `api` / `queue` (the graph's launch is not theirs alone)."""

    name: str
    api: Dist
    queue: Dist
    kernel: Dist
    launched: int = 0  # kernels with a launch record (graph launches included)
    graph_launched: int = 0  # kernels run by a CUDA graph launch


@dataclass(frozen=True)
class CompiledRegion:
    """One compiled frame's code as it ran: `Torch-Compiled Region: frame/compile_id`."""

    name: str
    frame: int
    compile_id: int
    calls_per_step: float
    ms_per_step: float


@dataclass(frozen=True)
class CompiledSummary:
    """torch.compile in the captured steps (per step: means over the steps)."""

    regions: tuple[CompiledRegion, ...]
    recompiled_frames: tuple[int, ...]  # frames whose code ran under a compile id > 0
    guard_ms_per_step: float  # TorchDynamo Cache Lookup
    wrapper_ms_per_step: float  # inductor's wrapper code (## Call CompiledFxGraph ##), inclusive
    compile_ms_by_step: tuple[tuple[int, float], ...]  # (step, ms) of the steps that compiled
    triton_kernels_per_step: float
    triton_kernel_ms_per_step: float


@dataclass(frozen=True)
class OpStat:
    """One framework op (top-level or nested cpu_op name) on the step threads, per step.

    `calls_per_step[i]` and `ns_per_step[i]` are the calls and the inclusive CPU time in step `steps[i]`;
    the diff compares e.g. aten::linear's time per call across Python versions from these samples.
    """

    name: str
    steps: tuple[int, ...]
    calls_per_step: tuple[int, ...]
    ns_per_step: tuple[int, ...]

    @property
    def calls(self) -> int:
        return sum(self.calls_per_step)

    @property
    def us_per_call(self) -> float:
        return sum(self.ns_per_step) / self.calls / 1e3 if self.calls else 0.0


@dataclass(frozen=True)
class GapHistogram:
    """Idle gaps by duration: bucket i is [edges_us[i], edges_us[i+1]) µs (the last is open-ended).
    `idle_ns_by_cause[c][i]` is the idle time of cause c in bucket i."""

    edges_us: tuple[float, ...]
    counts: tuple[int, ...]
    idle_ns: tuple[int, ...]
    idle_ns_by_cause: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Advice:
    """One recommendation: the evidence from the trace, the knob (the exact setting or code change), and
    what turning it saves as the what-if replay predicts it (tracekit.analysis.advice; the prediction is
    filled in by tracekit.whatif.savings, a later stage).

    `share` is the part of the step its evidence accounts for, of the step named by `basis`: "profiled"
    (the trace's median step) or "unprofiled" (the capture's steps without the profiler): always 0-1.
    `whatif`: the `tracekit whatif` flags that predict the knob's effect (empty: not predictable from a
    trace; `prediction_note` says why). `saved_ms`: {"profiled": ms/step, "unprofiled": ms/step} the
    replay predicts saved (None: not computed, or not predictable), each a difference of two replayed
    steps `step_ms` of the same basis, so never above that step; where the trace does not fix the
    profiler's cost (tracekit.whatif.profiler), also "unprofiled_min" and "unprofiled_max": the least and
    most unprofiled saving over that cost and the ends of the costs measured on real captures; `bound`:
    the figure is an upper bound (what the knob can save at most), not an estimate."""

    kind: str  # stable id, e.g. "dataloader_workers", "cuda_graphs", "sync_drain"
    message: str
    evidence: str
    cause: Optional[str] = None
    share: Optional[float] = None
    basis: Optional[str] = None
    knob: Optional[str] = None
    whatif: tuple[str, ...] = ()
    prediction_note: Optional[str] = None
    saved_ms: Optional[Mapping[str, Optional[float]]] = None
    step_ms: Optional[Mapping[str, Optional[float]]] = None
    bound: bool = False

    @property
    def unprofiled_saved_ms(self) -> Optional[float]:
        return (self.saved_ms or {}).get("unprofiled")


@dataclass(frozen=True)
class ProfilerOverhead:
    """Step time with the profiler vs without it (manifest's unprofiled step times): medians, with
    1.4826 × MAD as spread, and whether the profiled window stands for the run (`not_representative`)."""

    profiled_step_ms: float
    unprofiled_step_ms: float
    profiled_spread_ms: float = 0.0
    unprofiled_spread_ms: float = 0.0
    profiled_steps: int = 0
    unprofiled_steps: int = 0

    @property
    def overhead_ratio(self) -> float:
        return self.profiled_step_ms / self.unprofiled_step_ms - 1.0 if self.unprofiled_step_ms else 0.0

    @property
    def not_representative(self) -> Optional[str]:
        """Why the profiled steps do not stand for the run, or None. The profiler only adds time, so
        profiled steps faster than the unprofiled ones (by more than FASTER_THAN_UNPROFILED), or spread
        far wider (SPREAD_FACTOR × and SPREAD_MIN_FRACTION of the step), ran in another state of the
        run (a loader that caught up, a warm-up, a noisy neighbour)."""
        un = self.unprofiled_step_ms
        if not un:
            return None
        if self.profiled_step_ms < un * (1 - FASTER_THAN_UNPROFILED):
            return "the profiled steps ran faster than the steps timed without the profiler"
        wide = max(SPREAD_FACTOR * self.unprofiled_spread_ms, SPREAD_MIN_FRACTION * un)
        if self.profiled_spread_ms > wide:
            return "the profiled steps vary far more than the steps timed without the profiler"
        return None


# The profiled window is not representative when its median step is this much below the unprofiled one...
FASTER_THAN_UNPROFILED = 0.03
# ... or its spread this many times the unprofiled spread and more than this fraction of the step.
SPREAD_FACTOR = 3.0
SPREAD_MIN_FRACTION = 0.05


@dataclass(frozen=True)
class DataLoaderInfo:
    """What the DataLoader annotations say: iterator kind and time in __next__ per step."""

    iterator: Optional[str]  # e.g. _SingleProcessDataLoaderIter, _MultiProcessingDataLoaderIter
    multi_worker: Optional[bool]
    calls: int = 0
    ns_per_step: float = 0.0


BOUND_TRAINING = "training step"
BOUND_PIPELINE = "input pipeline"
BOUND_CPUS = "CPU oversubscription"


@dataclass(frozen=True)
class SteadyState:
    """The step the loop runs at without the profiler, from the input pipeline measured at its source
    (tracekit.analysis.loader.steady_state): the largest of the training step alone (`consumer_ms`), the
    workers' pace (`pool_ms`: a batch's production time with a CPU of its own × batches per step /
    workers) and the CPUs' (`cpu_floor_ms`: the workers' and the trainer's CPU per step over the usable
    CPUs). `bound` names which one sets it."""

    step_ms: float
    bound: str  # "training step" | "input pipeline" | "CPU oversubscription"
    consumer_ms: Optional[float]
    consumer_basis: str  # "unprofiled": its timed steps; "profiled": the profiled steps, an upper bound
    pool_ms: Optional[float]
    cpu_floor_ms: Optional[float]
    workers: int
    batches_per_step: float
    production_ms: float  # one batch (mean), with a CPU of its own (wall less run-queue wait; else wall)
    production_wall_ms: float  # one batch (mean) as it went (run-queue waits included)
    worker_cpu_ms: float  # one batch's CPU time in its worker (mean)
    trainer_cpu_ms: Optional[float]  # the training process' CPU per step
    trainer_cpu_basis: str
    usable_cpus: Optional[int]
    trainer_threads: Optional[int]
    batches: int  # batches the workers timed
    unprofiled_steps: int

    @property
    def oversubscribed(self) -> bool:
        """The workers and the trainer's threads are more than the CPUs the process may use."""
        if not self.usable_cpus or self.trainer_threads is None:
            return False
        return self.workers + self.trainer_threads > self.usable_cpus


@dataclass(frozen=True)
class InputPipeline:
    """The input pipeline without the profiler (the capture's timed fetches, tracekit.capture.loader)
    beside what the profiled window shows (tracekit.analysis.loader). Per-step samples inside: the
    unprofiled timed steps of every rank, in order; every figure is derived from them."""

    unprofiled_step_ms: tuple[float, ...]
    unprofiled_wait_ms: tuple[float, ...]  # host time getting each step's batch, same steps
    profiled_step_ms: float  # the trace's mean step (the analysis' step windows)
    profiled_wait_ms: float  # the trace's DataLoader __next__ time per profiled step
    active_steps: int  # the schedule's active steps per cycle
    loader: Mapping[str, Any] = field(default_factory=dict)  # the manifest's `loader` (its settings)
    warnings: tuple[str, ...] = ()  # why the profiled window cannot show a loader stall
    steady: Optional[SteadyState] = None  # the steady state from the workers' own timings

    @property
    def unprofiled_step_median_ms(self) -> float:
        return statistics.median(self.unprofiled_step_ms) if self.unprofiled_step_ms else 0.0

    @property
    def unprofiled_wait_median_ms(self) -> float:
        return statistics.median(self.unprofiled_wait_ms) if self.unprofiled_wait_ms else 0.0

    @property
    def unprofiled_step_mean_ms(self) -> float:
        """The throughput view: a loader's stalls come in bursts (3 workers finishing together: one
        400 ms step after two of 25 ms), so the mean, not the median, is the step the job runs at."""
        return statistics.fmean(self.unprofiled_step_ms) if self.unprofiled_step_ms else 0.0

    @property
    def unprofiled_wait_mean_ms(self) -> float:
        return statistics.fmean(self.unprofiled_wait_ms) if self.unprofiled_wait_ms else 0.0

    @property
    def unprofiled_wait_share(self) -> float:
        """The unprofiled steps' loader wait over their time (0..1)."""
        total = sum(self.unprofiled_step_ms)
        return min(sum(self.unprofiled_wait_ms) / total, 1.0) if total > 0 else 0.0

    @property
    def profiled_wait_share(self) -> float:
        return min(self.profiled_wait_ms / self.profiled_step_ms, 1.0) if self.profiled_step_ms > 0 else 0.0

    @property
    def hidden(self) -> bool:
        """The profiled window cannot show a loader stall (see `warnings`)."""
        return bool(self.warnings)

    @property
    def unmeasured(self) -> bool:
        """A stall can hide and nothing measured the loop without the profiler (a trace made without
        tracekit's capture): the step without the profiler is unknown, not a profiler cost away."""
        return self.hidden and not self.unprofiled_step_ms and self.steady is None

    def to_json(self) -> dict[str, Any]:
        return {
            **_plain(self),
            "unprofiled_step_mean_ms": self.unprofiled_step_mean_ms,
            "unprofiled_wait_mean_ms": self.unprofiled_wait_mean_ms,
            "unprofiled_step_median_ms": self.unprofiled_step_median_ms,
            "unprofiled_wait_median_ms": self.unprofiled_wait_median_ms,
            "unprofiled_wait_share": self.unprofiled_wait_share,
            "profiled_wait_share": self.profiled_wait_share,
            "hidden": self.hidden,
            "unmeasured": self.unmeasured,
            "steady": None
            if self.steady is None
            else {**_plain(self.steady), "oversubscribed": self.steady.oversubscribed},
        }


@dataclass(frozen=True)
class FigureSpread:
    """One per-step figure of a job's devices (ms per step of each device) across its devices."""

    figure: str  # "step", "busy", "idle: <cause>", "collective wait"
    median_ms: float
    p90_ms: float
    max_ms: float
    max_rank: int  # the rank of the device with the max


@dataclass(frozen=True)
class StragglerRank:
    """A rank other devices wait for in collectives (their `straggler_rank`)."""

    rank: int
    waited_on_by: int  # devices that name it
    wait_ms_per_step_total: float  # their collective wait per step, summed
    wait_ms_per_step_median: float


@dataclass(frozen=True)
class OutlierRank:
    """A device whose `figure` differs from the rest of the job (tracekit.analysis.ranks)."""

    rank: int
    device: int
    figure: str
    value_ms: float
    median_ms: float
    others: tuple[str, ...] = ()  # other figures on which it differs too


@dataclass(frozen=True)
class JobSummary:
    """A multi-rank job in a few figures (tracekit.analysis.ranks; derived from the devices)."""

    ranks: int
    devices: int
    steps: int  # step numbers
    step_median_ms: float  # per step number the slowest rank's step; median over steps
    step_max_ms: float
    slowest_rank: Optional[int]  # the rank slowest in most steps
    spreads: tuple[FigureSpread, ...] = ()
    stragglers: tuple[StragglerRank, ...] = ()
    outliers: tuple[OutlierRank, ...] = ()


@dataclass(frozen=True)
class CommStep:
    """One step of a rank's communication (tracekit.analysis.comm): ns in the step."""

    step: int
    step_ns: int
    compute_ns: int  # GPU: non-collective device work; CPU: the step less the collective waits
    comm_ns: int  # collectives in flight
    hidden_ns: int  # collectives in flight while the rank computed
    exposed_ns: int  # collectives in flight while it did not (GPU: the device; CPU: the step thread)
    exposed_wait_ns: int = 0  # of the exposed: waiting for a late peer (the rest is the transfer)

    @property
    def exposed_transfer_ns(self) -> int:
        return self.exposed_ns - self.exposed_wait_ns


@dataclass(frozen=True)
class CommBucket:
    """The i-th collective of a name in a step on one rank (a DDP bucket): medians over its steps."""

    name: str
    index: int
    instances: int
    elements: Optional[int]  # input elements, where the trace records them
    transfer_ms: float  # the fastest rank's duration of the same collective
    wait_ms: float  # this rank's duration beyond the fastest's: waiting for a late peer
    exposed_ms: float  # its time in flight while the rank did not compute


@dataclass(frozen=True)
class CommRank:
    """A rank's (device's) communication, step by step; device -1: a CPU backend on the rank's host."""

    rank: int
    device: int
    steps: tuple[CommStep, ...] = ()
    buckets: tuple[CommBucket, ...] = ()
    straggler_rank: Optional[int] = None  # the rank it waited on most

    def ms_per_step(self, figure: str) -> float:
        n = max(len(self.steps), 1)
        return sum(getattr(s, figure) for s in self.steps) / n / 1e6


@dataclass(frozen=True)
class SlowRank:
    """The rank the others wait for, and the figure in which it differs from them most (why)."""

    rank: int
    waited_on_ms_per_step: float  # the other ranks' exposed wait for late peers, per step (median)
    figure: str  # "host: interpreter", "idle: interpreter", "busy", ...
    value_ms_per_step: float
    others_ms_per_step: float  # the other ranks' median of the same figure


@dataclass(frozen=True)
class Communication:
    """Every rank's communication and the job's slow rank (tracekit.analysis.comm)."""

    ranks: tuple[CommRank, ...] = ()
    slow_rank: Optional[SlowRank] = None
    matched: int = 0  # collectives matched across ranks
    clock_skew: bool = False  # matched ends too far apart: the waits are not split


@dataclass(frozen=True)
class SavingsInfo:
    """Whether the devices' `savings_ms_per_step` were computed, and on what they rest: the profiler cost
    per recorded event the unprofiled savings assume and where it came from (manifest | flag | default),
    or why they were not computed (`skipped`: a job analysed rank by rank). In the JSON these are the
    `parameters` keys `savings_profiler_cost_us_per_event`, `savings_profiler_cost_source` and
    `savings_skipped` (a stable contract; `Report.from_json` reads them back into this field)."""

    profiler_cost_us_per_event: Optional[float] = None
    profiler_cost_source: Optional[str] = None
    skipped: Optional[str] = None

    @property
    def computed(self) -> bool:
        return self.skipped is None

    def to_parameters(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"savings_skipped": self.skipped}
        return {
            "savings_profiler_cost_us_per_event": self.profiler_cost_us_per_event,
            "savings_profiler_cost_source": self.profiler_cost_source,
        }

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Optional[SavingsInfo]:
        if "savings_skipped" in parameters:
            return cls(skipped=str(parameters["savings_skipped"]))
        if "savings_profiler_cost_us_per_event" in parameters:
            cost = parameters["savings_profiler_cost_us_per_event"]
            return cls(cost, parameters.get("savings_profiler_cost_source"))
        return None


_SAVINGS_KEYS = ("savings_profiler_cost_us_per_event", "savings_profiler_cost_source", "savings_skipped")


@dataclass(frozen=True)
class Report:
    """Everything `tracekit analyze` found in one capture."""

    capture: Mapping[str, Any]  # the manifest (or what the trace metadata tells), plus sources
    devices: tuple[DeviceReport, ...]
    host: HostReport
    top_gaps: tuple[IdleGap, ...] = ()
    sync_sources: tuple[SyncSource, ...] = ()
    runtime_calls: tuple[RuntimeCall, ...] = ()  # the `runtime` idle by call, largest first
    kernel_stats: tuple[KernelStat, ...] = ()
    op_stats: tuple[OpStat, ...] = ()
    # record_function regions on the step threads, as op_stats (`Optimizer.zero_grad#SGD.zero_grad`)
    region_stats: tuple[OpStat, ...] = ()
    gap_histogram: Optional[GapHistogram] = None
    dataloader: Optional[DataLoaderInfo] = None
    advice: tuple[Advice, ...] = ()
    profiler_overhead: Optional[ProfilerOverhead] = None
    compiled: Optional[CompiledSummary] = None  # torch.compile's code in the steps (analysis/compiled.py)
    parameters: Mapping[str, Any] = field(default_factory=dict)  # thresholds used, with units
    # the input pipeline measured without the profiler (None: the capture timed no fetches)
    input_pipeline: Optional[InputPipeline] = None
    job: Optional[JobSummary] = None  # jobs of several ranks: the figures across ranks
    # None: the savings were not asked for (tracekit.api.analyze adds them; DeviceReport.savings_ms_per_step)
    savings: Optional[SavingsInfo] = None
    step_rules: tuple[StepRule, ...] = ()  # how each rank's steps were found
    graph_captures: tuple[GraphCaptureInfo, ...] = ()  # ranks whose trace records a graph capture
    no_work: tuple[NoWorkInfo, ...] = ()  # ranks with stretches of no work between their steps
    # each device's memory over the steps, where the trace has memory events (tracekit.analysis.memory)
    memory: tuple[DeviceMemory, ...] = ()
    # collectives on each rank (None: the trace has none)
    communication: Optional[Communication] = None
    version: int = REPORT_VERSION
    # In-memory evidence for check_invariants and `analyze --store` (not part of the JSON):
    # idle pieces (rank, device, step, ts_ns, dur_ns, cause) and busy intervals (rank, device, ts_ns, dur_ns)
    # as pandas DataFrames. None on a Report read back from JSON.
    idle_intervals: Any = field(default=None, compare=False, repr=False)
    busy_intervals: Any = field(default=None, compare=False, repr=False)
    # The invariants checked where the intervals were (a job's workers: tracekit.scale.job).
    checked: tuple = field(default=(), compare=False, repr=False)

    @property
    def cpu_only(self) -> bool:
        return not self.devices

    @property
    def ranks(self) -> list[int]:
        """The ranks the report covers (of its devices, else of its host steps)."""
        return sorted({d.rank for d in self.devices} or {h.rank for h in self.host.steps})

    def to_json(self) -> dict[str, Any]:
        """The JSON report (DESIGN.md contract): plain dicts/lists/numbers, ready for json.dumps."""
        from tracekit.version import __version__

        return {
            "tracekit_report": self.version,
            "tracekit_version": __version__,
            "capture": dict(self.capture),
            "cpu_only": self.cpu_only,
            "devices": [d.to_json() for d in self.devices],
            "host": self.host.to_json(),
            "sync_sources": [s.to_json() for s in self.sync_sources],
            "runtime_calls": [c.to_json() for c in self.runtime_calls],
            "top_gaps": [_plain(g) for g in self.top_gaps],
            "kernel_stats": [_plain(k) for k in self.kernel_stats],
            "op_stats": [
                {**_plain(o), "calls": o.calls, "us_per_call": o.us_per_call} for o in self.op_stats
            ],
            "region_stats": [
                {**_plain(o), "calls": o.calls, "us_per_call": o.us_per_call} for o in self.region_stats
            ],
            "gap_histogram": _plain(self.gap_histogram) if self.gap_histogram else None,
            "dataloader": _plain(self.dataloader) if self.dataloader else None,
            "advice": [_plain(a) for a in self.advice],
            "profiler_overhead": (
                {
                    **_plain(self.profiler_overhead),
                    "overhead_ratio": self.profiler_overhead.overhead_ratio,
                    "not_representative": self.profiler_overhead.not_representative,
                }
                if self.profiler_overhead
                else None
            ),
            "parameters": {**self.parameters, **(self.savings.to_parameters() if self.savings else {})},
            "compiled": _plain(self.compiled) if self.compiled is not None else None,
            **({"input_pipeline": self.input_pipeline.to_json()} if self.input_pipeline else {}),
            **({"job": _plain(self.job)} if self.job is not None else {}),
            "step_rules": [_plain(r) for r in self.step_rules],
            "graph_captures": [_plain(g) for g in self.graph_captures],
            "no_work": [_plain(n) for n in self.no_work],
            **({"memory": [_memory_json(m) for m in self.memory]} if self.memory else {}),
            **({"communication": _comm_json(self.communication)} if self.communication is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Report:
        """Rebuild a Report from `to_json()` output (derived summary fields are recomputed, not read)."""
        import msgspec

        from tracekit.errors import CaptureFileError

        version = doc.get("tracekit_report")
        if version != REPORT_VERSION:
            raise CaptureFileError(
                f"stored analysis has report version {version!r}, this tracekit reads {REPORT_VERSION}; "
                "re-run `tracekit analyze --store`"
            )
        fields = dict(doc)
        fields["version"] = fields.pop("tracekit_report")
        fields["devices"] = [_device_fields(d) for d in doc.get("devices", [])]
        host = dict(doc.get("host") or {})
        fields["host"] = {"steps": host.get("steps", [])}
        parameters = dict(doc.get("parameters") or {})
        savings = SavingsInfo.from_parameters(parameters)
        fields["parameters"] = {k: v for k, v in parameters.items() if k not in _SAVINGS_KEYS}
        fields["savings"] = None if savings is None else _plain(savings)
        try:
            return msgspec.convert(fields, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise CaptureFileError(f"stored analysis does not match the report model ({exc})") from None


def _comm_json(c: Communication) -> dict[str, Any]:
    doc = _plain(c)
    for r, rank in zip(doc["ranks"], c.ranks):
        r["ms_per_step"] = {
            f: rank.ms_per_step(f + "_ns")
            for f in ("step", "compute", "comm", "hidden", "exposed", "exposed_wait", "exposed_transfer")
        }
    return doc


def _device_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    keep = (
        "rank",
        "device",
        "samples",
        "straggler_rank",
        "peak_memory_bytes",
        "samples_per_step",
        "name",
        "savings_ms_per_step",
    )
    out = {k: d[k] for k in keep if k in d}
    if "busy_after_last_step_ms" in d:
        out["busy_after_last_step_ns"] = int(round(d["busy_after_last_step_ms"] * 1e6))
    return out


def _memory_json(m: DeviceMemory) -> dict[str, Any]:
    """A device's memory as the JSON report holds it: its fields, and `peak` (the step whose peak is
    highest, repeated for readers that want only it). `Report.from_json` reads the fields back."""
    doc = _plain(m)
    doc["peak"] = None if m.peak is None else _plain(m.peak)
    return doc


def _plain(obj: Any) -> Any:
    """A dataclass as plain JSON-able dicts (Mappings become dicts, tuples lists)."""
    return _jsonable(obj)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _jsonable(x: Any) -> Any:
    """What `asdict` then a JSON conversion would give, in one pass (a report of 256 ranks holds
    thousands of samples: asdict's deep copies took half of `analyze --json`)."""
    if is_dataclass(x) and not isinstance(x, type):
        names = _FIELD_NAMES.get(type(x))
        if names is None:
            names = _FIELD_NAMES.setdefault(type(x), tuple(f.name for f in fields(x)))
        return {n: _jsonable(getattr(x, n)) for n in names}
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Enum):
        return x.value
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        return x.item()
    return x
