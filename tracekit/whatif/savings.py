"""What each cause costs: the step time saved if that cause alone were removed (`--set CAUSE=0`), profiled
and without the profiler, per device — what `tracekit analyze` shows beside each cause's idle share.

The savings are not the idle times. Removing one cause lets the next one hold the device (a host-bound
step that loses its interpreter time may then wait on its launches), and host time the device never
waited for saves nothing; removing a cause can also save *more* than its idle share, when the host
window itself is the step (a host-bound loop shortens by all of the removed time, idle or not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from tracekit.analysis.events import STATE_NAMES
from tracekit.analysis.steps import median_ns
from tracekit.whatif.graph import WAIT
from tracekit.whatif.loops import HOST_CLASS
from tracekit.whatif.predict import IDENTITY, Replayer
from tracekit.whatif.replay import replay_many, weights
from tracekit.whatif.scenario import SCALED_CAUSES, Scenario

# A device whose unchanged replay misses its observed mean step by more than this gets no savings: the
# graph lacks a dependency there (the replay self-check of DESIGN.md "What if").
MAX_REPLAY_ERROR = 0.02


@dataclass(frozen=True)
class Savings:
    """Per (rank, device): {"profiled": {cause: ms/step}, "unprofiled": {cause: ms/step}}, or None where
    the replay error is too large to trust; and how the profiler's cost was found."""

    per_device: dict
    profiler_cost_us_per_event: float
    cost_source: str  # manifest | flag | default
    cost_note: str


def cause_savings(rp: Replayer, unprofiled_step_ms: Optional[float] = None) -> Savings:
    """Replay each host cause removed (factor 0), with and without the profiler's cost, against the
    unchanged replay with the same cost."""
    source, _, est = rp.cost(unprofiled_step_ms)
    af = rp.check(IDENTITY)
    costs = {"profiled": 0.0, "unprofiled": est.cost_us}
    # One replay per cause present and profiler cost (and the unchanged one with the cost removed), a
    # few per pass over the graph (replay_many): the passes, not the scenarios, are what cost.
    runs: list[tuple[Optional[str], str]] = [(None, "unprofiled")] if costs["unprofiled"] else []
    if rp.unchanged is None:  # the unchanged replay in one of these passes, not a pass of its own
        runs.append((None, "profiled"))
    runs += [(cause, label) for cause in SCALED_CAUSES if _present(rp, cause) for label in costs]
    ws = [
        weights(rp.graph, Scenario(set={c: 0.0} if c else {}), costs[label] * 1000.0, af) for c, label in runs
    ]
    means = {}
    reps = replay_many(rp.graph, ws)
    for run in runs:  # not zip: it keeps its last tuple, and with it a view of the last pass
        rep = next(reps)
        times = rp.steps.times(rep)
        if run == (None, "profiled"):
            rp.unchanged = times
        means[run] = _means(times)
        del rep  # a view of its pass: the pass goes before the next one is made
    base = {label: means.get((None, label)) or _means(rp.replayed) for label in costs}
    if rp.producers:  # without the profiler the input pipeline paces the steps (tracekit.whatif.loader)
        means.update(_paced(rp, costs["unprofiled"]))
        base["unprofiled"] = means[(None, "unprofiled")]
    saved: dict = {k: {label: {} for label in costs} for k in rp.steps.keys}
    for cause in SCALED_CAUSES:
        for label in costs:
            pred = means.get((cause, label), base[label])  # a cause with no segment saves nothing
            for key in rp.steps.keys:
                saved[key][label][cause] = base[label][key] - pred[key]
    observed, replayed = _means(rp.observed), _means(rp.replayed)
    per_device = {
        key: saved[key] if abs(replayed[key] / observed[key] - 1) <= MAX_REPLAY_ERROR else None
        for key in rp.steps.keys
        if observed.get(key)
    }
    return Savings(per_device, est.cost_us, source, est.note)


def _paced(rp: Replayer, cost_us: float) -> dict:
    """The unprofiled means through the producer model: unchanged, and each cause removed (the loader's
    removal is a saving even where the trace shows no fetch time: the producer goes)."""
    out: dict[tuple[Optional[str], str], dict] = {
        (None, "unprofiled"): _means(rp.unprofiled(IDENTITY, cost_us)[0])
    }
    for cause in SCALED_CAUSES:
        if _present(rp, cause) or cause == "dataloader":
            out[(cause, "unprofiled")] = _means(rp.unprofiled(Scenario(set={cause: 0.0}), cost_us)[0])
    return out


def _present(rp: Replayer, cause: str) -> bool:
    """Whether removing the cause changes any edge of the graph (else the saving is 0, no replay needed):
    a host segment of that state with some length, or for sync a wait of a blocking call."""
    g = rp.graph
    if cause == "sync":
        return bool((g.kind == WAIT).any())
    code = STATE_NAMES.index(cause)
    return bool(((g.ecls == HOST_CLASS) & (g.state == code) & (g.w != 0)).any())


def _means(t) -> dict:
    """The step (the median over steps, ms, tracekit.analysis.steps.median_ns) per (rank, device) of a
    StepTimes: a saving is a difference of medians, so it never exceeds the step it is taken from."""
    return {k: median_ns(d) / 1e6 for k, d in zip(t.keys, t.dur)}


def with_savings(
    report: Any, capture: Any, frames: Any = None, threads: Any = None, *, context: Any = None
) -> Any:
    """The analysis report (tracekit.analysis.model.Report) with each device's savings filled in, and the
    profiler cost they assume in its `savings`. `frames`, `threads`: the analysis' own (reused); or
    `context`, the analysis' tracekit.analysis.pipeline.Context, whose frames and threads are taken
    (`hand_over`) and let go once the graph is built: the savings' replays then hold the graph alone
    (on the 1 GB benchmark trace's capture, the frames and threads were ~0.1 GiB beside it)."""
    from tracekit.analysis.model import SavingsInfo

    if not report.devices:
        return report
    if context is not None:
        frames, threads = context.hand_over()
    rp = Replayer.of(capture, frames, threads, keep_frames=False, unchanged=False)
    del frames, threads  # (the caller's, when it passed them itself, stay)
    s = cause_savings(rp)
    devices = tuple(
        replace(d, savings_ms_per_step=s.per_device.get((d.rank, d.device))) for d in report.devices
    )
    info = SavingsInfo(s.profiler_cost_us_per_event, s.cost_source)
    return replace(report, devices=devices, savings=info)


__all__ = ["cause_savings", "with_savings", "Savings", "MAX_REPLAY_ERROR"]
