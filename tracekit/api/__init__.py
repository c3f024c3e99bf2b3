"""The one front door: every verb of tracekit is composed here, once, and every command (`analyze`,
`diff`, `whatif`, `parse`, `capture`, `demo`, `tb`, `annotate`) and the notebook call it (docs/api.md).

    import tracekit as tk
    cap = tk.load("runs/heavy_mlp/py3.11.parquet")     # or a trace file, a run folder, several rank files
    a = tk.analyze(cap)                                 # an Analysis: shows as tables in Jupyter
    a.causes()                                          # pandas: idle ms per step by cause, per device
    a.steps(), a.ranks(), a.sync_sources(), a.op_stats(), a.host()
    d = tk.diff("a.parquet", "b.parquet")               # a Comparison
    d.figures()                                         # pandas: each figure in A and B, change, interval
    w = tk.whatif("a.parquet", sets=["sync=0"])         # a WhatIf: w.devices(), w.text()

Each verb takes one frozen options object (`tracekit.api.options`: AnalyzeOptions, DiffOptions,
WhatIfOptions, ParseOptions), or its fields as keyword arguments. To add an option: a field there, its
flag in the command, and its use below; nothing else decides. Where the work runs is decided here
only: a capture of at most WHOLE_MAX_RANKS ranks is analysed whole in this process when the savings
are asked for (they replay the whole job's graph), so is a capture of one rank without them on this
machine (a worker would hold its whole table), anything else rank by rank in an executor's workers
(tracekit.scale holds the mechanics: executors, tasks, the job driver).

Every figure comes from the same result objects the renderers format (`tracekit.analysis.model.Report`,
`tracekit.compare.diff.DiffResult`, `tracekit.whatif.model.WhatIfResult`); the DataFrames of
`tracekit.api.views` are views of them, computed nowhere else. Importing this module loads no pandas.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Union

from tracekit.api.options import AnalyzeOptions, DiffOptions, ParseOptions, WhatIfOptions, options_of
from tracekit.data.files import Location
from tracekit.data.store import Capture
from tracekit.errors import TracekitError

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
    "ParseOptions",
    "WhatIf",
    "WhatIfOptions",
    "analyze",
    "diff",
    "load",
    "parse",
    "whatif",
]

# A capture of at most this many ranks is analysed in one process when the savings are asked for: they
# replay the whole job's dependency graph (tracekit.whatif), collectives across ranks included.
WHOLE_MAX_RANKS = 8
SAVINGS_SKIPPED = (
    f"not computed: a job of more than {WHOLE_MAX_RANKS} ranks is analysed rank by rank, and the savings "
    "replay the whole job's graph (tracekit whatif computes them)"
)


def __getattr__(name: str) -> Any:
    if name in ("Analysis", "Comparison", "WhatIf"):  # the views import pandas: only when used
        from tracekit.api import views

        return getattr(views, name)
    raise AttributeError(f"module 'tracekit.api' has no attribute {name!r}")


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
    from tracekit.parse.parser import load_capture, parse_paths

    if not paths:
        raise TracekitError("load() needs a capture, a trace file or a run folder")
    items = [_location(p) for p in paths]
    if len(items) == 1 and not salvage:
        return load_capture(items[0], columns=columns, kinds=kinds)  # type: ignore[arg-type]
    cap = parse_paths(items, salvage=salvage)  # type: ignore[arg-type]
    if columns is not None:
        cap.table = cap.table.select([c for c in columns if c in cap.table.column_names])
    return cap


def describe(path: PathLike) -> Any:
    """What a capture (or a trace file / run folder, parsed now) holds: manifest, sources, ranks,
    devices, steps, row counts (`tracekit info`); a tracekit.data.describe.CaptureDescription.

    A capture is described from its metadata and row-group statistics, reading only the few columns
    the counts need, a row group at a time (constant memory); trace files are parsed first."""
    from tracekit.data.describe import describe as describe_capture
    from tracekit.data.store import check_schema, is_capture, read_meta
    from tracekit.data.summary import summarize

    where = _location(path)
    if is_capture(where):
        meta = read_meta(where)
        check_schema(where, meta)
        return describe_capture(meta, summarize(where, meta), path)
    from tracekit.parse.parser import load_capture  # trace files: the parser (not imported for a capture)

    capture = load_capture(where)  # type: ignore[arg-type]
    return describe_capture(capture.meta, capture.summary(), path)


# -- parse ----------------------------------------------------------------------------------------------


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
    from tracekit.data.files import is_uri
    from tracekit.parse.parser import find_trace_files
    from tracekit.scale.executor import LocalExecutor
    from tracekit.scale.job import parse_job

    opts = options_of(ParseOptions, options, fields)
    paths = [_location(p) for p in inputs]
    folder = opts.folder
    if folder is None:
        # On Ray, each rank's file is written where its task runs: the driver never gathers the job's rows.
        remote = executor is not None and not isinstance(executor, LocalExecutor)
        folder = is_folder_output(str(output)) or (remote and len(find_trace_files(paths)) > 1)
    return parse_job(
        paths,  # type: ignore[arg-type]
        output if is_uri(output) else Path(output),
        folder=folder,
        force=opts.force,
        salvage=opts.salvage,
        executor=executor,
        progress=progress,
        files_done=files_done,
    )


def is_folder_output(output: str) -> bool:
    """An output that names a capture folder: it ends with a path separator, or is an existing folder."""
    import os

    from tracekit.data.files import is_dir

    return output.endswith(("/", os.sep)) or is_dir(output)


# -- analyze --------------------------------------------------------------------------------------------


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
    trace file, a run folder, or a list of trace files of one job. A capture of more than
    WHOLE_MAX_RANKS ranks, or a capture of several ranks (or one, with a Ray `executor`) without
    `savings`, is analysed rank by rank in `executor`'s workers (tracekit.scale: memory does not grow
    with its events; worker processes by default, or Ray); the savings are then not computed (the report
    says so) and the Analysis holds no Capture.
    Trace files are parsed first: in this process when they are one file (or at most WHOLE_MAX_RANKS
    with `savings`), else a file per worker into a temporary capture folder."""
    from tracekit.data.store import is_capture

    opts = options_of(AnalyzeOptions, options, fields)
    if isinstance(source, Capture):
        if opts.store:
            raise TracekitError("store needs a capture on disk: pass its path, not a loaded capture")
        return _view(_analyze_here(source, opts), source)
    inputs = [_location(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
    if not inputs:
        raise TracekitError("analyze() needs a capture, a trace file or a run folder")
    if len(inputs) == 1 and is_capture(inputs[0]):
        return _analyze_capture(inputs[0], opts, executor)
    return _analyze_traces(inputs, opts, executor)


def _analyze_capture(path: Location, opts: AnalyzeOptions, executor: Optional[Executor]) -> Analysis:
    """A capture on disk: its stored analysis (`reuse_stored`), or analysed whole here, or by its ranks."""
    from tracekit.data.store import capture_ranks, check_store, read_capture, read_meta
    from tracekit.scale import job
    from tracekit.scale.executor import LocalExecutor

    meta = read_meta(path)  # read once (a round trip on object storage)
    if opts.store:
        check_store(path, meta, opts.force)
    stored = _stored_report(meta) if opts.reuse_stored else None
    if stored is not None:
        return _view(stored)
    ranks = len(capture_ranks(meta))
    # One rank on this machine is analysed here with or without the savings: a worker would read the
    # whole table and keep it beside the frames (1.29 against 0.86-1.09 GiB on the 1 GB benchmark trace).
    local = executor is None or isinstance(executor, LocalExecutor)
    whole = ranks <= WHOLE_MAX_RANKS if opts.savings else ranks <= 1 and local
    if not whole and not (opts.store and meta.get("form") != "folder"):  # a file's idle rows: in the file
        report = job.analyze_capture(
            path,
            params=opts.params(evidence=False),  # workers keep their intervals
            executor=executor,
            check=opts.check,
            store=opts.store,
            rank=opts.rank,
            meta=meta,
        )
        return _view(_skipped(report, opts), stored=path if opts.store else None)
    # Only the columns the analysis (and the savings' replay) read, unless --store rewrites the file.
    from tracekit.analysis.events import ANALYSIS_KINDS

    capture = (
        read_capture(path)
        if opts.store
        else read_capture(path, columns=loaded_columns(opts.savings), kinds=ANALYSIS_KINDS)
    )
    return _view(_analyze_here(capture, opts, own=True), capture, stored=path if opts.store else None)


def loaded_columns(savings: bool) -> list[str]:
    """The capture columns an in-process analysis reads: the analysis' own, and with `savings` the
    replay's (on the 1 GB benchmark trace's capture 0.51 of the table's 0.93 GiB)."""
    from tracekit.analysis.events import ANALYSIS_COLUMNS
    from tracekit.whatif.predict import COLUMNS

    return list(dict.fromkeys([*ANALYSIS_COLUMNS, *(COLUMNS if savings else ())]))


def _analyze_traces(inputs: list[Location], opts: AnalyzeOptions, executor: Optional[Executor]) -> Analysis:
    """Trace files / run folders: parsed and analysed here, or parsed into a temporary capture folder a
    file per worker and analysed by ranks."""
    import tempfile

    from tracekit.parse.parser import find_trace_files, parse_paths
    from tracekit.scale import job
    from tracekit.scale.executor import LocalExecutor

    if opts.store:
        raise TracekitError(
            f"--store needs one capture, got {', '.join(map(str, inputs))}; "
            "make one with `tracekit parse TRACE -o capture.parquet`"
        )
    files = find_trace_files(inputs)
    if len(files) == 1 or (opts.savings and len(files) <= WHOLE_MAX_RANKS):
        capture = parse_paths(inputs)  # type: ignore[arg-type]
        return _view(_analyze_here(capture, opts, own=True), capture)
    executor = executor or LocalExecutor()
    job.check_local_staging(executor, inputs)
    with tempfile.TemporaryDirectory(prefix="tracekit-") as tmp:
        parsed = job.parse_job(inputs, Path(tmp) / "capture", folder=True, executor=executor)  # type: ignore[arg-type]
        report = job.analyze_capture(
            parsed.output,
            params=opts.params(evidence=False),
            executor=executor,
            check=opts.check,
            rank=opts.rank,
        )
    # The report names the inputs, not the temporary capture.
    report = replace(report, capture={k: v for k, v in report.capture.items() if k != "path"})
    return _view(_skipped(report, opts))


def _analyze_here(capture: Capture, opts: AnalyzeOptions, own: bool = False) -> Report:
    """A capture in memory, analysed in this process (one part; two with `rank`: it alone, the rest),
    with the savings (tracekit.whatif.savings) when asked for, from the analysis' own frames. `own`:
    the capture was read for this analysis alone, and its table may be let go once the frames hold it."""
    from tracekit.analysis.invariants import check_invariants
    from tracekit.analysis.merge import merge, rank_report
    from tracekit.analysis.partial import CaptureContext
    from tracekit.analysis.pipeline import prepare
    from tracekit.analysis.store import store_report

    params = opts.params()
    work = replace(params, evidence=params.evidence or opts.check or opts.store)
    meta = capture.meta or {}
    release = None
    if own and opts.rank is None and not (opts.check or opts.store):
        from tracekit.whatif.graph import keep_sync_records

        release = partial(keep_sync_records, capture)

    whole = (
        prepare(capture, params.sync_tolerance_ns, release=release)
        if opts.savings or opts.rank is None
        else None
    )
    parts = _parts(capture, CaptureContext.of(meta), work, opts.rank, whole)
    report = merge(parts, meta, work, path=capture.path)
    if opts.check:
        report = replace(report, checked=tuple(check_invariants(report, capture)))
    if opts.savings and whole is not None:
        from tracekit.whatif.savings import with_savings

        report = with_savings(report, capture, context=whole)  # `whole` is emptied: its frames go
    if opts.store:
        store_report(capture, report)
    if opts.rank is not None:
        return rank_report(parts[0], report, opts.rank, meta, params, capture.path)
    return report


def _parts(capture: Capture, context: Any, work: Any, rank: Optional[int], whole: Any) -> list:
    """The capture as analysis parts: one (the whole, from `whole`'s frames), or rank `rank` and the rest."""
    import pyarrow.compute as pc

    from tracekit.analysis.partial import analyze_partial
    from tracekit.data.store import capture_ranks
    from tracekit.scale.job import rank_ranges

    if rank is None:
        return [analyze_partial(capture.table, context, work, frames=whole.fr, threads=whole.threads)]
    ranks = capture_ranks(capture.meta or {}) or sorted(set(capture.table["rank"].to_pylist()) - {None})
    if rank not in ranks:
        raise TracekitError(f"rank {rank} is not in this capture (its ranks: {rank_ranges(ranks)})")
    mine = pc.equal(capture.table["rank"], rank)
    parts = [analyze_partial(capture.table.filter(mine), context, work)]
    if len(ranks) > 1:
        parts.append(analyze_partial(capture.table.filter(pc.invert(mine)), context, work))
    return parts


def _skipped(report: Report, opts: AnalyzeOptions) -> Report:
    """A report analysed rank by rank: with a note that its savings were not computed, if asked for."""
    from tracekit.analysis.model import SavingsInfo

    return replace(report, savings=SavingsInfo(skipped=SAVINGS_SKIPPED)) if opts.savings else report


def _stored_report(meta: dict) -> Optional[Report]:
    """The analysis `analyze --store` kept in the capture, when this tracekit wrote it."""
    from tracekit.analysis.model import REPORT_VERSION, Report
    from tracekit.version import __version__

    stored = meta.get("analysis")
    if (
        isinstance(stored, dict)
        and stored.get("tracekit_report") == REPORT_VERSION
        and stored.get("tracekit_version", meta.get("tracekit_version")) == __version__
    ):
        return Report.from_json(stored)
    return None


def _view(report: Report, capture: Optional[Capture] = None, stored: Optional[Location] = None) -> Analysis:
    from tracekit.api.views import Analysis

    return Analysis(report, capture, stored)


def analysis_of(path: PathLike, executor: Optional[Executor] = None) -> Report:
    """The report one side of a diff compares: the analysis stored in the capture (`analyze --store`)
    when this tracekit wrote it, else analysed now without the savings (DiffOptions.analysis)."""
    return analyze(path, DiffOptions().analysis, executor=executor).report


# -- diff -----------------------------------------------------------------------------------------------


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
    reports = [_side(c, opts.analysis, executor) for c in captures]
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
    from tracekit.data.files import is_uri

    return item if is_uri(item) else Path(item)


def _named(report: Report, path: PathLike) -> Report:
    """The report with the capture's path as the user named it (relative paths stay relative)."""
    return replace(report, capture={**report.capture, "path": str(path)})


def _default_label(item: Any) -> str:
    from tracekit.api.views import Analysis

    if isinstance(item, Analysis):
        return str(item.report.capture.get("run") or item.report.capture.get("workload") or "capture")
    if isinstance(item, Capture):
        return label_of(item.path) if item.path is not None else "capture"
    if isinstance(item, (list, tuple)):
        return label_of(item[0])
    return label_of(item)


def label_of(path: PathLike) -> str:
    """A capture's short name from its path: the file name without the trace and Parquet suffixes."""
    from tracekit.data.files import name_of

    name = name_of(path)
    for suffix in (".gz", ".json", ".pt.trace", ".parquet"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or str(path)


# -- whatif ---------------------------------------------------------------------------------------------


def whatif(
    source: Source,
    options: Optional[WhatIfOptions] = None,
    *,
    executor: Optional[Executor] = None,
    keep_trace: bool = True,
    **fields: Any,
) -> WhatIf:
    """Predict the step time if a cause were removed or changed (WhatIfOptions: `sets=["sync=0"]`, ...):
    replay the capture as a dependency graph (host threads, launches, streams, syncs, collectives),
    unchanged and changed, with and without the profiler's own cost. `source`: a loaded Capture, a
    capture, trace files or run folders; with `executor` (Ray), a job's trace files are parsed as its
    tasks first (the replay couples the ranks and runs here). `keep_trace=False`: the prediction will not
    be written as a trace (`WhatIf.write_trace`), so a capture read here lets its table go once the replay's
    frames hold it (`tracekit whatif` without `--trace`: the peak on the 1 GB benchmark trace's capture
    1.75 -> 1.25 GiB, benchmarks/RESULTS.md); a loaded Capture passed in is never changed."""
    from tracekit.api.views import WhatIf
    from tracekit.whatif import Replayer
    from tracekit.whatif import whatif as run_whatif

    opts = options_of(WhatIfOptions, options, fields)
    scenario = opts.scenario()  # a bad flag fails before anything is read
    capture = source if isinstance(source, Capture) else _whatif_capture(source, executor)
    release = capture is not source and not keep_trace  # a capture read here, and no trace to write
    rp = Replayer.of(capture, release=release)
    other = None
    if opts.python_from is not None or opts.python_speedup is not None:
        from tracekit.whatif.check import python_scenario

        scenario, other = python_scenario(scenario, capture.manifest, opts.python_from, opts.python_speedup)
    result, predicted = run_whatif(
        capture,
        scenario,
        unprofiled_step_ms=opts.unprofiled_step_ms,
        replayer=rp,
        last_use=release and scenario.python is None,  # (the Python check replays again)
    )
    if scenario.python is not None:
        from tracekit.whatif.check import with_python_check

        result = with_python_check(result, capture, rp, scenario, other, opts.unprofiled_step_ms)
    return WhatIf(result, capture, rp, predicted, traceable=not release)


def _whatif_capture(source: Source, executor: Optional[Executor]) -> Capture:
    """The capture to replay: only the columns the replay reads; a job's trace files parsed as the
    executor's tasks into a temporary capture folder when the executor is not this machine's."""
    import tempfile

    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.data.store import is_capture
    from tracekit.parse.parser import find_trace_files, load_capture
    from tracekit.scale import job
    from tracekit.scale.executor import LocalExecutor
    from tracekit.whatif.predict import COLUMNS

    inputs = [_location(p) for p in (source if isinstance(source, (list, tuple)) else [source])]
    if executor is None or isinstance(executor, LocalExecutor):
        return load(*inputs, columns=COLUMNS, kinds=ANALYSIS_KINDS)
    if len(inputs) == 1 and is_capture(inputs[0]) or len(find_trace_files(inputs)) < 2:
        return load(*inputs)
    with tempfile.TemporaryDirectory(prefix="tracekit-") as tmp:
        job.check_local_staging(executor, inputs)
        parsed = job.parse_job(inputs, Path(tmp) / "capture", folder=True, executor=executor)  # type: ignore[arg-type]
        capture = load_capture(parsed.output)  # type: ignore[arg-type]
    capture.path = None  # parsed on the fly, as without --ray: the temporary folder is gone
    return capture


# -- capture, TensorBoard, annotations -------------------------------------------------------------------


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
    from tracekit.errors import InputNotFound
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


def annotate(capture_path: PathLike, output: PathLike, *, force: bool = False) -> Any:
    """Write `output`: the trace behind `capture_path` plus a track of its idle gaps, every one with its
    cause and evidence (the analysis of `analyze`, all gaps kept, no savings); gzip when it ends .gz.
    Returns a tracekit.export.annotate.Annotated."""
    from tracekit.data.store import check_output
    from tracekit.export.annotate import trace_of, write_annotated
    from tracekit.parse.parser import parse_paths

    output = Path(output)
    check_output(output, force, [capture_path])
    trace = trace_of(Path(capture_path))
    if trace.resolve() == output.resolve():
        raise TracekitError(f"{output}: is the input trace; write the annotated trace to another file")
    cap = parse_paths([trace])
    report = analyze(cap, AnalyzeOptions(savings=False, top_gaps=sys.maxsize, evidence=True)).report
    return write_annotated(trace, cap, report, output, replace=force)
