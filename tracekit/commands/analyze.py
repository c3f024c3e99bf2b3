"""`tracekit analyze CAPTURE`: why was each GPU idle, step by step (text, --json, --markdown)."""

from __future__ import annotations

from typing import List, Optional

import typer

from tracekit.cli import app, emit, executor, output_options, ray_option
from tracekit.render.output import Output


@app.command()
@output_options(
    "Overwrite --output if it exists; with --store, rewrite a capture that is read-only or another user's."
)
def analyze(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (a .parquet file or a capture folder), or trace files / run folders parsed on the "
        "fly (one file per rank); local paths or URIs (s3://bucket/capture/, and any filesystem pyarrow "
        "or fsspec knows).",
    ),
    check: bool = typer.Option(
        False, "--check", help="Verify the invariants (causes sum to idle, idle never overlaps busy)."
    ),
    store: bool = typer.Option(
        False,
        "--store",
        help="Store the result in the capture (idle rows + report) so diff does not recompute.",
    ),
    rank: Optional[int] = typer.Option(
        None,
        "--rank",
        min=0,
        help="Show this rank in full (a job of more than 8 ranks is otherwise summarised across ranks).",
    ),
    sync_tolerance_us: float = typer.Option(
        2.0,
        "--sync-tolerance-us",
        min=0.0,
        max=1e6,
        help="How close (µs) a sync call must be to the start of an idle gap to have drained it.",
    ),
    savings: bool = typer.Option(
        True,
        "--savings/--no-savings",
        help="Beside each cause, the step time saved if it alone were removed, profiled and unprofiled "
        "(a replay of the capture's dependency graph, as `tracekit whatif --set CAUSE=0`).",
    ),
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
    from tracekit import api

    opts = api.AnalyzeOptions(
        sync_tolerance_us=sync_tolerance_us,
        savings=savings,
        check=check,
        store=store,
        force=out.force,
        rank=rank,
        evidence=False,
    )
    with executor(ray) as ex:
        analysis = api.analyze(inputs, opts, executor=ex)
    report = analysis.report
    for name in report.checked:
        typer.echo(f"ok: {name}", err=True)
    if store:
        typer.echo(f"stored the analysis in {analysis.stored}", err=True)
    emit(out, report)
