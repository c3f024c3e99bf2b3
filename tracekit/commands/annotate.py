"""`tracekit annotate CAPTURE -o out.pt.trace.json.gz`: the trace plus a track of labelled idle gaps."""

from __future__ import annotations

from pathlib import Path

import typer

from tracekit.analysis.options import AnalyzeOptions
from tracekit.commands.flags import OptionsFrom, with_options


@with_options
def annotate(
    capture: Path = typer.Argument(
        ..., help="A trace file, a run folder with one trace, or a .parquet capture beside its run folder."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The annotated trace (.json or .json.gz)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT if it exists."),
    opts: AnalyzeOptions = OptionsFrom(AnalyzeOptions, "step"),  # type: ignore[assignment]  # --step
) -> None:
    """Write the trace with an idle-gap track (cause + evidence) for TensorBoard's trace view / Perfetto."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    done = api.annotate(capture, output, force=force, step=opts.step)
    causes = ", ".join(f"{c} {n}" for c, n in sorted(done.gaps_by_cause.items(), key=lambda kv: -kv[1]))
    typer.echo(
        f"tracekit: wrote {done.output}: {done.source.name} + {done.gaps} idle gaps ({causes or 'none'})"
    )
