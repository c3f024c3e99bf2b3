"""`tracekit diff A B [C ...]`: what changed between captures (each later one against the first)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer

from tracekit.cli import app


def load_report(path: Path):  # -> tracekit.analysis.model.Report
    """The analysis of a capture: the one stored in it (`analyze --store`) when this tracekit wrote it,
    else analysed now (a capture rank by rank in worker processes). `path` is a capture (file or
    folder), a trace file or a run folder."""
    from tracekit import __version__
    from tracekit.analysis.model import REPORT_VERSION, Report
    from tracekit.data.store import is_capture, read_meta
    from tracekit.scale.job import analyze_capture, analyze_inputs

    if not is_capture(path):
        return analyze_inputs([path])[0]
    meta = read_meta(path)
    stored = meta.get("analysis")
    if (
        isinstance(stored, dict)
        and stored.get("tracekit_report") == REPORT_VERSION
        and stored.get("tracekit_version", meta.get("tracekit_version")) == __version__
    ):
        return Report.from_json(stored)
    return analyze_capture(path, meta=meta)


def _named(report, path: Path):
    """The report with the capture's path as the user named it (relative paths stay relative)."""
    return replace(report, capture={**report.capture, "path": str(path)})


def _load_side(arg: str):
    """One side of the diff: a capture, or several runs of one configuration joined with ','."""
    from tracekit.diff.group import merge_reports

    paths = [Path(p) for p in arg.split(",") if p]
    reports = [_named(load_report(p), p) for p in paths]
    if len(reports) == 1:
        return reports[0]
    names = [str(r.capture.get("run") or _label_of(p)) for r, p in zip(reports, paths)]
    return _named(merge_reports(reports, names), Path(arg))


def _label_of(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace", ".parquet"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or str(path)


@app.command()
def diff(
    captures: List[Path] = typer.Argument(
        ...,
        help="Captures to compare (.parquet, trace files or run folders); each later one against the first. "
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
) -> None:
    """Compare captures: step time, throughput, GPU utilisation, idle per cause, host dispatch gaps and
    framework op time per call, each with an interval; says plainly when captures are not comparable."""
    from tracekit.data.store import check_output
    from tracekit.diff.compare import default_labels
    from tracekit.diff.compare import diff as diff_reports
    from tracekit.errors import NotComparableError, TracekitError
    from tracekit.render.diff import JsonRenderer, MarkdownRenderer, PlotRenderer, TerminalRenderer

    if len(captures) < 2:
        raise NotComparableError(
            f"diff needs at least two captures, got {len(captures)}: `tracekit diff A B`"
        )
    if json_out and markdown:
        raise TracekitError("--json and --markdown both given; choose one")
    if label and len(label) != len(captures):
        raise TracekitError(
            f"{len(label)} --label for {len(captures)} captures; give one per capture, in order"
        )
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise TracekitError(f"--plot {plot}: the plot is a PNG; name it with .png")
        check_output(plot, force)
    reports = [_load_side(str(p)) for p in captures]
    labels = label or default_labels(reports, [_label_of(Path(str(p).split(",")[0])) for p in captures])
    result = diff_reports(reports, labels, confidence=confidence, top_ops=top_ops, compared=compare)
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
