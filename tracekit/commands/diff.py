"""`tracekit diff A B [C ...]`: what changed between captures (each later one against the first)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tracekit.commands.flags import OptionsFrom, emit, executor, output_options, ray_option, with_options
from tracekit.compare.options import DiffOptions
from tracekit.errors import NotComparableError, TracekitError
from tracekit.render.output import Output


@output_options("Overwrite --output and the --plot file if they exist.")
@with_options
def diff(
    captures: List[str] = typer.Argument(
        ...,
        help="Captures to compare (.parquet, capture folders, trace files or run folders; local paths or "
        "URIs such as s3://bucket/capture/); each later one against the first. "
        "Repeats of one configuration joined with ',' (A1,A2,A3) are pooled into one side.",
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Also write a PNG: one stacked bar per capture (busy and each idle cause)."
    ),
    by: Optional[str] = typer.Option(
        None,
        "--by",
        help="Pool the runs of a folder `tracekit capture` wrote (OUT/<workload>: its Parquet files and "
        "run folders) by a manifest field: python (python.version), torch, device, a knob name, or a "
        "dotted field; one side per value, in natural order, the first the baseline.",
    ),
    opts: DiffOptions = OptionsFrom(DiffOptions),  # type: ignore[assignment]  # its flags
    ray: Optional[str] = ray_option(),
    *,
    out: Output,
) -> None:
    """Compare captures: step time, throughput, GPU utilisation, idle per cause, host dispatch gaps and
    framework op time per call, each with an interval; says plainly when captures are not comparable."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py
    from tracekit.data.files import split_joined
    from tracekit.data.store import check_output
    from tracekit.render.diff import PlotRenderer  # --plot only (benchmarks/import_costs.py)

    # A1,A2: runs pooled into one side (a name that exists is one path, commas and all)
    sides = _grouped(captures, by) if by is not None else [split_joined(str(c)) for c in captures]
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise TracekitError(f"--plot {plot}: the plot is a PNG; name it with .png")
        check_output(plot, out.force, [p for side in sides for p in side], [out.path])
    with executor(ray) as ex:
        result = api.diff(*sides, options=opts, executor=ex).result
    emit(out, result)
    if plot is not None:
        PlotRenderer().render_to(result, plot, replace=out.force)
        typer.echo(f"wrote {plot}", err=True)


def _grouped(folders: List[str], by: str) -> List[List[str]]:
    """The runs in `folders`, one side per value of `by` (tracekit.compare.group)."""
    from tracekit.compare.group import find_runs, group_runs

    runs = [r for folder in folders for r in find_runs(folder)]
    if not runs:
        raise NotComparableError(
            f"--by {by}: no captures in {', '.join(folders)} (a folder `tracekit capture -o OUT` wrote: "
            "OUT/<workload>)"
        )
    groups = group_runs(runs, by)
    if len(groups) < 2:
        raise NotComparableError(
            f"--by {by}: every capture in {', '.join(folders)} has {by} = {groups[0][0]}; nothing to compare"
        )
    typer.echo("; ".join(f"{by} {value}: {len(paths)} runs" for value, paths in groups), err=True)
    return [paths for _, paths in groups]
