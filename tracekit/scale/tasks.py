"""The per-rank work a worker runs (a forked process, or a Ray task on another machine).

Module-level functions of picklable arguments, returning small results: a worker never ships an event
table to the driver.

    parse_rank(files, out_path, salvage)    one rank's trace files → its Parquet file; a summary dict
    analyze_rank(path, params)              one rank of a capture → its compact RankResult
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from tracekit.data.files import Location
from tracekit.errors import TracekitError
from tracekit.parse.parser import Progress

# A trace file as (path, display name); a bare path displays as its file name.
TraceFile = Union[str, Path, tuple]


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
    from tracekit.parse.parser import parse_files_to, rank_hint

    pairs = [(Path(f[0]), str(f[1])) if isinstance(f, tuple) else (Path(f), Path(f).name) for f in files]
    try:
        capture = parse_files_to(
            pairs, out_path, force=True, salvage=salvage, part=True, parallel=parallel, progress=progress
        )
    except TracekitError as exc:
        if len(pairs) != 1:
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


def parse_rank_task(job: tuple) -> dict[str, Any]:
    """parse_rank(*job): the one-argument form Executor.map calls."""
    return parse_rank(*job)
