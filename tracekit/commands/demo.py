"""`tracekit demo`: capture a small default workload, parse, analyse and print (what `make demo` runs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracekit.errors import CaptureError
from tracekit.render.registry import get_renderer


def demo(
    workload: str = typer.Argument(
        "heavy_mlp", help="Built-in workload to capture (see `tracekit workloads`)."
    ),
    out: Path = typer.Option(Path("runs/demo"), "-o", "--out", help="Output folder (a TensorBoard logdir)."),
    device: Optional[str] = typer.Option(
        "cpu", "--device", help="cpu (default: small and quick anywhere) or cuda."
    ),
    knob: List[str] = typer.Option([], "--set", help="Workload knob key=value (repeatable)."),
) -> None:
    """Capture a small workload under torch.profiler, parse it and print the idle-time analysis.

    Re-running overwrites the previous demo run in OUT. Open the traces with `tracekit view OUT`."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py
    from tracekit.capture.knobs import KnobError, parse_assignments

    try:
        knobs = parse_assignments(knob)
    except KnobError as exc:
        raise CaptureError(str(exc)) from None
    parquets = api.capture(workload, out, device=device, knobs=knobs, force=True)
    for path in parquets:
        report = api.analyze(path, check=True).report  # what `tracekit analyze --check` prints
        get_renderer("text").render(report, sys.stdout)
        typer.echo(f"\ncapture: {path}   traces: {path.with_suffix('')}", err=True)
        typer.echo(f"next: `tracekit analyze {path} --json`, or `tracekit view {out}`", err=True)
