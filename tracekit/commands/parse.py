"""`tracekit parse TRACE_OR_DIR... -o capture.parquet | -o capture/`: profiler traces → one capture."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, List, Optional

import typer

from tracekit.commands.flags import OptionsFrom, executor, ray_option, with_options
from tracekit.parse.options import ParseOptions


@with_options
def parse(
    inputs: List[str] = typer.Argument(
        ...,
        help="Trace files (*.pt.trace.json, *.json.gz) or run folders, one file per rank; local paths or "
        "URIs (s3://bucket/job/, and any filesystem pyarrow or fsspec knows).",
    ),
    output: str = typer.Option(
        ...,
        "-o",
        "--output",
        help="The capture to write: a .parquet file, or, ending in '/' (or an existing capture folder), "
        "a folder of one Parquet file per rank (rank=<r>/part-0.parquet, one dataset for pyarrow, "
        "DuckDB, Polars, Spark); with --ray and more than one trace file, always a folder. A local path "
        "or a URI (s3://bucket/out/).",
    ),
    opts: ParseOptions = OptionsFrom(ParseOptions),  # type: ignore[assignment]  # its flags
    ray: Optional[str] = ray_option(),
) -> None:
    """Parse PyTorch profiler traces into one typed, versioned Parquet capture (a file, or a folder of
    one file per rank).

    Of a job's rank files, one that cannot be parsed is left out: the others are written, each failed
    file is named on stderr (with its rank) and the exit status is 2. Two files of one rank whose time
    ranges overlap are refused (successive profiler cycles of a rank never overlap).

    Decoding runs in one process per CPU this command may run on (its affinity: `taskset -c 0,1`
    gives two); TRACEKIT_WORKERS=N sets the number."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    started = time.perf_counter()
    with executor(ray) as ex:
        result = api.parse(
            inputs, output, opts, executor=ex, progress=_progress_line(), files_done=_files_line()
        )
    folder = result.folder
    traces = result.meta["traces"]
    for trace in traces:
        dropped = trace.get("salvaged_dropped_bytes")
        damage = trace.get("gzip_damage")
        if dropped or damage:
            what = "decompressed bytes" if damage else "bytes"
            typer.echo(
                f"salvaged {trace['source']}{f' ({damage})' if damage else ''}: kept {trace['events']} "
                f"complete events, dropped the last {dropped or 0:,} {what}",
                err=True,
            )
    events = sum(t["events"] for t in traces)
    files = len(result.meta["sources"]) + len(result.failed)
    written = str(result.output).rstrip("/" + os.sep) + ("/" if folder else "")
    typer.echo(
        f"wrote {written}: {events} events, {len(result.ranks)} rank(s), "
        f"{result.steps} step(s) from {len(result.meta['sources'])} file(s) in "
        f"{time.perf_counter() - started:.1f} s"
    )
    for f in result.failed:
        rank = f"rank {f['rank']}" if f.get("rank") is not None else "rank unknown"
        typer.echo(f"tracekit: error: {rank} ({f['path']}) left out: {f['error']}", err=True)
    if result.failed:
        typer.echo(
            f"tracekit: {len(result.failed)} of {files} trace files failed; the capture holds the others"
            + ("" if opts.salvage else " (--salvage keeps the complete events of a truncated file)"),
            err=True,
        )
        raise typer.Exit(2)


def _progress_line() -> Optional[Callable[[str, int, int], None]]:
    """On a terminal, one stderr line per trace file, rewritten as it is decoded (at most 5× a second):
    `parsing rank-0.pt.trace.json: 42% of 1035 MiB`. Nothing when stderr is a file or a pipe."""
    if not sys.stderr.isatty():
        return None
    shown = {"at": 0.0}

    def show(name: str, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and now - shown["at"] < 0.2:
            return
        shown["at"] = now
        percent = 100 * done // total if total else 100
        sys.stderr.write(f"\rparsing {name}: {percent:3d}% of {total / 2**20:.0f} MiB")
        sys.stderr.write("\n" if finished else "")
        sys.stderr.flush()

    return show


def _files_line() -> Optional[Callable[[int, int], None]]:
    """On a terminal, one stderr line rewritten as a job's files are parsed: `parsed 37 of 256 files`."""
    if not sys.stderr.isatty():
        return None
    shown = {"at": 0.0}

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - shown["at"] < 0.2:
            return
        shown["at"] = now
        sys.stderr.write(f"\rparsed {done} of {total} files" + ("\n" if done >= total else ""))
        sys.stderr.flush()

    return show
