"""`tracekit diff A B [C ...]`: what changed between captures (each later one against the first)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracekit.cli import app, executor, ray_option


@app.command()
def diff(
    captures: List[str] = typer.Argument(
        ...,
        help="Captures to compare (.parquet, capture folders, trace files or run folders; local paths or "
        "URIs such as s3://bucket/capture/); each later one against the first. "
        "Repeats of one configuration joined with ',' (A1,A2,A3) are pooled into one side.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the comparison as Markdown."),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Also write a PNG: one stacked bar per capture (busy and each idle cause)."
    ),
    label: List[str] = typer.Option([], "--label", help="A name per capture, in order (default: run name)."),
    compare: List[str] = typer.Option(
        [],
        "--compare",
        help="What the comparison varies on purpose: a knob (amp) or a manifest field (torch.version); "
        "its difference is then compared, not a reason to call the captures not comparable.",
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence of the intervals, e.g. 0.95."),
    top_ops: int = typer.Option(
        10, "--top-ops", help="Framework ops listed (largest change per call first)."
    ),
    width: Optional[int] = typer.Option(
        None, "--width", help="Terminal table width (default: the terminal's)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite the --plot file if it exists."),
    ray: Optional[str] = ray_option(),
) -> None:
    """Compare captures: step time, throughput, GPU utilisation, idle per cause, host dispatch gaps and
    framework op time per call, each with an interval; says plainly when captures are not comparable."""
    from tracekit import api
    from tracekit.data.store import check_output
    from tracekit.errors import TracekitError
    from tracekit.render.diff import JsonRenderer, MarkdownRenderer, PlotRenderer, TerminalRenderer

    if json_out and markdown:
        raise TracekitError("--json and --markdown both given; choose one")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise TracekitError(f"--plot {plot}: the plot is a PNG; name it with .png")
        check_output(plot, force)
    sides = [[p for p in str(c).split(",") if p] for c in captures]  # A1,A2: runs pooled into one side
    opts = api.DiffOptions(
        labels=tuple(label) or None, confidence=confidence, compare=tuple(compare), top_ops=top_ops
    )
    with executor(ray) as ex:
        result = api.diff(*sides, options=opts, executor=ex).result
    if json_out:
        JsonRenderer().render(result, sys.stdout)
    elif markdown:
        MarkdownRenderer().render(result, sys.stdout)
    else:
        tty = sys.stdout.isatty()
        TerminalRenderer(width=width or (None if tty else 120), color=tty).render(result, sys.stdout)
    if plot is not None:
        PlotRenderer().render_to(result, plot)
        typer.echo(f"wrote {plot}", err=True)
