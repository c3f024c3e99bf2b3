"""The per-rank work a worker runs (a forked process, or a Ray task on another machine).

Module-level functions of one picklable task object each, returning small results: a worker never
ships an event table to the driver. The analysis is imported by the analysis tasks only: a parse's
workers (and `tracekit parse`, which imports this module) never load it (pandas among its imports:
benchmarks/import_costs.py).

    parse_rank_task(ParseTask(files, out_path, salvage))   one rank's trace files → its Parquet file; a
                                                           summary dict
    analyze_rank_task(AnalyzeTask(path, ranks, ...))       ranks of a capture → their compact Partial
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import pyarrow as pa

from tracekit.data import files
from tracekit.data.files import Location, is_uri, name_of
from tracekit.data.schema import KIND_IDLE
from tracekit.data.store import IDLE_PART_NAME, CaptureWriter, read_ranks
from tracekit.data.summary import may_hold_category
from tracekit.errors import OutputWriteError, TracekitError, TraceWarning
from tracekit.parse.parser import Progress, parse_files_to, rank_hint

if TYPE_CHECKING:
    from tracekit.analysis.partial import CaptureContext, Params

# A trace file as (path, display name); a bare path displays as its file name.
TraceFile = Union[str, Path, tuple]


@dataclass(frozen=True)
class ParseTask:
    """Parse `files` (one rank's: successive profiler cycles, or a single file) into the part file
    `out_path` (a URI, or an absolute path: a worker elsewhere has another working directory)."""

    files: tuple[TraceFile, ...]
    out_path: str
    salvage: bool = False

    @property
    def what(self) -> str:
        """The files, as a dead worker's error names them."""
        return ", ".join(str(f[1] if isinstance(f, tuple) else Path(str(f)).name) for f in self.files)


@dataclass(frozen=True)
class AnalyzeTask:
    """Analyse `ranks` of the capture at `path` (either form; one rank, or a few analysed together:
    cheaper per rank, the same result). `meta`: the capture's metadata as `job.rank_meta` trims it.
    `check`: verify the invariants here, against these ranks' own events. `store`: write their idle
    rows beside their data (folder form)."""

    path: str
    ranks: tuple[int, ...]
    params: Params
    context: CaptureContext
    meta: dict = field(default_factory=dict)
    check: bool = False
    store: bool = False

    @property
    def what(self) -> str:
        """The ranks, as a dead worker's error names them."""
        return f"rank{'s' if len(self.ranks) > 1 else ''} {', '.join(map(str, self.ranks))}"


def parse_rank(
    files: list[TraceFile],
    out_path: Location,
    salvage: bool,
    *,
    parallel: bool = False,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Parse trace files (successive profiler cycles of one rank, or a single file) into the part file
    `out_path` (folder form: no rank column), in this process (`parallel`: each file over a pool of
    all cores instead). Returns {"rank", "rows", "steps", "sources", "traces", "failed", "out"}; a
    single file that cannot be parsed gives a summary with `failed` set and nothing written (the
    job's other ranks go on)."""

    def named(f: TraceFile) -> tuple:  # a URI stays a str (a Path would merge its '//')
        where, display = f if isinstance(f, tuple) else (f, name_of(f))
        return (where if is_uri(where) else Path(where), str(display))

    pairs = [named(f) for f in files]
    try:
        with warnings.catch_warnings():  # what a file lost is in its trace entry; the driver warns once
            warnings.simplefilter("ignore", TraceWarning)
            capture = parse_files_to(
                pairs, out_path, force=True, salvage=salvage, part=True, parallel=parallel, progress=progress
            )
    except TracekitError as exc:
        if len(pairs) != 1 or isinstance(exc, OutputWriteError):  # the output's failure, not the file's
            raise
        display = pairs[0][1]
        return {
            "rank": None,
            "rows": 0,
            "steps": 0,
            "sources": [],
            "traces": [],
            "failed": [{"path": display, "rank": rank_hint(exc, display), "error": str(exc)}],
            "out": None,
        }
    traces = capture.meta["traces"]
    ranks = sorted({int(t["rank"]) for t in traces})
    if len(ranks) != 1:
        raise TracekitError(
            f"{', '.join(p[1] for p in pairs)}: files of ranks {ranks} given as one rank's files"
        )
    return {
        "rank": ranks[0],
        "rows": capture.meta["event_rows"] + capture.table.num_rows,
        "steps": capture.rows_by_kind().get("step", 0),
        "sources": capture.meta["sources"],
        "traces": traces,
        "failed": [],
        "out": str(out_path),
    }


def parse_rank_task(task: ParseTask) -> dict[str, Any]:
    """parse_rank of a ParseTask: what Executor.map calls."""
    return parse_rank(list(task.files), task.out_path, task.salvage)


def analyze_rank_task(task: AnalyzeTask):
    """Analyse the task's ranks where their data is: read their rows, attribute, aggregate. Returns an
    analysis.partial.Partial (compact: no event table); with `check`, the names of the invariants
    checked are in `Partial.checked`."""
    from tracekit.analysis.events import MEMORY_CAT, analysis_columns
    from tracekit.analysis.partial import analyze_partial

    ranks = [int(r) for r in task.ranks]
    columns = analysis_columns(may_hold_category(task.path, task.meta, MEMORY_CAT))
    table = read_ranks(task.path, ranks, task.meta, list(columns))
    if task.store:  # the rows a previous --store wrote are replaced, not analysed
        table = _without_idle_rows(table)
    part = analyze_partial(table, task.context, task.params)
    if task.check:
        from tracekit.analysis.invariants import check_invariants
        from tracekit.analysis.merge import merge
        from tracekit.data.store import Capture

        report = merge([part], {}, task.params)
        part.checked = tuple(check_invariants(report, Capture(table=table)))
    if task.store:
        _store_idle(task.path, ranks, part.idle_intervals)
    if task.check or task.store:
        part.idle_intervals = part.busy_intervals = None  # used here: no need to ship them
    return part


def _without_idle_rows(table):
    import pyarrow.compute as pc  # not on a parse's path (benchmarks/import_costs.py)

    return table.filter(pc.not_equal(pc.cast(table["kind"], pa.string()), KIND_IDLE))


def _store_idle(root: Location, ranks: list[int], idle) -> None:
    """Write each rank's idle pieces beside its rows: `rank=<r>/idle-0.parquet` (folder form)."""
    from tracekit.analysis.store import idle_table

    for r in ranks:
        rows = idle_table(idle[idle["rank"] == r] if idle is not None else None)
        with CaptureWriter(files.join(root, f"rank={r}", IDLE_PART_NAME), force=True, part=True) as w:
            w.write(rows)
