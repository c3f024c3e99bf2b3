"""The driver of a job: which trace files go to which worker, the capture it writes, and (see
`analyze_capture`) the merge of the per-rank analyses. The mechanics only: whether a capture is
analysed here or by its ranks in workers is decided by the run policy, `tracekit.api.run`.

    result = parse_job([Path("run/")], Path("capture/"), folder=True)      # one Parquet file per rank
    result = parse_job([Path("run/")], Path("capture.parquet"), folder=False)

How a job's files are decoded:
- *across files* (a job of many rank files, the usual multi-rank case): each worker decodes whole
  files in its own process and writes their rows to a part file; no event crosses processes. A
  rank's files are known only once decoded (the rank is in each file's metadata), so each file is
  first parsed on its own; a rank with several files (successive profiler cycles) is then parsed
  again from all its files together, so that its step rows (and the sanity checks) see the
  whole rank. The folder form keeps the part files; the file form copies them, rank
  after rank, into the one Parquet file.
- *within files* (a few large files): files are decoded one after the other, each cut into chunks
  decoded by all cores (tracekit.parse.parser); the file form streams straight into its file.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.data import files as fs
from tracekit.data.files import Location
from tracekit.data.store import (
    IDLE_PART_NAME,
    CaptureWriter,
    capture_ranks,
    check_folder_output,
    check_output,
    rank_part,
    read_meta,
    read_rank,
    write_folder_meta,
)
from tracekit.errors import (
    CaptureFileError,
    OutputExistsError,
    OutputWriteError,
    TraceFormatError,
    TracekitError,
)
from tracekit.parse.parser import (
    Progress,
    check_rank_files,
    find_manifest,
    find_trace_files,
    parse_files_to,
    ranks_at_once,
    warn_losses,
)
from tracekit.scale import tasks
from tracekit.scale.executor import Executor, LocalExecutor, on_this_machine

if TYPE_CHECKING:
    # The analysis (pandas among its imports: benchmarks/RESULTS.md, "Issue 36") is imported by the
    # functions that analyse: `tracekit parse` reaches parse_job through this module and must not pay for it.
    from tracekit.analysis.model import Report
    from tracekit.analysis.partial import Params

# A file at least this large (on disk) is worth cutting into chunks decoded by all cores; a job of
# smaller files is decoded a file per worker.
LARGE_FILE_BYTES = 32 << 20
_STAGE = ".files"  # inside the staged output: each file's part, before it is known whose rank it is


@dataclass
class ParseResult:
    """What `parse_job` wrote: the output, its metadata document, and counts for the summary line."""

    output: Location
    folder: bool
    meta: dict
    events: int = 0  # rows written (events and derived rows)
    steps: int = 0
    ranks: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[dict]:
        return self.meta.get("failed") or []


def across_files(sizes: list[int], n_workers: int) -> bool:
    """Decode a file per worker (True), or each file over all workers (False)?"""
    return len(sizes) > 1 and (len(sizes) >= n_workers or max(sizes) < LARGE_FILE_BYTES)


def parse_job(
    paths: list[Path],
    output: Location,
    *,
    folder: Optional[bool] = None,
    force: bool = False,
    salvage: bool = False,
    executor: Optional[Executor] = None,
    progress: Optional[Progress] = None,
    files_done: Optional[Callable[[int, int], None]] = None,
) -> ParseResult:
    """Parse a job's trace files (files and/or run folders; one file per rank, or several successive
    cycles of a rank) into a capture at `output`: a folder of one Parquet file per rank (`folder`) or
    one Parquet file (None: a folder when `output` names one, ending with a path separator, or when the
    executor is not this machine's and there are several files: each rank's file is written where its
    task runs, and the driver never gathers the job's rows). Files that fail are left out and listed in
    `meta["failed"]` (when all fail, the first error is raised); files of one rank whose time ranges
    overlap are an error naming both.
    `executor` runs the per-file work (default: a LocalExecutor). `progress` is called as a large
    file is decoded, `files_done(k, n)` as each file of a job decoded across files is."""
    started = time.perf_counter()
    if folder is None:
        remote = not on_this_machine(executor)
        folder = is_folder_output(output) or (remote and len(find_trace_files(paths)) > 1)
    output = output if fs.is_uri(output) else Path(output)  # (its trailing separator read above)
    (check_folder_output if folder else check_output)(output, force, paths)
    files = find_trace_files(paths)
    if not fs.is_uri(output):
        for p, _ in files:
            if not fs.is_uri(p) and Path(p).resolve() == Path(output).resolve():
                raise OutputExistsError(f"{output} is also an input; choose another output path")
    manifest = find_manifest(paths)
    executor = executor or LocalExecutor()
    spread = across_files([fs.size(p) for p, _ in files], getattr(executor, "workers", 1))
    # On Ray every file of a job is a task: the cluster's cores, not the driver's, decode large files.
    spread = spread or (len(files) > 1 and not on_this_machine(executor))
    if not folder and not spread:
        capture = parse_files_to(
            files,
            output,
            force=force,
            salvage=salvage,
            progress=progress,
            manifest=manifest,
            keep_going=len(files) > 1,
        )
        steps = capture.rows_by_kind().get("step", 0)
        rows = capture.meta["event_rows"] + capture.table.num_rows
        meta = {k: v for k, v in capture.meta.items() if k != "event_rows"}
        ranks = sorted({int(t["rank"]) for t in meta["traces"]})
        return ParseResult(output, False, meta, rows, steps, ranks, time.perf_counter() - started)
    if folder:
        with fs.staged_folder(output, replace=force) as stage:
            result = _parse_into(stage, files, manifest, salvage, executor, spread, progress, files_done)
            fs.remove_tree(fs.join(stage, _STAGE))
            write_folder_meta(stage, result.meta, result.meta.pop("parts"))
    else:
        stage = fs.sibling(output, f".{fs.name_of(output)}.parts")
        with fs.new_folders_removed_on_failure(output):  # the stage makes the output's folders
            try:
                result = _parse_into(stage, files, manifest, salvage, executor, spread, progress, files_done)
                _concatenate(stage, output, result.meta, force)
            except OutputWriteError as exc:
                raise fs.named_as_output(exc, stage, output) from None
            finally:
                if fs.exists(stage):
                    fs.remove_tree(stage)
    result.output, result.folder = output, folder
    result.seconds = time.perf_counter() - started
    return result


def is_folder_output(output: Location) -> bool:
    """An output that names a capture folder: it ends with a path separator, or is an existing folder."""
    return str(output).endswith(("/", os.sep)) or fs.is_dir(output)


def _parse_into(
    root: Location,
    files: list[tuple[Location, str]],
    manifest: Optional[dict],
    salvage: bool,
    executor: Executor,
    spread: bool,
    progress: Optional[Progress],
    files_done: Optional[Callable[[int, int], None]],
) -> ParseResult:
    """Parse every file into `root`/rank=<r>/part-0.parquet; the metadata (with "parts") in .meta."""
    fs.make_dirs(fs.join(root, _STAGE))
    staged = [fs.join(root, _STAGE, f"{i}.parquet") for i in range(len(files))]
    jobs = [
        tasks.ParseTask(((_absolute(p), d),), _absolute(out), salvage) for (p, d), out in zip(files, staged)
    ]
    if spread:
        summaries = []
        for summary in executor.map(tasks.parse_rank_task, jobs):
            summaries.append(summary)
            if files_done:
                files_done(len(summaries), len(jobs))
    else:
        summaries = [_parse_here(job, progress) for job in jobs]
    failed = [f for s in summaries for f in s["failed"]]
    done = [(f, s) for f, s in zip(files, summaries) if not s["failed"]]
    if not done:
        raise TraceFormatError(failed[0]["error"])
    check_rank_files([t for _, s in done for t in s["traces"]])
    by_rank: dict[int, list[tuple[tuple[Location, str], dict]]] = collections.defaultdict(list)
    for f, s in done:
        by_rank[s["rank"]].append((f, s))
    # A rank of several files (successive profiler cycles): parsed again from all of them together.
    again = {r: fs_ for r, fs_ in by_rank.items() if len(fs_) > 1}
    for r, (_, s) in ((r, v[0]) for r, v in by_rank.items() if r not in again):
        fs.make_dirs(fs.join(root, f"rank={r}"))
        _move(s["out"], rank_part(root, r))
    for r in again:
        fs.make_dirs(fs.join(root, f"rank={r}"))
    rejobs = [
        tasks.ParseTask(
            tuple((_absolute(p), d) for (p, d), _ in again[r]), _absolute(rank_part(root, r)), salvage
        )
        for r in sorted(again)
    ]
    redone = executor.map(tasks.parse_rank_task, rejobs) if spread else (_parse_here(j, None) for j in rejobs)
    merged = dict(zip(sorted(again), redone))
    final = {r: (merged[r] if r in merged else v[0][1]) for r, v in by_rank.items()}
    # Sources and traces in the order the files were named (as a one-process parse lists them).
    order = {d: i for i, (_, d) in enumerate(files)}
    sources = sorted((x for s in final.values() for x in s["sources"]), key=lambda x: order[x["path"]])
    traces = sorted((x for s in final.values() for x in s["traces"]), key=lambda x: order[x["source"]])
    ranks_at_once(traces)
    warn_losses(traces)  # once, here: the tasks kept theirs quiet (they may run on other machines)
    parts = [
        {"rank": r, "path": f"rank={r}/part-0.parquet", "rows": s["rows"], "steps": s["steps"]}
        for r, s in sorted(final.items())
    ]
    meta = {"sources": sources, "traces": traces, "manifest": manifest, "parts": parts}
    if failed:
        meta["failed"] = failed
    return ParseResult(
        output=root,
        folder=True,
        meta=meta,
        events=sum(p["rows"] for p in parts),
        steps=sum(p["steps"] for p in parts),
        ranks=sorted(final),
    )


def _absolute(loc: Location) -> str:
    """A location as a task receives it: a URI, or an absolute path (a Ray worker on another machine,
    or started elsewhere, has another working directory)."""
    return str(loc) if fs.is_uri(loc) else os.path.abspath(loc)


def _parse_here(task: tasks.ParseTask, progress: Optional[Progress]) -> dict:
    """parse_rank in this process, each file decoded over all cores (large files)."""
    return tasks.parse_rank(list(task.files), task.out_path, task.salvage, parallel=True, progress=progress)


def _move(src: Location, dst: Location) -> None:
    if fs.is_uri(src):
        filesystem, a = fs.filesystem(src)
        filesystem.move(a, fs.filesystem(dst)[1])
    else:
        os.replace(src, dst)


def _concatenate(root: Location, output: Location, meta: dict, force: bool) -> None:
    """The file form of a job parsed across files: its part files, rank after rank, in one file."""
    with CaptureWriter(output, force=force) as writer:
        for part in meta["parts"]:
            writer.write(read_rank(root, part["rank"], {"form": "folder", "parts": meta["parts"]}))
        writer.meta = {k: v for k, v in meta.items() if k != "parts"}


def rank_meta(meta: dict, ranks: list[int]) -> dict:
    """What a worker needs of the capture's metadata to read `ranks`: the form, and their parts."""
    if meta.get("form") != "folder":
        return {}
    want = set(ranks)
    return {"form": "folder", "parts": [p for p in meta.get("parts") or [] if int(p["rank"]) in want]}


# Ranks analysed by one task: a few together cost less per rank (the analysis is vectorised across
# ranks, and each task has a fixed cost: benchmarks/rank_costs.py), as long as every worker still gets
# several tasks and a task's events stay well within a worker's memory.
MAX_RANKS_PER_TASK = 16
MAX_ROWS_PER_TASK = 4_000_000


def rank_groups(
    meta: dict, ranks: list[int], n_workers: int, rows_per_rank: Optional[float]
) -> list[list[int]]:
    """`ranks` cut into consecutive groups, one per task (see MAX_RANKS_PER_TASK)."""
    size = max(1, min(MAX_RANKS_PER_TASK, len(ranks) // (4 * max(n_workers, 1))))
    if rows_per_rank:
        size = max(1, min(size, int(MAX_ROWS_PER_TASK // rows_per_rank)))
    return [ranks[i : i + size] for i in range(0, len(ranks), size)]


def _rows_per_rank(path: Location, meta: dict, ranks: list[int]) -> Optional[float]:
    parts = meta.get("parts")
    if parts:
        return max(int(p.get("rows", 0)) for p in parts) or None
    try:
        with fs.open_read(path) as fh:
            return pq.read_metadata(fh).num_rows / max(len(ranks), 1)
    except (OSError, pa.ArrowException):
        return None


def analyze_capture(
    path: Location,
    *,
    params: Optional[Params] = None,
    executor: Optional[Executor] = None,
    check: bool = False,
    store: bool = False,
    rank: Optional[int] = None,
    meta: Optional[dict] = None,
    step_marker: Optional[str] = None,
) -> Report:
    """Analyse the capture at `path` (file or folder) in `executor`'s workers, each reading its own
    ranks (a few per task, `rank_groups`); the driver holds only the compact per-task results and
    merges them (tracekit.analysis.merge: the report does not depend on how ranks were grouped).

    `check`: every worker checks the invariants on its ranks (against their events) and the driver
    checks the merged report; the names checked are in `report.checked`. `store` (folder form): every
    worker writes its ranks' idle rows beside their data (`rank=<r>/idle-0.parquet`) and the driver
    the report into the metadata file. `rank`: the report of that rank in full (its collective waits
    and straggler from the whole job), instead of the job's."""
    from tracekit.analysis.invariants import check_invariants
    from tracekit.analysis.merge import merge, rank_report
    from tracekit.analysis.partial import CaptureContext, Params

    params = params or Params()
    meta = meta if meta is not None else read_meta(path)
    ranks = capture_ranks(meta)
    if not ranks:
        raise CaptureFileError(f"{path}: the capture holds no rank")
    if rank is not None and rank not in ranks:
        raise TracekitError(f"rank {rank} is not in {path} (its ranks: {rank_ranges(ranks)})")
    if store and meta.get("form") != "folder":
        raise TracekitError(f"{path}: analyze_capture stores into capture folders only")
    executor = executor or LocalExecutor()
    context = CaptureContext.of(meta, step_marker)
    work = replace(params, evidence=params.evidence or check or store)
    n_workers = getattr(executor, "workers", 1)
    rest = [r for r in ranks if r != rank]
    groups = rank_groups(meta, rest, n_workers, _rows_per_rank(path, meta, ranks))
    if rank is not None:
        groups.insert(0, [rank])  # its own part: the rank's report is that part's
    jobs = [
        tasks.AnalyzeTask(
            path=_absolute(path),
            ranks=tuple(group),
            params=work,
            context=context.for_ranks(set(group)),
            meta=rank_meta(meta, group),
            check=check,
            store=store,
        )
        for group in groups
    ]
    parts = list(executor.map(tasks.analyze_rank_task, jobs))
    report = merge(parts, meta, params, path=path)
    if check:
        checked = sorted({name for p in parts for name in p.checked} | set(check_invariants(report)))
        report = replace(report, checked=tuple(checked))
    if store:
        stored = {**meta, "analysis": report.to_json()}
        for part in stored["parts"]:
            part["idle"] = f"rank={part['rank']}/{IDLE_PART_NAME}"
        write_folder_meta(path, stored, stored.pop("parts"))
    if rank is not None:
        return rank_report(parts[0], report, rank, meta, params, path)
    return report


def rank_ranges(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else str(ranks)


def check_local_staging(executor: Executor, inputs: list) -> None:
    """Traces are parsed into a temporary folder on this machine before they are analysed: tasks on
    other machines of a Ray cluster could not write there. Say what to do instead."""
    nodes = getattr(executor, "nodes", 1)
    if nodes > 1:
        raise TracekitError(
            f"{', '.join(map(str, inputs))}: trace files are parsed into a temporary folder on this "
            f"machine, which the other {nodes - 1} node(s) of the Ray cluster cannot write; parse them "
            "to storage every node reaches first (tracekit parse TRACES -o s3://bucket/capture/ --ray "
            "ADDRESS), then name that capture"
        )
