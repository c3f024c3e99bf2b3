"""`tracekit parse TRACE_OR_DIR... -o capture.parquet`: profiler traces → one capture file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List

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
    from tracekit.parse import parse_to_file

    started = time.perf_counter()
    capture = parse_to_file(inputs, output, force=force, salvage=salvage)
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
