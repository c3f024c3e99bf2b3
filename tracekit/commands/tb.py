"""`tracekit tb OUT`: (re)write the TensorBoard event files of every capture under OUT."""

from __future__ import annotations

from pathlib import Path

import typer

from tracekit.analysis.options import AnalyzeOptions
from tracekit.commands.flags import OptionsFrom, with_options


@with_options
def tb(
    logdir: Path = typer.Argument(..., help="The OUT folder of `tracekit capture`, or one run folder."),
    force: bool = typer.Option(False, "--force", help="Rewrite runs that already have tracekit event files."),
    opts: AnalyzeOptions = OptionsFrom(AnalyzeOptions, "step"),  # type: ignore[assignment]  # --step
) -> None:
    """Write per-step scalars and the markdown report beside each capture's traces, for TensorBoard: the
    report `tracekit analyze` prints (with the savings)."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    for run_dir, done in api.tensorboard(logdir, force=force, analysis=opts):
        typer.echo(f"tracekit: {run_dir}: {done}")
    typer.echo(f"open them with: tracekit view {logdir}")
