"""`tracekit analyze CAPTURE`: why was each GPU idle, step by step (text, --json, --markdown)."""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

import typer

from tracekit.analysis.options import AnalyzeOptions
from tracekit.commands.flags import OptionsFrom, emit, executor, output_options, ray_option, with_options
from tracekit.render.output import Output


@output_options(
    "Overwrite --output if it exists; with --store, rewrite a capture that is read-only or another user's."
)
@with_options
def analyze(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (a .parquet file or a capture folder), or trace files / run folders parsed on the "
        "fly (one file per rank); local paths or URIs (s3://bucket/capture/, and any filesystem pyarrow "
        "or fsspec knows).",
    ),
    opts: AnalyzeOptions = OptionsFrom(AnalyzeOptions),  # type: ignore[assignment]  # its flags
    ray: Optional[str] = ray_option(),
    *,
    out: Output,
) -> None:
    """Attribute every nanosecond of GPU idle time in each step to a cause.

    A job of more than 8 ranks (with --no-savings: of more than one rank, or any with --ray) is analysed
    in worker processes, a few ranks each; only compact per-rank results come back, so memory does not
    grow with the job's events (the savings, which replay the whole job's graph, are then not computed).
    With more than 8 ranks the text and Markdown reports summarise the job (step time, each figure's
    spread across ranks, stragglers, the ranks that differ); --rank R shows one rank in full, --json
    keeps every rank."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    # a report printed keeps no intervals; --force also lets --store rewrite a capture not the user's
    opts = replace(opts, evidence=False, force=out.force)
    with executor(ray) as ex:
        analysis = api.analyze(inputs, opts, executor=ex)
    report = analysis.report
    for name in report.checked:
        typer.echo(f"ok: {name}", err=True)
    if opts.store:
        typer.echo(f"stored the analysis in {analysis.stored}", err=True)
    emit(out, report)
