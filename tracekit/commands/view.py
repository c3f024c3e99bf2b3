"""`tracekit view OUT`: TensorBoard on the capture folder, bound to localhost, until Ctrl-C."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tracekit.data import signals


def view(
    logdir: Path = typer.Argument(..., help="The OUT folder of `tracekit capture` (a TensorBoard logdir)."),
    port: int = typer.Option(0, "--port", help="Port on 127.0.0.1; 0 picks a free one."),
) -> None:
    """Open captures in TensorBoard: tracekit's scalars and report, and the PyTorch Profiler tab."""
    from tracekit.export.tensorboard import (  # --help imports every command: benchmarks/import_costs.py
        TensorBoardServer,
        event_files,
        find_trace_runs,
        iter_event_runs,
    )

    server = TensorBoardServer(logdir, port=port)
    # A plain `kill` stops it as Ctrl-C does (data/signals.py), so the profiler plugin's loader processes
    # are shut down too.
    try:
        url = server.start()
        traces = find_trace_runs(logdir)
        events = len(list(iter_event_runs(logdir)))
        typer.echo(
            f"TensorBoard at {url} ({len(traces)} trace runs, {events} tracekit runs); Ctrl-C stops it"
        )
        bare = [r for r in traces if not event_files(r)]
        if bare:
            typer.echo(
                f"tracekit: {len(bare)} of {len(traces)} trace runs have no tracekit scalars yet "
                f"(e.g. {bare[0]}); write them with `tracekit tb {logdir}`",
                err=True,
            )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        signals.taken()  # its normal end, not an interrupted command
        typer.echo("stopped")
