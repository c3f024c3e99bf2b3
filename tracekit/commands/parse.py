"""`tracekit parse TRACE_OR_DIR... -o capture.parquet`: profiler traces → one capture file."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

import typer

from tracekit.cli import app


@app.command()
def parse(
    inputs: List[Path] = typer.Argument(
        ..., help="Trace files (*.pt.trace.json, *.json.gz) or run folders; one file per rank."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The capture file to write (.parquet)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output if it exists."),
    salvage: bool = typer.Option(
        False, "--salvage", help="Keep every complete event of a truncated trace instead of refusing it."
    ),
) -> None:
    """Parse PyTorch profiler traces into one typed, versioned Parquet capture file."""
    from tracekit.parse.parser import parse_to_file

    started = time.perf_counter()
    capture = parse_to_file(inputs, output, force=force, salvage=salvage, progress=_progress_line())
    for trace in capture.traces:
        dropped = trace.get("salvaged_dropped_bytes")
        if dropped:
            typer.echo(
                f"salvaged {trace['source']}: kept {trace['events']} complete events, "
                f"dropped the last {dropped} bytes",
                err=True,
            )
    events = sum(t["events"] for t in capture.traces)
    ranks = sorted({t["rank"] for t in capture.traces})
    steps = capture.rows_by_kind().get("step", 0)  # the returned capture holds the derived rows
    typer.echo(
        f"wrote {output}: {events} events, {len(ranks)} rank(s), {steps} step(s) "
        f"from {len(capture.meta['sources'])} file(s) in {time.perf_counter() - started:.1f} s"
    )


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
