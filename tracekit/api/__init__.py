"""The one front door: every verb of tracekit is composed here, once, and every command (`analyze`,
`diff`, `whatif`, `parse`, `capture`, `demo`, `tb`, `annotate`) and the notebook call it (docs/api.md).

    import tracekit as tk
    cap = tk.load("runs/heavy_mlp/py3.11.parquet")     # or a trace file, a run folder, several rank files
    a = tk.analyze(cap)                                 # an Analysis: shows as tables in Jupyter
    a.causes()                                          # pandas: idle ms per step by cause, per device
    a.steps(), a.ranks(), a.sync_sources(), a.op_stats(), a.host()
    d = tk.diff("a.parquet", "b.parquet")               # a Comparison
    d.figures()                                         # pandas: each figure in A and B, change, interval
    w = tk.whatif("a.parquet", set=["sync=0"])          # a WhatIf: w.devices(), w.text()

Each verb takes one frozen options object (`tracekit.api.options`: AnalyzeOptions, DiffOptions,
WhatIfOptions, ParseOptions), or its fields as keyword arguments; a field that is a flag declares it
(tracekit.flags), so a new option is one field. Each verb here delegates to one module: where and how
the work runs (whole here or rank by rank, here or on Ray, temporary folders, the columns loaded, when
memory is freed) is `tracekit.api.run`, the run policy; tracekit.scale holds the mechanics (executors,
tasks, the job driver).

Every figure comes from the same result objects the renderers format (`tracekit.analysis.model.Report`,
`tracekit.compare.diff.DiffResult`, `tracekit.whatif.model.WhatIfResult`); the DataFrames of
`tracekit.api.views` are views of them, computed nowhere else. Importing this module loads no pandas.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Union

from tracekit.api.options import (
    AnalyzeOptions,
    DiffOptions,
    MemoryOptions,
    ParseOptions,
    WhatIfOptions,
    options_of,
)
from tracekit.data.describe import describe as describe_capture
from tracekit.data.files import Location, is_uri, name_of
from tracekit.data.store import Capture, check_schema, is_capture, read_meta
from tracekit.data.summary import summarize
from tracekit.errors import InputNotFound, TracekitError

if TYPE_CHECKING:
    from tracekit.analysis.model import Report
    from tracekit.api.views import Analysis, Comparison, WhatIf
    from tracekit.parse.parser import Progress
    from tracekit.scale.executor import Executor
    from tracekit.scale.job import ParseResult

PathLike = Location  # a local path (str or Path) or a URI (s3://…)
CaptureLike = Union[Capture, Location]
Source = Union[CaptureLike, Sequence[Location]]

__all__ = [
    "Analysis",
    "AnalyzeOptions",
    "Comparison",
    "DiffOptions",
    "MemoryOptions",
    "ParseOptions",
    "WhatIf",
    "WhatIfOptions",
    "analyze",
    "diff",
    "load",
    "memory",
    "parse",
    "whatif",
]


def __getattr__(name: str) -> Any:
    if name in ("Analysis", "Comparison", "WhatIf"):  # the views import pandas: only when used
        from tracekit.api import views

        return getattr(views, name)
    raise AttributeError(f"module 'tracekit.api' has no attribute {name!r}")


# The verbs below import their stages when called: `tracekit info` and `tracekit parse` import this
# module and load neither the analysis nor the replay (pandas among them: benchmarks/RESULTS.md,
# "Issue 36", the imports each verb's first call costs).


def load(
    *paths: PathLike,
    salvage: bool = False,
    columns: Optional[Sequence[str]] = None,
    kinds: Optional[Sequence[str]] = None,
) -> Capture:
    """One capture: a `.parquet` capture, a trace file (`.pt.trace.json[.gz]`), a run folder, or several
    trace files of one job (one per rank). `salvage` keeps the complete events of a cut-off trace.
    `columns`: keep only these columns of the event table (less memory for a caller that reads no others).
    `kinds`: of a capture on disk, read only the row groups that may hold these row kinds (others may
    come along: filter by `kind` if only these must be there)."""
    from tracekit.parse.parser import load_paths

    if not paths:
        raise TracekitError("load() needs a capture, a trace file or a run folder")
    return load_paths([_location(p) for p in paths], salvage=salvage, columns=columns, kinds=kinds)


def describe(path: PathLike, step: Optional[str] = None) -> Any:
    """What a capture (or a trace file / run folder, parsed now) holds: manifest, sources, ranks,
    devices, steps, row counts (`tracekit info`); a tracekit.data.describe.CaptureDescription.

    A capture is described from its metadata and row-group statistics, reading only the few columns
    the counts need, a row group at a time (constant memory); trace files are parsed first. `step`:
    the steps a --step marker gives (AnalyzeOptions.step), found in the capture's events."""
    where = _location(path)
    if step is not None:
        from tracekit.api import run

        return run.described_with(where, AnalyzeOptions(step=step))
    if is_capture(where):
        meta = read_meta(where)
        check_schema(where, meta)
        return describe_capture(meta, summarize(where, meta), path)
    from tracekit.parse.parser import load_capture  # trace files: the parser (not imported for a capture)

    capture = load_capture(where)  # type: ignore[arg-type]
    return describe_capture(capture.meta, capture.summary(), path)


def parse(
    inputs: Sequence[PathLike],
    output: PathLike,
    options: Optional[ParseOptions] = None,
    *,
    executor: Optional[Executor] = None,
    progress: Optional[Progress] = None,
    files_done: Optional[Callable[[int, int], None]] = None,
    **fields: Any,
) -> ParseResult:
    """Parse trace files / run folders (one file per rank) into a capture at `output`: a `.parquet`
    file, or a folder of one Parquet file per rank (see ParseOptions.folder). `executor` runs the
    per-file work (worker processes here by default, or Ray); `progress` and `files_done` report it."""
    from tracekit.scale.job import parse_job

    opts = options_of(ParseOptions, options, fields)
    return parse_job(
        [_location(p) for p in inputs],  # type: ignore[misc]
        output,
        folder=opts.folder,
        force=opts.force,
        salvage=opts.salvage,
        executor=executor,
        progress=progress,
        files_done=files_done,
    )


def analyze(
    source: Source,
    options: Optional[AnalyzeOptions] = None,
    *,
    executor: Optional[Executor] = None,
    **fields: Any,
) -> Analysis:
    """Attribute every nanosecond of GPU idle time in each step to a cause (docs/DESIGN.md), and with
    `savings` (the default) predict the step time each host cause costs by replaying the capture without
    it, profiled and unprofiled (tracekit whatif, DESIGN.md "What if"), from the same frames.

    `source`: a loaded Capture, a capture (a `.parquet` file or a capture folder, local or a URI), a
    trace file, a run folder, or a list of trace files of one job. A job of more ranks than are analysed
    whole (tracekit.api.run.analyzed_whole: with the savings, more than WHOLE_MAX_RANKS; without them,
    more than one, or any with a Ray `executor`) is analysed rank by rank in `executor`'s workers
    (tracekit.scale: memory does not grow with its events; worker processes by default, or Ray); the
    savings are then not computed (the report says so) and the Analysis holds no Capture. Trace files
    are parsed first: here when analysed whole, else a file per worker into a temporary capture folder."""
    from tracekit.api import run
    from tracekit.api.views import Analysis

    opts = options_of(AnalyzeOptions, options, fields)
    if not isinstance(source, Capture):
        source = [_location(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
        if not source:
            raise TracekitError("analyze() needs a capture, a trace file or a run folder")
    done = run.analyze(source, opts, executor)
    return Analysis(done.report, done.capture, done.stored)


def analysis_of(path: PathLike, executor: Optional[Executor] = None) -> Report:
    """The report one side of a diff compares: the analysis stored in the capture (`analyze --store`)
    when this tracekit wrote it, else analysed now without the savings (DiffOptions.analysis)."""
    return analyze(path, DiffOptions().analysis, executor=executor).report


def diff(
    *captures: Union[Source, Analysis],
    options: Optional[DiffOptions] = None,
    executor: Optional[Executor] = None,
    **fields: Any,
) -> Comparison:
    """Each later capture against the first, every figure with its interval. A capture is a path, a
    loaded Capture, an Analysis, or a list of paths: repeats of one configuration pooled into one side.
    `executor` runs the per-rank analyses (tracekit.scale: processes here by default, or Ray)."""
    from tracekit.api.views import Comparison
    from tracekit.compare.diff import check_arguments, default_labels
    from tracekit.compare.diff import diff as diff_reports

    opts = options_of(DiffOptions, options, fields)
    check_arguments(len(captures), opts.labels, opts.confidence)  # before any capture is analysed
    sides = opts.analysis if opts.step is None else replace(opts.analysis, step=opts.step)
    reports = [_side(c, sides, executor) for c in captures]
    names = opts.labels or default_labels(reports, [_default_label(c) for c in captures])
    result = diff_reports(
        reports, list(names), confidence=opts.confidence, top_ops=opts.top_ops, compared=opts.compare
    )
    return Comparison(result)


def _side(item: Any, opts: AnalyzeOptions, executor: Optional[Executor]) -> Report:
    """One side of a diff as a Report (several runs of one configuration merged)."""
    from tracekit.api.views import Analysis
    from tracekit.compare.group import check_distinct_runs, merge_reports

    if isinstance(item, Analysis):
        return item.report
    if isinstance(item, Capture):
        return analyze(item, replace(opts, evidence=True)).report
    if isinstance(item, (list, tuple)):
        paths = [_location(p) for p in item]
        if len(paths) == 1:
            return _named(analyze(paths[0], opts, executor=executor).report, paths[0])
        check_distinct_runs(paths)
        reports = [_named(analyze(p, opts, executor=executor).report, p) for p in paths]
        names = [str(r.capture.get("run") or label_of(p)) for r, p in zip(reports, paths)]
        return _named(merge_reports(reports, names), ",".join(map(str, paths)))
    return _named(analyze(item, opts, executor=executor).report, _location(item))


def _location(item: Any) -> Location:
    """A path as a Path, a URI (s3://…) as it is (a Path would merge its '//')."""
    return item if is_uri(item) else Path(item)


def _named(report: Report, path: PathLike) -> Report:
    """The report with the capture's path as the user named it (relative paths stay relative)."""
    return replace(report, capture={**report.capture, "path": str(path)})


def _default_label(item: Any) -> str:
    if isinstance(item, Capture):
        return label_of(item.path) if item.path is not None else "capture"
    if isinstance(item, (list, tuple)):
        return label_of(item[0])
    report = getattr(item, "report", None)  # an Analysis
    if report is not None:
        return str(report.capture.get("run") or report.capture.get("workload") or "capture")
    return label_of(item)


def label_of(path: PathLike) -> str:
    """A capture's short name from its path: the file name without the trace and Parquet suffixes."""
    name = name_of(path)
    for suffix in (".gz", ".json", ".pt.trace", ".parquet"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or str(path)


def whatif(
    source: Source,
    options: Optional[WhatIfOptions] = None,
    *,
    executor: Optional[Executor] = None,
    keep_trace: bool = True,
    **fields: Any,
) -> WhatIf:
    """Predict the step time if a cause were removed or changed (WhatIfOptions: `set=["sync=0"]`, ...):
    replay the capture as a dependency graph (host threads, launches, streams, syncs, collectives),
    unchanged and changed, with and without the profiler's own cost. `source`: a loaded Capture, a
    capture, trace files or run folders; with `executor` (Ray), a job's trace files are parsed as its
    tasks first (the replay couples the ranks and runs here). `keep_trace=False`: the prediction will not
    be written as a trace (`WhatIf.write_trace`), so a capture read here lets its table go once the
    replay's frames hold it (`tracekit whatif` without `--trace`); a loaded Capture passed in is never
    changed."""
    from tracekit.api import run
    from tracekit.api.views import WhatIf

    scenario = options_of(WhatIfOptions, options, fields)  # a bad flag fails before anything is read
    if not isinstance(source, Capture):
        source = [_location(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
    done = run.predict(source, scenario, executor, keep_trace)
    return WhatIf(done.result, done.capture, done.replayer, done.predicted, traceable=done.traceable)


def memory(source: Source, options: Optional[MemoryOptions] = None, **fields: Any) -> Any:
    """Each device's memory over the steps of a capture with memory events, and with a change
    (MemoryOptions: `batch_scale=2`, `amp="bf16"`, `grad_accum=4`, `checkpoint=4`, `fit_gib=40`, ...)
    its predicted peak and step time (tracekit.whatif.memory). A tracekit.whatif.memory.MemoryResult; a
    capture without memory events is a TracekitError that says how to record them. `source`: a loaded
    Capture (never changed), a capture, trace files or run folders; one read here is let go as soon as
    the memory is known (tracekit.api.run.memory)."""
    from tracekit.api import run

    opts = options_of(MemoryOptions, options, fields)  # a bad flag fails before anything is read
    if not isinstance(source, Capture):
        source = [_location(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
    return run.memory(source, opts)


def capture(
    workload: Optional[str], out: PathLike, *, analysis: Optional[AnalyzeOptions] = None, **run: Any
) -> list[Path]:
    """Capture `workload` (or `script=...`) under torch.profiler in each interpreter and parse it
    (tracekit.orchestrate.runner.run_capture: `pythons`, `device`, `knobs`, `schedule`, `name`,
    `script`, `script_args`, `force`, `repeat`, `parse`); each run's TensorBoard event files (scalars and
    the report) are written from `analyze(capture, analysis)`, the report `tracekit analyze` prints."""
    from tracekit.orchestrate.runner import run_capture

    opts = analysis or AnalyzeOptions()
    return run_capture(
        workload, Path(out), summarize=lambda run_dir, cap: _summarize(run_dir, cap, opts), **run
    )


def _summarize(run_dir: Path, capture: Capture, opts: AnalyzeOptions, force: bool = True) -> list[Path]:
    from tracekit.export.tensorboard import write_run_summaries

    return write_run_summaries(run_dir, analyze(capture, opts).report, force=force)


def tensorboard(
    logdir: PathLike, *, force: bool = False, analysis: Optional[AnalyzeOptions] = None
) -> Iterator[tuple[Path, str]]:
    """Analyse every trace run under `logdir` (as `analyze`) and write its event files. Yields (run
    folder, what was done): "wrote N files", or "kept: has event files (pass --force to rewrite)"."""
    from tracekit.export.tensorboard import capture_of_run, event_files, find_trace_runs

    logdir = Path(logdir)
    if not logdir.is_dir():
        raise InputNotFound(f"{logdir}: no such directory; pass the OUT folder of `tracekit capture`")
    runs = find_trace_runs(logdir)
    if not runs:
        raise InputNotFound(f"{logdir}: no profiler traces (*.pt.trace.json[.gz]) under this folder")
    opts = analysis or AnalyzeOptions()
    for run_dir in runs:
        if not force and event_files(run_dir):
            yield run_dir, "kept: has event files (pass --force to rewrite)"
            continue
        written = _summarize(run_dir, capture_of_run(run_dir), opts)
        yield run_dir, f"wrote {len(written)} event file{'s' if len(written) != 1 else ''}"


def annotate(
    capture_path: PathLike, output: PathLike, *, force: bool = False, step: Optional[str] = None
) -> Any:
    """Write `output`: the trace behind `capture_path` plus a track of its idle gaps, every one with its
    cause and evidence (the analysis of `analyze`, all gaps kept, no savings); gzip when it ends .gz.
    `step`: the steps' marker (AnalyzeOptions.step). Returns a tracekit.export.annotate.Annotated."""
    from tracekit.data.store import check_output
    from tracekit.export.annotate import trace_of, write_annotated
    from tracekit.parse.parser import parse_paths

    output = Path(output)
    check_output(output, force, [capture_path])
    trace = trace_of(Path(capture_path))
    if trace.resolve() == output.resolve():
        raise TracekitError(f"{output}: is the input trace; write the annotated trace to another file")
    cap = parse_paths([trace])
    report = analyze(
        cap, AnalyzeOptions(savings=False, top_gaps=sys.maxsize, evidence=True, step=step)
    ).report
    return write_annotated(trace, cap, report, output, replace=force)
