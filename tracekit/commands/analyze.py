"""`tracekit analyze CAPTURE`: why was each GPU idle, step by step (text, --json, --markdown)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracekit.cli import app, executor, ray_option


@app.command()
def analyze(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (a .parquet file or a capture folder), or trace files / run folders parsed on the "
        "fly (one file per rank); local paths or URIs (s3://bucket/capture/, and any filesystem pyarrow "
        "or fsspec knows).",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the JSON report (the contract in docs/DESIGN.md); it keeps every rank."
    ),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print the report as Markdown."),
    output: Optional[Path] = typer.Option(
        None,
        "-o",
        "--output",
        help="Write the report to this file; the format follows its suffix (.txt .json .md).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --output if it exists."),
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
        help="How close (µs) a sync call must be to the start of an idle gap to have drained it.",
    ),
    savings: bool = typer.Option(
        True,
        "--savings/--no-savings",
        help="Beside each cause, the step time saved if it alone were removed, profiled and unprofiled "
        "(a replay of the capture's dependency graph, as `tracekit whatif --set CAUSE=0`).",
    ),
    width: Optional[int] = typer.Option(None, "--width", min=40, help="Terminal width of the text report."),
    ray: Optional[str] = ray_option(),
) -> None:
    """Attribute every nanosecond of GPU idle time in each step to a cause.

    A job of more than 8 ranks (or any capture with --no-savings) is analysed in worker processes, a
    few ranks each; only compact per-rank results come back, so memory does not grow with the job's
    events (the savings, which replay the whole job's graph, are then not computed). With more than 8
    ranks the text and Markdown reports summarise the job (step time, each figure's spread across ranks,
    stragglers, the ranks that differ); --rank R shows one rank in full, --json keeps every rank."""
    from tracekit import api
    from tracekit.errors import TracekitError

    if as_json and as_markdown:
        raise TracekitError("--json and --markdown both given; pick one")
    opts = api.AnalyzeOptions(
        sync_tolerance_us=sync_tolerance_us, savings=savings, check=check, store=store, rank=rank
    )
    with executor(ray) as ex:
        analysis = api.analyze(inputs, opts, executor=ex)
    report = analysis.report
    for name in report.checked:
        typer.echo(f"ok: {name}", err=True)
    if store:
        typer.echo(f"stored the analysis in {analysis.stored}", err=True)
    fmt = "json" if as_json else "markdown" if as_markdown else "text"
    _emit(report, fmt, output, force, width, explicit=as_json or as_markdown)


def _emit(
    report, fmt: str, output: Optional[Path], force: bool, width: Optional[int], explicit: bool
) -> None:
    """Render the report to stdout, or atomically to `output` (its format from its suffix unless
    --json / --markdown chose one)."""
    from tracekit.render.registry import get_renderer, renderers

    if output is None:
        get_renderer(fmt, **({"width": width} if fmt == "text" else {})).render(report, sys.stdout)
        return
    if not explicit:
        fmt = {cls.suffix: name for name, cls in renderers().items()}.get(output.suffix, "text")
    from tracekit.data.store import atomic_path, check_output

    check_output(output, force)
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        get_renderer(fmt, **({"width": width or 100, "color": False} if fmt == "text" else {})).render(
            report, fh
        )
    typer.echo(f"wrote {output}", err=True)
