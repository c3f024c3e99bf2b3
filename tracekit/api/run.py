"""Where and how a verb's work runs: the run policy, decided here and nowhere else.

- **Whole here or rank by rank** (`analyzed_whole`, one rule for a capture on disk and for trace files):
  the savings replay the whole job's graph, collectives across ranks included, so with them a job of at
  most WHOLE_MAX_RANKS ranks is analysed whole in this process; without them only one rank on this
  machine is (a worker would read its whole table and keep it beside the frames: benchmarks/RESULTS.md,
  "Issue 36"); anything else rank by rank in the executor's workers (tracekit.scale: memory does not
  grow with the job's events), and the report says its savings were not computed. A capture file whose
  analysis is stored (`store`) is analysed whole: its idle rows go into the one file.
- **Here or on Ray** (tracekit.scale.executor.on_this_machine): an executor other than this machine's
  pool parses a job's trace files as its tasks, into a temporary capture folder (`parsed_by_workers`)
  that the analysis or the replay then reads; `tracekit parse` on Ray writes a folder
  (tracekit.scale.job.parse_job).
- **Which columns are loaded** (`loaded_columns`): of a capture read for an analysis, only those the
  analysis and (with the savings) the replay read, and only the row groups of ANALYSIS_KINDS.
- **When memory is freed**: a capture read for one analysis lets its table go once the frames hold it
  (but for the sync records the replay's graph reads); a what-if without a trace to write lets its table
  go after its graph is built, and the graph's edges after the last replay; a memory what-if read here
  lets its table go once the frames hold it and the frames once the memory is known, and reads the
  capture again for the step times' replay (the two peaks one after the other: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import tempfile
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import version
from tracekit.analysis.events import (
    ANALYSIS_COLUMNS,
    ANALYSIS_KINDS,
    MEMORY_CAT,
    analysis_columns,
    load_frames,
)
from tracekit.analysis.host import Threads
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.memory import FORWARD, OPTIMIZER, device_memory, device_timelines
from tracekit.analysis.merge import capture_info, merge, rank_report
from tracekit.analysis.model import REPORT_VERSION, Report, SavingsInfo
from tracekit.analysis.partial import CaptureContext, Params, analyze_partial
from tracekit.analysis.pipeline import prepare
from tracekit.analysis.steps import cycle_starts_of
from tracekit.analysis.store import store_report
from tracekit.api.options import AnalyzeOptions, MemoryOptions, WhatIfOptions
from tracekit.data.describe import CaptureDescription
from tracekit.data.describe import describe as describe_capture
from tracekit.data.files import Location
from tracekit.data.store import Capture, capture_ranks, check_store, is_capture, read_capture, read_meta
from tracekit.data.summary import may_hold_category
from tracekit.errors import TracekitError
from tracekit.parse.derive import record_rules
from tracekit.parse.parser import find_trace_files, load_capture, load_paths, parse_paths
from tracekit.render.memory import NO_MEMORY_EVENTS
from tracekit.scale import job
from tracekit.scale.executor import Executor, LocalExecutor, on_this_machine
from tracekit.whatif import memory as wm
from tracekit.whatif.check import python_scenario, with_python_check
from tracekit.whatif.graph import keep_sync_records
from tracekit.whatif.predict import COLUMNS as REPLAY_COLUMNS
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.savings import with_savings

WHOLE_MAX_RANKS = 8
SAVINGS_SKIPPED = (
    f"not computed: a job of more than {WHOLE_MAX_RANKS} ranks is analysed rank by rank, and the savings "
    "replay the whole job's graph (tracekit whatif computes them)"
)


def analyzed_whole(ranks: int, savings: bool, executor: Optional[Executor]) -> bool:
    """Whether a job of `ranks` ranks is analysed whole in this process (else rank by rank in the
    executor's workers): with the savings, up to WHOLE_MAX_RANKS ranks; without, one rank on this
    machine. A job given as trace files counts a rank per file (a rank's profiler cycles each count)."""
    return ranks <= WHOLE_MAX_RANKS if savings else ranks <= 1 and on_this_machine(executor)


@dataclass
class Analysed:
    """What `analyze` gives the front door: the report, the capture analysed here (None when its ranks
    were analysed in workers, or when the stored analysis was read), and where the analysis was stored."""

    report: Report
    capture: Optional[Capture] = None
    stored: Optional[Location] = None


def analyze(source: Capture | list[Location], opts: AnalyzeOptions, executor: Optional[Executor]) -> Analysed:
    """A loaded capture, a capture on disk (one location), or trace files / run folders, analysed."""
    if isinstance(source, Capture):
        if opts.store:
            raise TracekitError("store needs a capture on disk: pass its path, not a loaded capture")
        if opts.step is not None:  # the caller's Capture is never changed
            source = replace(source, step_marker=opts.step)
        return Analysed(_analyze_here(source, opts), source)
    if len(source) == 1 and is_capture(source[0]):
        return _analyze_capture(source[0], opts, executor)
    return _analyze_traces(source, opts, executor)


def _analyze_capture(path: Location, opts: AnalyzeOptions, executor: Optional[Executor]) -> Analysed:
    """A capture on disk: its stored analysis (`reuse_stored`), or analysed whole here, or by its ranks."""
    meta = read_meta(path)  # read once (a round trip on object storage)
    if opts.store:
        check_store(path, meta, opts.force)
    stored = _stored_report(meta, opts.step) if opts.reuse_stored else None
    if stored is not None:
        return Analysed(stored)
    into_file = opts.store and meta.get("form") != "folder"  # a file's idle rows go into the file
    if not into_file and not analyzed_whole(len(capture_ranks(meta)), opts.savings, executor):
        return Analysed(_by_ranks(path, opts, executor, meta), stored=path if opts.store else None)
    # Only the columns the analysis (and the savings' replay) read, unless --store rewrites the file.
    capture = (
        read_capture(path)
        if opts.store
        else read_capture(path, columns=loaded_columns(opts.savings, path, meta), kinds=ANALYSIS_KINDS)
    )
    capture.step_marker = opts.step
    return Analysed(_analyze_here(capture, opts, own=True), capture, path if opts.store else None)


def loaded_columns(savings: bool, path: Optional[Location] = None, meta: Optional[dict] = None) -> list[str]:
    """The capture columns an in-process analysis reads: the analysis' own (the memory events' only
    where the capture at `path` has some), and with `savings` the replay's."""
    own = (
        ANALYSIS_COLUMNS
        if path is None
        else analysis_columns(may_hold_category(path, meta or {}, MEMORY_CAT))
    )
    return list(dict.fromkeys([*own, *(REPLAY_COLUMNS if savings else ())]))


def _analyze_traces(inputs: list[Location], opts: AnalyzeOptions, executor: Optional[Executor]) -> Analysed:
    """Trace files / run folders: parsed and analysed here, or parsed into a temporary capture folder a
    file per worker and analysed by ranks."""
    if opts.store:
        raise TracekitError(
            f"--store needs one capture, got {', '.join(map(str, inputs))}; "
            "make one with `tracekit parse TRACE -o capture.parquet`"
        )
    if analyzed_whole(len(find_trace_files(inputs)), opts.savings, executor):
        capture = parse_paths(inputs)  # type: ignore[arg-type]
        capture.step_marker = opts.step
        return Analysed(_analyze_here(capture, opts, own=True), capture)
    executor = executor or LocalExecutor()
    with parsed_by_workers(inputs, executor) as folder:
        report = _by_ranks(folder, opts, executor)
    # The report names the inputs, not the temporary capture.
    return Analysed(replace(report, capture={k: v for k, v in report.capture.items() if k != "path"}))


def _by_ranks(
    path: Location, opts: AnalyzeOptions, executor: Optional[Executor], meta: Optional[dict] = None
) -> Report:
    """The capture at `path` analysed rank by rank in the executor's workers (tracekit.scale.job), as
    `opts` says (`meta`: its metadata, when read already); its savings noted as not computed."""
    report = job.analyze_capture(
        path,
        params=opts.params(evidence=False),  # workers keep their intervals
        executor=executor,
        check=opts.check,
        store=opts.store,
        rank=opts.rank,
        meta=meta,
        step_marker=opts.step,
    )
    return _skipped(report, opts)


@contextlib.contextmanager
def parsed_by_workers(inputs: list[Location], executor: Executor) -> Iterator[Location]:
    """A job's trace files parsed by the executor's tasks, a file per task, into a temporary capture
    folder; removed when the block ends."""
    job.check_local_staging(executor, inputs)
    with tempfile.TemporaryDirectory(prefix="tracekit-") as tmp:
        parsed = job.parse_job(inputs, Path(tmp) / "capture", folder=True, executor=executor)  # type: ignore[arg-type]
        yield parsed.output


def _analyze_here(capture: Capture, opts: AnalyzeOptions, own: bool = False) -> Report:
    """A capture in memory, analysed in this process (one part; two with `rank`: it alone, the rest),
    with the savings (tracekit.whatif.savings) when asked for, from the analysis' own frames. `own`:
    the capture was read for this analysis alone, and its table may be let go once the frames hold it."""
    params = opts.params()
    work = replace(params, evidence=params.evidence or opts.check or opts.store)
    meta = capture.meta or {}
    release = None
    if own and opts.rank is None and not (opts.check or opts.store):
        release = partial(keep_sync_records, capture)
    whole = (
        prepare(capture, params.sync_tolerance_ns, release=release)
        if opts.savings or opts.rank is None
        else None
    )
    parts = _parts(capture, CaptureContext.of(meta, capture.step_marker), work, opts.rank, whole)
    report = merge(parts, meta, work, path=capture.path)
    if opts.check:
        report = replace(report, checked=tuple(check_invariants(report, capture)))
    if opts.savings and whole is not None:
        report = with_savings(report, capture, context=whole)  # `whole` is emptied: its frames go
    if opts.store:
        store_report(capture, report)
    if opts.rank is not None:
        return rank_report(parts[0], report, opts.rank, meta, params, capture.path)
    return report


def _parts(capture: Capture, context: CaptureContext, work: Params, rank: Optional[int], whole: Any) -> list:
    """The capture as analysis parts: one (the whole, from `whole`'s frames), or rank `rank` and the rest."""
    if rank is None:
        return [analyze_partial(capture.table, context, work, frames=whole.fr, threads=whole.threads)]
    ranks = capture_ranks(capture.meta or {}) or sorted(set(capture.table["rank"].to_pylist()) - {None})
    if rank not in ranks:
        raise TracekitError(f"rank {rank} is not in this capture (its ranks: {job.rank_ranges(ranks)})")
    mine = pc.equal(capture.table["rank"], rank)
    parts = [analyze_partial(capture.table.filter(mine), context, work)]
    if len(ranks) > 1:
        parts.append(analyze_partial(capture.table.filter(pc.invert(mine)), context, work))
    return parts


def _skipped(report: Report, opts: AnalyzeOptions) -> Report:
    """A report analysed rank by rank: with a note that its savings were not computed, if asked for."""
    return replace(report, savings=SavingsInfo(skipped=SAVINGS_SKIPPED)) if opts.savings else report


def _stored_report(meta: dict, step: Optional[str] = None) -> Optional[Report]:
    """The analysis `analyze --store` kept in the capture, when this tracekit wrote it with the same
    steps' marker (`step`: --step's, None for the steps the capture defines)."""
    stored = meta.get("analysis")
    if (
        isinstance(stored, dict)
        and stored.get("tracekit_report") == REPORT_VERSION
        and stored.get("tracekit_version", meta.get("tracekit_version")) == version.__version__
    ):
        report = Report.from_json(stored)
        markers = {r.marker if r.rule == "marker" else None for r in report.step_rules}
        return report if markers <= {step} else None
    return None


def described_with(where: Location, opts: AnalyzeOptions) -> CaptureDescription:
    """`tracekit info --step`: the capture's description with the steps of `opts.step`'s marker, found in
    its host events (only the analysis' columns and row groups read), each rank's rule replaced."""
    step = opts.step
    assert step is not None
    capture = load_paths([where], columns=ANALYSIS_COLUMNS, kinds=ANALYSIS_KINDS)
    fr = load_frames(capture.table, cycle_starts_of(capture.meta), marker=step)
    rows = [
        {"rank": int(r.rank), "step": int(r.step), "name": step, "dur_ns": int(r.end - r.ts)}
        for r in fr.steps.itertuples(index=False)
    ]
    traces = [{**t, "step_rule": None} for t in capture.meta.get("traces") or []]
    record_rules(traces, {r: it.to_json() for r, it in fr.step_rules.items()})
    meta = {**capture.meta, "traces": traces}
    return describe_capture(meta, {**capture.summary(), "step_rows": rows}, where)


@dataclass
class Predicted:
    """What `predict` gives the front door (tracekit.api.views.WhatIf's fields)."""

    result: Any
    capture: Capture
    replayer: Replayer
    predicted: Any
    traceable: bool


def predict(
    source: Capture | list[Location], scenario: WhatIfOptions, executor: Optional[Executor], keep_trace: bool
) -> Predicted:
    """The what-if of `scenario` on a loaded capture (never changed) or on the capture at `source`
    (read for this alone: without `keep_trace` its table and the graph's edges go as soon as they are
    no longer needed)."""
    capture = source if isinstance(source, Capture) else _whatif_capture(source, executor)
    release = capture is not source and not keep_trace  # a capture read here, and no trace to write
    if scenario.step is not None:  # a loaded Capture passed in is never changed
        capture = replace(capture, step_marker=scenario.step)
    rp = Replayer.of(capture, release=release)
    scenario, other = python_scenario(scenario, capture.manifest)
    result, predicted = whatif(
        capture,
        scenario,
        unprofiled_step_ms=scenario.unprofiled_step_ms,
        replayer=rp,
        last_use=release and scenario.python is None,  # (the Python check replays again)
    )
    if scenario.python is not None:
        result = with_python_check(result, capture, rp, scenario, other, scenario.unprofiled_step_ms)
    return Predicted(result, capture, rp, predicted, traceable=not release)


def _whatif_capture(inputs: list[Location], executor: Optional[Executor]) -> Capture:
    """The capture to replay: only the columns the replay reads; a job's trace files parsed as the
    executor's tasks into a temporary capture folder when the executor is not this machine's."""
    if on_this_machine(executor):
        return load_paths(inputs, columns=REPLAY_COLUMNS, kinds=ANALYSIS_KINDS)
    if len(inputs) == 1 and is_capture(inputs[0]) or len(find_trace_files(inputs)) < 2:
        return load_paths(inputs)
    assert executor is not None
    with parsed_by_workers(inputs, executor) as folder:
        capture = load_capture(folder)  # type: ignore[arg-type]
    capture.path = None  # parsed on the fly, as without --ray: the temporary folder is gone
    return capture


def memory(source: Capture | list[Location], opts: MemoryOptions) -> wm.MemoryResult:
    """Each device's memory in a loaded capture (never changed) or the capture at `source`, and under
    `opts`' change its predicted peak and step time (tracekit.whatif.memory)."""
    if isinstance(source, Capture):
        capture, inputs, own = source, [], False
    else:  # read here: its table goes once the frames hold it
        capture = load_paths(source, columns=list(ANALYSIS_COLUMNS), kinds=ANALYSIS_KINDS)
        inputs, own = source, True
    manifest = capture.manifest or {}
    info = capture_info(capture.meta or {}, capture.path)

    def release() -> None:
        capture.table = capture.table.schema.empty_table()  # (a slice would keep the buffers)

    fr = load_frames(capture.table, cycle_starts_of(capture.meta), release if own else None, marker=opts.step)
    if own:  # the table is gone now (the call held it): its pages back to the system before more come
        gc.collect()
        pa.default_memory_pool().release_unused()
    threads = Threads(fr.host, fr.steps)
    timelines = device_timelines(fr, threads, manifest)
    if not timelines:
        raise TracekitError(f"{capture.path or 'the capture'}: {NO_MEMORY_EVENTS}")
    reports = tuple(device_memory(tl, threads, manifest) for tl in timelines)
    if opts.is_identity:
        return wm.MemoryResult(info, reports)
    preds = [wm.predict_device(tl, threads, fr, opts, manifest) for tl in timelines]
    notes: list[str] = []
    if opts.time and opts.changes_time:
        # what the step times need of the frames, then the frames go before the replay's graph is built
        trace = [
            (
                wm.phase_ms(fr, tl, FORWARD),
                wm.phase_ms(fr, tl, OPTIMIZER),
                wm.checkpoint_share(tl, fr, opts),
                wm.prelaunched_ms(fr, tl),
            )
            for tl in timelines
        ]
        kernels = fr.device["name"].astype(str).unique() if fr.has_device else None
        del fr, threads, timelines
        replayed = _whatif_capture(inputs, None) if own else capture
        replayed.step_marker = opts.step
        preds = _memory_times(replayed, kernels, preds, trace, opts, notes, release=own)
    return wm.MemoryResult(info, reports, wm.MemoryWhatIfResult(info, opts, tuple(preds), tuple(notes)))


def _memory_times(
    capture: Capture,
    kernels: Any,
    preds: list,
    trace: list,
    opts: MemoryOptions,
    notes: list,
    release: bool,
) -> list:
    """The memory predictions with their step times: the capture replayed with its device work (on a
    CPU-only capture, `kernels` None, its framework ops) as one micro-batch under the change
    (tracekit.whatif.memory); `trace`: each device's figures of the trace that with_times reads."""
    patterns, sets, typed = wm.time_flags(opts, kernels)
    has_device = kernels is not None
    scenario = WhatIfOptions(
        set=sets, kernels=patterns if has_device else {}, ops={} if has_device else patterns
    )
    result, _ = whatif(capture, scenario, replayer=Replayer.of(capture, release=release), last_use=release)
    un = result.unprofiled
    basis = "mean" if un is not None and un.loader else "median"
    by_device = {(d.rank, d.device): d for d in result.devices}
    out = []
    for pred, figures in zip(preds, trace):  # one loop per device
        d = by_device.get((pred.rank, pred.device)) or next(
            (x for x in result.devices if x.rank == pred.rank), None
        )
        if d is None:
            out.append(pred)
            continue
        ns = d.unprofiled_predicted_step_ns
        unprofiled = None if not ns else statistics.median(ns) / 1e6
        observed = (d.observed_step_ms, un.observed_step_ms if un is not None else None)
        base = (d.replayed_step_ms, un.replayed_step_ms if un is not None else None)
        replayed = (d.predicted_step_ms, unprofiled)
        out.append(wm.with_times(pred, opts, observed, base, replayed, figures, basis))
    notes.append(wm.time_note(opts, typed, has_device, basis))
    return out
