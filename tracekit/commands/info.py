"""`tracekit info CAPTURE`: what a capture holds (manifest, ranks, devices, steps, event counts)."""

from __future__ import annotations

import typer

from tracekit.analysis.options import AnalyzeOptions
from tracekit.commands.flags import OptionsFrom, emit, output_options, with_options
from tracekit.render.output import Output


@output_options()
@with_options
def info(
    capture: str = typer.Argument(
        ..., help="A capture (.parquet or a capture folder), or a trace file / run folder; a path or a URI."
    ),
    opts: AnalyzeOptions = OptionsFrom(AnalyzeOptions, "step"),  # type: ignore[assignment]  # --step
    *,
    out: Output,
) -> None:
    """Show what a capture holds: the quick look before analysing it.

    A capture is described from its metadata and row-group statistics, reading only the few columns
    the counts need, a row group at a time (constant memory); trace files are parsed first."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    emit(out, api.describe(capture, step=opts.step))
