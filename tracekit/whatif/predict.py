"""`whatif(capture, scenario)`: build the graph, replay it unchanged and changed, with and without the
profiler's cost, and attribute the predicted timeline's idle time (pure: returns a `WhatIfResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Optional

import numpy as np

from tracekit.analysis import intervals as iv
from tracekit.analysis.attribution import DEFAULT_SYNC_TOLERANCE_NS
from tracekit.analysis.events import FRAME_COLUMNS, load_frames
from tracekit.analysis.host import Threads, dataloader_kinds
from tracekit.analysis.model import ProfilerOverhead
from tracekit.analysis.pipeline import _capture_info as info
from tracekit.analysis.pipeline import idle_by_device
from tracekit.analysis.steps import cycle_starts_of, median_ns, spread_ns
from tracekit.whatif.cudagraph import GRAPH_GAP_NS, GRAPH_GAP_RANGE_NS, GRAPH_LAUNCH_NS
from tracekit.whatif.graph import EDGE_KINDS, Graph, build_graph, keep_sync_records, recorded_stream_waits
from tracekit.whatif.loader import WAITED_MIN_SHARE, LoaderPrediction, Producer, predict, producers
from tracekit.whatif.model import DevicePrediction, Unprofiled, WhatIfResult
from tracekit.whatif.profiler import (
    DEFAULT_COST_US,
    MEASURED_RANGE_US,
    CostEstimate,
    default_note,
    estimate_cost,
    untrusted_default,
)
from tracekit.whatif.replay import Factors, StepModel, StepTimes, factors, replay, weights
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions
from tracekit.whatif.timeline import replayed_frames

IDENTITY = WhatIfOptions()
NO_FETCH = WhatIfOptions(set={"dataloader": 0.0})  # the consumer of the producer model: no fetch time
# The capture's columns the replay reads (the analysis frames, the recorded stream waits, the peak memory)
# and the Chrome trace of the predicted timeline writes: `tracekit whatif` loads no others.
COLUMNS = (
    *FRAME_COLUMNS,
    "sync_kind",
    "wait_stream",
    "total_allocated",
    "external_id",
)


# The host events' columns that the scenarios naming host events read (replay.factors).
HOST_EVENT_COLUMNS = ("rank", "pid", "tid", "ts", "end", "state", "family", "cat", "name", "input_dims")


@dataclass
class Replayer:
    """A capture's graph, ready to replay scenarios (built once; each replay is one pass)."""

    capture: Any
    graph: Graph
    steps: StepModel
    observed: StepTimes
    frames: Any = None  # the analysis frames the graph was built from (the predicted timeline's base)
    # each rank's input pipeline, from the unprofiled steps' timed fetches (tracekit.whatif.loader)
    producers: dict = field(default_factory=dict)
    unchanged: Optional[StepTimes] = None  # the unchanged replay's step times, once made (`replayed`)
    # without the frames: the host events' columns the --ops / --cuda-graphs / --pin-memory factors read
    host_events: Any = None
    loader_iterator: Optional[str] = None  # the trace's DataLoader iterator kind (the most frequent)

    @property
    def replayed(self) -> StepTimes:
        """The step times of the unchanged replay (the replay's self-check against `observed`): made on
        first use, unless a caller that replays several scenarios in one pass gave it (`unchanged`)."""
        if self.unchanged is None:
            self.unchanged = self.steps.times(replay(self.graph, weights(self.graph, IDENTITY)))
        return self.unchanged

    @classmethod
    def of(
        cls,
        capture: Any,
        frames: Any = None,
        threads: Optional[Threads] = None,
        *,
        release: bool = False,
        keep_frames: bool = True,
        unchanged: bool = True,
        keep_host: bool = False,
    ) -> Replayer:
        """`frames` and `threads`: the capture's analysis frames and host threads when the caller has
        them already (`tracekit analyze` does), else they are loaded here. `release`: the capture was
        read for this replay alone, and its table may go once the frames hold it (all but the sync
        records the graph reads: `capture.table` is then those rows only, and the predicted timeline
        cannot be written from it). `keep_frames=False`: the Replayer does not keep the frames (they
        go with the caller's references): it then neither attributes a predicted timeline nor takes
        --ops / --cuda-graphs scenarios, as the savings need neither. `unchanged=False`: the unchanged
        replay is left to the caller (the savings make it in one of their passes) or to first use.
        `keep_host`: without the frames, keep the host events' few columns those scenarios read (the
        advice's predictions replay them)."""
        if frames is not None:
            fr = frames
        else:
            let_go = partial(keep_sync_records, capture) if release else None
            fr = load_frames(
                capture.table,
                cycle_starts_of(capture.meta),
                release=let_go,
                marker=getattr(capture, "step_marker", None),
            )
        th = threads if threads is not None else Threads(fr.host, fr.steps)
        g = build_graph(fr, th, recorded_stream_waits(capture.table))
        kinds = dataloader_kinds(fr.host)
        iterator = min(kinds[0], key=lambda k: (-kinds[0][k], k)) if kinds and kinds[0] else None
        kept = fr if keep_frames else None
        thin = fr.host[list(HOST_EVENT_COLUMNS)] if keep_host and not keep_frames else None
        del fr, th  # the graph holds what it needs: the threads (and frames not kept) go with these
        sm = StepModel(g)
        manifest = (getattr(capture, "manifest", None) or {}) if capture is not None else {}
        rp = cls(
            capture,
            g,
            sm,
            sm.times(g.obs),
            kept,
            producers(manifest),
            host_events=thin,
            loader_iterator=iterator,
        )
        if unchanged:
            rp.replayed  # noqa: B018 (made now: a whatif lets the graph's edges go after its replays)
        return rp

    def check(self, scenario: WhatIfOptions) -> Factors:
        """The scenario's factors on this capture's names; ScenarioError for a rank, kernel pattern or op
        pattern not in the capture."""
        ranks = sorted({k[0] for k in self.steps.keys})
        for r in scenario.rank_host:
            if r not in ranks:
                raise ScenarioError(
                    f"--rank-host {r}=...: the capture has no rank {r}; "
                    f"its ranks: {', '.join(map(str, ranks))}"
                )
        host = self.frames.host if self.frames is not None else self.host_events
        return factors(self.graph, host, scenario)

    def run(self, scenario: WhatIfOptions, cost_us: float = 0.0, f: Factors | None = None) -> np.ndarray:
        if f is None:
            f = self.check(scenario)
        return replay(self.graph, weights(self.graph, scenario, cost_ns=cost_us * 1000.0, f=f))

    def step_ms(self, scenario: WhatIfOptions, cost_us: float = 0.0, f: Factors | None = None) -> float:
        """The job's step time (the slowest device's median step, ms) under a scenario."""
        return slowest_ms(self.steps.times(self.run(scenario, cost_us, f)).dur)

    def unprofiled_target(self, flag_ms: Optional[float]) -> tuple[str, Optional[float]]:
        """(source, unprofiled step ms): the flag, else the capture manifest's median (`tracekit capture`
        times steps without the profiler, with CUDA events at step boundaries, before the profiled ones)."""
        if flag_ms is not None:
            return "flag", float(flag_ms)
        if self.producers:  # the consumer's time: the unprofiled step less its wait for the batch
            return "manifest", max(p.consumer_ms for p in self.producers.values())
        m = (self.capture.manifest or {}) if self.capture is not None else {}
        un, scale = m.get("unprofiled_step_ns"), 1e-6
        if not un:
            un, scale = m.get("unprofiled_step_ms"), 1.0
        if not un:
            return "default", None
        return "manifest", float(np.median(np.asarray(un, dtype=np.float64))) * scale

    def cost(
        self, flag_ms: Optional[float], default_us: float = DEFAULT_COST_US
    ) -> tuple[str, Optional[float], CostEstimate]:
        """(source, unprofiled step ms, the profiler cost): fitted where the unprofiled step identifies it,
        else the measured default (tracekit.whatif.profiler)."""
        source, target = self.unprofiled_target(flag_ms)
        if target is None:
            note = default_note(default_us)
            untrusted = untrusted_default(self.loader_iterator)
            return (
                source,
                None,
                CostEstimate(default_us, None, None, f"{note}; {untrusted}" if untrusted else note),
            )
        paced = bool(self.producers) and flag_ms is None
        base = NO_FETCH if paced else IDENTITY
        af = self.check(base)
        # the producer's consumer is a median (tracekit.whatif.loader), as every step is (step_ms)
        return (
            source,
            target,
            estimate_cost(lambda c: self.step_ms(base, c, af), target, default_us=default_us),
        )

    def unprofiled(
        self, scenario: WhatIfOptions, cost_us: float, f: Factors | None = None
    ) -> tuple[StepTimes, list[LoaderPrediction]]:
        """The step times without the profiler under `scenario`: the replay with the cost removed, and on
        ranks with a producer (tracekit.whatif.loader) each step max(consumer + fetch, producer period)."""
        if f is None:
            f = self.check(scenario)
        times = self.steps.times(self.run(scenario, cost_us, f))
        if not self.producers:
            return times, []
        consumer = self.steps.times(self.run(_no_fetch(scenario), cost_us))
        fetch = self._trace_fetch_ms(cost_us)
        dl = scenario.cause_factor("dataloader")
        preds = {}
        for rank, p in self.producers.items():
            preds[rank] = predict(p, dl, scenario.loader_workers, fetch.get(rank))
        dur = []
        for key, c in zip(consumer.keys, consumer.dur):
            lp = preds.get(key[0])
            if lp is None:
                dur.append(times.dur[consumer.keys.index(key)])
                continue
            # steady state: every step takes what the median consumer and the producer allow (a step
            # that spans the profiler's pause between cycles is no consumer's work)
            ms = np.full(c.size, lp.step_ms(float(np.median(c)) / 1e6), dtype=np.float64)
            dur.append(np.round(ms * 1e6).astype(np.int64))
        return replace(times, dur=dur), [preds[r] for r in sorted(preds)]

    def _trace_fetch_ms(self, cost_us: float) -> dict[int, float]:
        """Per rank, a ready batch's fetch cost as the replay sees it: of the profiled steps whose fetches
        took less than WAITED_MIN_SHARE of the step (they did not wait), the cheapest difference between
        the replay with and without its fetches (ms). Ranks whose every fetch waited are left out."""
        with_fetch = self.steps.times(self.run(IDENTITY, cost_us))
        without = self.steps.times(self.run(NO_FETCH, cost_us))
        out: dict[int, float] = {}
        for key, a, b in zip(with_fetch.keys, with_fetch.dur, without.dur):
            if not a.size or a.size != b.size:
                continue
            diff = np.maximum(a - b, 0)
            ready = diff[diff < WAITED_MIN_SHARE * np.maximum(a, 1)]
            if ready.size:
                ms = float(ready.min()) / 1e6
                out[key[0]] = min(out.get(key[0], ms), ms)
        return out


def _no_fetch(scenario: WhatIfOptions) -> WhatIfOptions:
    return replace(scenario, set={**scenario.set, "dataloader": 0.0})


def whatif(
    capture: Any,
    scenario: WhatIfOptions,
    *,
    unprofiled_step_ms: Optional[float] = None,
    default_cost_us: float = DEFAULT_COST_US,
    attribute: bool = True,
    replayer: Optional[Replayer] = None,
    last_use: bool = False,
) -> tuple[WhatIfResult, np.ndarray]:
    """Predict the capture's step times under `scenario`, profiled and unprofiled. Returns the result
    and the predicted (profiled) node times, for `timeline.replayed_table`. `last_use`: the replayer
    replays nothing after this (`tracekit whatif` without --trace): its graph's edges go once the
    replays are done, before the predicted timeline's attribution (the command's peak)."""
    rp = replayer or Replayer.of(capture)
    af = rp.check(scenario)
    pred_rep = rp.run(scenario, 0.0, af)
    pred = rp.steps.times(pred_rep)
    source, target, est = rp.cost(unprofiled_step_ms, default_cost_us)
    if unprofiled_step_ms is None:
        un_pred, loader = rp.unprofiled(scenario, est.cost_us, af)
        un_base, _ = rp.unprofiled(IDENTITY, est.cost_us)
        target = _manifest_step_ms(rp) if loader else target
    else:  # the flag gives the whole step: no producer model
        un_pred, loader = rp.steps.times(rp.run(scenario, est.cost_us, af)), []
        un_base = rp.steps.times(rp.run(IDENTITY, est.cost_us))
    _check_finite(scenario, pred, un_pred)

    # how much the prediction without the profiler depends on its cost: replayed at both ends of the
    # range of costs fitted on real captures, as the prediction is (a producer paces it where there is one)
    def at(c: float) -> float:
        if unprofiled_step_ms is None:
            return slowest_ms(rp.unprofiled(scenario, c, af)[0].dur)
        return slowest_ms(rp.steps.times(rp.run(scenario, c, af)).dur)

    sensitivity = tuple(at(c) for c in MEASURED_RANGE_US)
    graph_info = _graph_info(rp.graph, af)
    if last_use:
        rp.graph.let_edges_go()
    idle = _attribute(rp, pred_rep) if attribute else {}
    devices = []
    for i, key in enumerate(pred.keys):
        devices.append(
            DevicePrediction(
                rank=key[0],
                device=key[1],
                steps=tuple(int(s) for s in pred.steps[i]),
                observed_step_ns=tuple(int(x) for x in rp.observed.dur[i]),
                replayed_step_ns=tuple(int(x) for x in rp.replayed.dur[i]),
                predicted_step_ns=tuple(int(x) for x in pred.dur[i]),
                observed_host_window_ns=tuple(int(x) for x in rp.observed.host_dur[i]),
                predicted_busy_ns=_busy(rp, key, pred_rep, pred, i),
                predicted_idle_ns_per_step=idle.get(key, {}),
                unprofiled_predicted_step_ns=tuple(int(x) for x in un_pred.dur[i]),
            )
        )
    unprofiled = Unprofiled(
        source=source,
        observed_step_ms=target,
        replayed_step_ms=slowest_ms(un_base.dur),
        predicted_step_ms=slowest_ms(un_pred.dur),
        predicted_step_ms_by_cost=tuple(zip(MEASURED_RANGE_US, sensitivity)),
        profiler_cost_us_per_event=est.cost_us,
        cost_range_us=(est.low_us, est.high_us)
        if est.low_us is not None and est.high_us is not None
        else None,
        note=est.note,
        loader=tuple(_loader_json(lp, rp.producers[lp.rank], un_pred) for lp in loader),
    )
    result = WhatIfResult(
        capture=_capture_info(capture),
        scenario=scenario.to_json(),
        scenario_text=scenario.describe(),
        devices=tuple(devices),
        unprofiled=unprofiled,
        graph=graph_info,
        notes=tuple(_notes(rp, devices) + _factor_notes(af) + _loader_notes(rp, scenario, devices)),
    )
    return result, pred_rep


def _loader_notes(rp: Replayer, scenario: WhatIfOptions, devices: list[DevicePrediction]) -> list[str]:
    """`--loader-workers N` where the capture cannot support it: no rank timed its fetches (a trace, or
    a capture by a tracekit before `tracekit.capture.loader`), or its loader has no worker count (not a
    DataLoader). The prediction then leaves the input pipeline as the trace shows it: said, not a
    silent +0.0 %."""
    n = scenario.loader_workers
    if n is None:
        return []
    ranks = sorted({d.rank for d in devices})
    untimed = [r for r in ranks if r not in rp.producers]
    unknown = [r for r in ranks if r in rp.producers and rp.producers[r].workers is None]
    out = []
    if untimed:
        which = "this capture" if len(untimed) == len(ranks) else f"rank(s) {', '.join(map(str, untimed))}"
        out.append(
            f"--loader-workers {n}: cannot tell: {which} never timed its DataLoader fetches (only "
            "`tracekit capture` records them, in the manifest), so the effect of the worker count is "
            "not in this prediction, which keeps the input pipeline as the trace shows it"
        )
    if unknown:
        out.append(
            f"--loader-workers {n}: cannot tell for rank(s) {', '.join(map(str, unknown))}: its loader "
            "is not a DataLoader with a known worker count; the prediction keeps its input pipeline"
        )
    return out


def _manifest_step_ms(rp: Replayer) -> Optional[float]:
    """The unprofiled step time of the manifest, loader waits included: the mean, the step a producer-paced
    job runs at (a loader's stalls come in bursts: tracekit.analysis.loader)."""
    m = (rp.capture.manifest or {}) if rp.capture is not None else {}
    un = m.get("unprofiled_step_ms")
    return float(np.mean(np.asarray(un, dtype=np.float64))) if un else None


def _loader_json(lp: LoaderPrediction, p: Producer, un_pred: StepTimes) -> dict:
    """The producer of one rank, observed and under the scenario, for the result's `unprofiled.loader`."""
    consumer = [
        float(d.mean()) / 1e6 for k, d in zip(un_pred.keys, un_pred.dur) if k[0] == lp.rank and d.size
    ]
    return {
        "rank": lp.rank,
        "workers": lp.workers,
        "predicted_workers": lp.predicted_workers,
        "period_ms": lp.period_ms,
        "predicted_period_ms": lp.predicted_period_ms,
        "serial_ms": lp.serial_ms,
        "fetch_ms": lp.fetch_ms,
        "consumer_ms": p.consumer_ms,
        "waited_steps": p.waited_steps,
        "steps": p.steps,
        "paces_step": bool(consumer)
        and lp.predicted_period_ms is not None
        and lp.predicted_period_ms >= max(consumer) - 1e-9,
        "note": lp.note,
    }


def slowest_ms(durations: list) -> float:
    """The slowest device's step (median over its steps, ms) of per-device step-time arrays."""
    return max((median_ns(d) / 1e6 for d in durations if d.size), default=0.0)


def _check_finite(scenario: WhatIfOptions, *times: StepTimes) -> None:
    """A predicted step that is negative, or within a factor 2 of int64's end, has overflowed (or may
    have) the replay's int64 ns (factors multiply: --kernels and --ops on one kernel): never print it."""
    if any(d.size and (int(d.min()) < 0 or int(d.max()) > 2**62) for t in times for d in t.dur):
        raise ScenarioError(
            f"{scenario.describe()}: the predicted times overflow (beyond 2^63 ns); use smaller factors"
        )


def _busy(rp: Replayer, key, rep: np.ndarray, t: StepTimes, i: int) -> int:
    """Device busy time (union over streams) inside the predicted steps."""
    g = rp.graph
    d = g.device
    if key[1] < 0 or not len(d) or not t.dur[i].size:
        return 0
    m = np.flatnonzero((d["rank"].to_numpy() == key[0]) & (d["device"].to_numpy() == key[1]))
    s, e = iv.union(rep[g.device_base + 2 * m], rep[g.device_base + 2 * m + 1])
    start, end = t.bounds[i]
    cycle = rp.steps.win[key[0]][4]
    # per profiler cycle: cycles are separate timelines, a changed one may overlap the next
    return sum(
        int(iv.total_overlap(s, e, start[cycle == c], end[cycle == c]).sum()) for c in np.unique(cycle)
    )


def _attribute(rp: Replayer, rep: np.ndarray) -> dict:
    """The attribution (tracekit analyze) of the predicted timeline: idle ns per step by cause. It runs on
    the capture's own frames at the replayed times (no second copy of the capture's table)."""

    if rp.frames is None or not len(rp.graph.device):
        return {}
    return idle_by_device(replayed_frames(rp.frames, rp.graph, rep), DEFAULT_SYNC_TOLERANCE_NS)


def _graph_info(g: Graph, f: Factors | None = None) -> dict:
    kinds, counts = np.unique(g.kind, return_counts=True)
    d = dict(g.diagnostics)
    d["nodes"] = int(g.obs.size)
    d["edges"] = {EDGE_KINDS[int(k)]: int(c) for k, c in zip(kinds, counts)}
    if f is not None and f.regions is not None:
        d["cuda_graphs"] = f.regions.to_json()
    return d


def _factor_notes(f: Factors) -> list[str]:
    """What the scenario's knobs assumed and left out (tracekit.whatif.knobs), and what a --cuda-graphs
    prediction assumed and kept (DESIGN.md, "What if: CUDA graphs")."""
    return list(f.notes) + _graph_notes(f)


def _graph_notes(f: Factors) -> list[str]:
    """What a --cuda-graphs prediction assumed and kept (DESIGN.md, "What if: CUDA graphs")."""
    r = f.regions
    if r is None:
        return []
    lo, hi = GRAPH_GAP_RANGE_NS
    per_graph = r.kernels / max(r.regions, 1)
    out = [
        f"CUDA graphs: {r.regions} graph(s) ({r.region_text}), {r.kernels} device activities inside; their "
        f"interpreter, framework and launch time removed, one graph launch ({GRAPH_LAUNCH_NS / 1e3:g} µs) "
        f"each, kernels {GRAPH_GAP_NS / 1e3:g} µs apart (the graph-replay gap: {lo / 1e3:g}-{hi / 1e3:g} µs "
        f"on H200 machines, so ±{per_graph * (hi - lo) / 2e6:.3f} ms per graph here); kernel durations "
        "kept (fusion, what torch.compile changes, cannot be predicted from a trace)"
    ]
    if r.kernels_outside:
        out.append(f"CUDA graphs: {r.kernels_outside} device activities lie outside every region (unchanged)")
    if r.syncs:
        out.append(
            f"CUDA graphs: the regions hold {r.syncs} blocking call(s), kept as they are: a graph cannot "
            "capture a sync (split the region around them)"
        )
    if r.dataloader_fetches:
        out.append(
            f"CUDA graphs: the regions hold {r.dataloader_fetches} DataLoader fetch(es), kept; the "
            "Python that moves each batch to the device and into the graph's static inputs also stays "
            "outside a graph, and is not in this prediction: a lower bound (H200 dataloader_train: "
            "0.25 ms predicted, 0.77 ms measured as a graph)"
        )
    return out


def _notes(rp: Replayer, devices: list[DevicePrediction]) -> list[str]:
    d = rp.graph.diagnostics
    out = []
    rep = _representative(rp, devices)
    if rep:
        out.append(rep)
    err = max((abs(x.replay_error) for x in devices), default=0.0)
    if err > 0.02:
        why = []
        if d.get("unexplained_waits"):
            why.append(
                f"{d['unexplained_waits']} waits with no cause in the trace "
                f"({d['unexplained_wait_ns'] / 1e6:.2f} ms in all) were left out"
            )
        if d.get("clock_skew"):
            why.append("the ranks' clocks disagree (collectives matched without cross-rank edges)")
        if str(d.get("stream_waits", "")).startswith("inferred"):
            why.append("no stream-wait records: cross-stream waits inferred from timing")
        out.append(f"replay error {err:.1%}: " + ("; ".join(why) or "a dependency the graph lacks"))
    if d.get("clock_skew"):
        out.append(
            f"clock skew: one collective's ends on different ranks lie "
            f"{d['collective_end_spread_ns'] / 1e3:.0f} µs apart (median): ranks replayed without the "
            "collective dependency"
        )
    return out


def _representative(rp: Replayer, devices: list[DevicePrediction]) -> Optional[str]:
    """The analysis' representativeness check (model.ProfilerOverhead) on the slowest device's observed
    steps against the manifest's unprofiled ones, as a note (None when they agree or are missing)."""

    m = (rp.capture.manifest or {}) if rp.capture is not None else {}
    un = m.get("unprofiled_step_ms")
    if not un or not devices:
        return None
    slow = max(devices, key=lambda x: x.observed_step_ms)
    p = ProfilerOverhead(
        profiled_step_ms=slow.observed_step_ms,
        unprofiled_step_ms=median_ns(un),
        profiled_spread_ms=spread_ns(slow.observed_step_ns) / 1e6,
        unprofiled_spread_ms=spread_ns(un),
        profiled_steps=len(slow.steps),
        unprofiled_steps=len(un),
    )
    if not p.not_representative:
        return None
    return (
        f"the profiled window is not representative of the run: {p.not_representative} (profiled "
        f"{p.profiled_step_ms:.3f} ± {p.profiled_spread_ms:.3f} ms over {p.profiled_steps} steps, without "
        f"the profiler {p.unprofiled_step_ms:.3f} ± {p.unprofiled_spread_ms:.3f} ms over "
        f"{p.unprofiled_steps})"
    )


def _capture_info(capture: Any) -> dict:
    if capture is None:
        return {}

    c = info(capture)
    return {k: c[k] for k in ("workload", "run", "device", "python", "torch", "path", "sources") if k in c}


__all__ = ["whatif", "Replayer", "IDENTITY"]
