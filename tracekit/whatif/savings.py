"""What each cause costs: the step time saved if that cause alone were removed (`--set CAUSE=0`), profiled
and without the profiler, per device — what `tracekit analyze` shows beside each cause's idle share.

The savings are not the idle times. Removing one cause lets the next one hold the device (a host-bound
step that loses its interpreter time may then wait on its launches), and host time the device never
waited for saves nothing; removing a cause can also save *more* than its idle share, when the host
window itself is the step (a host-bound loop shortens by all of the removed time, idle or not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from tracekit.analysis.advice import CONFIRM_MIN_SAVED, candidates
from tracekit.analysis.causes import BY_NAME, SCALED_CAUSES, STATE
from tracekit.analysis.model import SavingsInfo
from tracekit.analysis.steps import median_ns
from tracekit.flags import from_argv
from tracekit.whatif.graph import WAIT
from tracekit.whatif.loops import HOST_CLASS
from tracekit.whatif.predict import IDENTITY, Replayer, slowest_ms
from tracekit.whatif.profiler import MEASURED_RANGE_US
from tracekit.whatif.replay import replay_many, weights
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions

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
    cost_fitted: bool = False  # the unprofiled step fixes the cost (else a default or a bound)


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
        weights(rp.graph, WhatIfOptions(set={c: 0.0} if c else {}), costs[label] * 1000.0, af)
        for c, label in runs
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
    return Savings(per_device, est.cost_us, source, est.note, est.fitted)


def _paced(rp: Replayer, cost_us: float) -> dict:
    """The unprofiled means through the producer model: unchanged, and each cause removed (the loader's
    removal is a saving even where the trace shows no fetch time: the producer goes)."""
    out: dict[tuple[Optional[str], str], dict] = {
        (None, "unprofiled"): _means(rp.unprofiled(IDENTITY, cost_us)[0])
    }
    for cause in SCALED_CAUSES:
        if _present(rp, cause) or cause == "dataloader":
            out[(cause, "unprofiled")] = _means(rp.unprofiled(_removed(cause), cost_us)[0])
    return out


def _present(rp: Replayer, cause: str) -> bool:
    """Whether removing the cause changes any edge of the graph (else the saving is 0, no replay needed):
    a host segment of that state with some length, or for sync a wait of a blocking call."""
    g = rp.graph
    if BY_NAME[cause].scenario == "waits":
        return bool((g.kind == WAIT).any())
    return bool(((g.ecls == HOST_CLASS) & (g.state == STATE[cause]) & (g.w != 0)).any())


def _means(t) -> dict:
    """The step (the median over steps, ms, tracekit.analysis.steps.median_ns) per (rank, device) of a
    StepTimes: a saving is a difference of medians, so it never exceeds the step it is taken from."""
    return {k: median_ns(d) / 1e6 for k, d in zip(t.keys, t.dur)}


def with_savings(
    report: Any, capture: Any, frames: Any = None, threads: Any = None, *, context: Any = None
) -> Any:
    """The analysis report (tracekit.analysis.model.Report) with each device's savings filled in, and the
    profiler cost they assume in its `savings`; its advice's predicted savings too, also on a CPU-only
    capture (host steps, no device: its host replayed as `tracekit whatif` replays it). `frames`,
    `threads`: the analysis' own (reused); or `context`, the analysis' tracekit.analysis.pipeline.Context,
    whose frames and threads are taken (`hand_over`) and let go once the graph is built: the savings'
    replays then hold the graph alone."""

    if not report.devices and not report.host.steps:
        return report
    if context is not None:
        frames, threads = context.hand_over()
    maybe = tuple(candidates(report))
    host = any(_reads_host(a.whatif) for a in report.advice + maybe if a.whatif)
    rp = Replayer.of(capture, frames, threads, keep_frames=False, unchanged=False, keep_host=host)
    del frames, threads  # (the caller's, when it passed them itself, stay)
    s = cause_savings(rp)
    devices = tuple(
        replace(d, savings_ms_per_step=s.per_device.get((d.rank, d.device))) for d in report.devices
    )
    info = SavingsInfo(s.profiler_cost_us_per_event, s.cost_source)
    # where no unprofiled step fixes the profiler's cost, each saving also at the ends of the costs
    # measured on real captures: the figure's sensitivity to what this trace cannot tell
    spread = None if s.cost_fitted else MEASURED_RANGE_US
    advice = predict_advice(rp, report.advice, s.profiler_cost_us_per_event, maybe, spread)
    ip = report.input_pipeline
    if ip is not None and ip.unmeasured:
        advice = tuple(_noted(a, _unmeasured_note(a)) if a.saved_ms else a for a in advice)
    return replace(report, devices=devices, savings=info, advice=advice)


def _unmeasured_note(a: Any) -> str:
    """What an unprofiled saving means where the trace's DataLoader can hide a stall and nothing measured
    the loop without the profiler (InputPipeline.unmeasured)."""
    if a.cause == "dataloader":
        return (
            "a stall the profiled window hid (the input pipeline's warning) is in neither saving: without "
            "the profiler the loader may take longer"
        )
    return (
        "from this trace alone the step without the profiler is unknown: where its DataLoader hides a "
        "stall (the input pipeline's warning), the loader paces that step and little is saved until it "
        "keeps up"
    )


# An advice whose unprofiled saving is below this part of its profiled one, on a capture whose input
# pipeline paces the unprofiled step, says that the loader is why.
PACED_FRACTION = 0.5


def scenario_of(flags: Sequence[str]) -> WhatIfOptions:
    """The scenario of an advice's `whatif` flags, as `tracekit whatif` reads them (the flags of
    WhatIfOptions' fields, tracekit.flags.from_argv)."""
    try:
        return WhatIfOptions(**from_argv(WhatIfOptions, flags))
    except ValueError as exc:  # a flag WhatIfOptions does not have, or a value of the wrong type
        raise ScenarioError(f"{exc}: not what-if flags that advice can use") from None


def _reads_host(flags: Sequence[str]) -> bool:
    """Whether an advice's scenario reads the host events (an unusable one is said by predict_advice)."""
    try:
        return scenario_of(flags).reads_host
    except ScenarioError:
        return False


def predict_advice(
    rp: Replayer,
    advice: Sequence[Any],
    cost_us: float,
    maybe: Sequence[Any] = (),
    spread: Optional[tuple[float, float]] = None,
) -> tuple:
    """Each advice with its what-if flags replayed: the step saved per step, profiled (the unchanged
    replay's step less the changed one's) and without the profiler (both with its cost `cost_us` removed;
    a producer-paced input pipeline paces both, tracekit.whatif.loader); then ranked by the unprofiled
    saving (advice that cannot be predicted after, by share). Each saving is a difference of two medians
    of replayed steps that are never negative, so it never exceeds the step it is a saving of. `maybe`:
    candidates (tracekit.analysis.advice.candidates), kept where the replay predicts they save at least
    CONFIRM_MIN_SAVED of the unprofiled step, dropped otherwise (and where they cannot be predicted).
    `spread`: two other profiler costs (µs/event); where given, `saved_ms` also holds the least and most
    unprofiled saving over the three costs ("unprofiled_min", "unprofiled_max")."""
    predicted = _predicted(rp, list(advice) + list(maybe), cost_us, spread)
    confirmed = [a for a in predicted[len(advice) :] if _confirmed(a)]
    kept = predicted[: len(advice)] + [_noted(a, CONFIRMED_NOTE) for a in confirmed]
    return tuple(rank_advice(kept))


CONFIRMED_NOTE = (
    f"its evidence is under the rule's threshold: given because the replay predicts it saves at least "
    f"{CONFIRM_MIN_SAVED:.0%} of the step"
)


def _confirmed(a: Any) -> bool:
    """Whether a candidate's replay confirms it (its note then says it fired on its replayed saving)."""
    saved, step = a.unprofiled_saved_ms, (a.step_ms or {}).get("unprofiled")
    return saved is not None and step is not None and step > 0 and saved >= CONFIRM_MIN_SAVED * step


def _predicted(
    rp: Replayer, advice: list, cost_us: float, spread: Optional[tuple[float, float]] = None
) -> list:
    """`advice` with each one's savings filled in where its flags can be replayed (predict_advice)."""
    if not any(a.whatif for a in advice):
        return advice
    base_p = slowest_ms(rp.replayed.dur)
    observed = slowest_ms(rp.observed.dur)
    error = base_p / observed - 1 if observed else 0.0
    out = list(advice)
    todo = []
    for i, a in enumerate(advice):
        if not a.whatif:
            continue
        if abs(error) > MAX_REPLAY_ERROR:
            out[i] = _noted(
                a, f"not predicted: the unchanged replay misses the observed step by {error:+.1%}"
            )
            continue
        try:
            scenario = scenario_of(a.whatif)
            todo.append((i, scenario, rp.check(scenario)))
        except ScenarioError as exc:
            out[i] = _noted(a, f"not predicted: {exc}")
    if todo:
        others = tuple(c for c in (spread or ()) if c != cost_us)
        # the unchanged unprofiled step at each cost (one pass for all where no producer paces it)
        _, base_u, *base_o = _replayed_ms(rp, IDENTITY, rp.check(IDENTITY), (cost_us, *others))
        for i, scenario, f in todo:
            profiled, unprofiled, *at_others = _replayed_ms(rp, scenario, f, (cost_us, *others))
            a, saved_u = out[i], base_u - unprofiled
            saved = {"profiled": base_p - profiled, "unprofiled": saved_u}
            if others:
                # (each of another unprofiled step; never above the one the advice names)
                every = [min(b - x, base_u) for b, x in zip(base_o, at_others)] + [saved_u]
                saved.update(unprofiled_min=min(every), unprofiled_max=max(every))
            if rp.producers and a.cause != "dataloader" and saved_u < PACED_FRACTION * (base_p - profiled):
                a = _noted(
                    a,
                    "without the profiler the input pipeline paces the step: little is saved until it "
                    "keeps up",
                )
            out[i] = replace(a, saved_ms=saved, step_ms={"profiled": base_p, "unprofiled": base_u})
    return out


def _replayed_ms(rp: Replayer, scenario: WhatIfOptions, f: Any, costs: tuple[float, ...]) -> list[float]:
    """[profiled, unprofiled at each of `costs`] step under a scenario: one pass for all where no producer
    paces the unprofiled steps (they differ only in the profiler's cost)."""
    if rp.producers:
        return [rp.step_ms(scenario, 0.0, f)] + [
            slowest_ms(rp.unprofiled(scenario, c, f)[0].dur) for c in costs
        ]
    ws = [weights(rp.graph, scenario, c * 1000.0, f) for c in (0.0, *costs)]
    out = []
    for rep in replay_many(rp.graph, ws):
        out.append(slowest_ms(rp.steps.times(rep).dur))
        del rep
    return out


def _noted(a: Any, note: str) -> Any:
    return replace(a, prediction_note=f"{a.prediction_note}; {note}" if a.prediction_note else note)


def rank_advice(advice: Sequence[Any]) -> list:
    """Predicted advice by unprofiled saving, largest first; then the rest by share (stable)."""
    predicted = [a for a in advice if a.unprofiled_saved_ms is not None]
    rest = [a for a in advice if a.unprofiled_saved_ms is None]
    predicted.sort(key=lambda a: -a.unprofiled_saved_ms)
    rest.sort(key=lambda a: -(a.share if a.share is not None else 0.0))
    return predicted + rest


def _removed(cause: Optional[str]) -> WhatIfOptions:
    """The scenario without `cause` (None: unchanged)."""
    return WhatIfOptions(set={cause: 0.0} if cause else {})


__all__ = [
    "cause_savings",
    "with_savings",
    "predict_advice",
    "scenario_of",
    "rank_advice",
    "Savings",
    "MAX_REPLAY_ERROR",
]
