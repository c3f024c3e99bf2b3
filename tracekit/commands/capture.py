"""`tracekit capture WORKLOAD ... -o OUT`: run a workload (or your script) under the profiler, then parse."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tracekit.errors import CaptureError

REPEAT = typer.Option(
    1,
    "--repeat",
    help="Runs per interpreter, interleaved (A B B A A B ...: a linear drift of the machine cancels "
    "over an even number); runs are named py3.11-1, py3.11-2, ... and `tracekit diff OUT/<workload> "
    "--by python` pools them. A bounded 95% interval needs at least 4 per interpreter.",
)
NO_PARSE = typer.Option(
    False,
    "--no-parse",
    help="Only capture (traces + manifest.json per run folder); parse later with `tracekit parse` or "
    "let `tracekit diff` read the run folders (for a GPU machine without tracekit's analysis side).",
)

SCRIPT = typer.Option(
    None,
    "--script",
    help="Capture your own training script, unmodified: its own torch.profiler.profile is adopted "
    "(its schedule and trace handler kept, --schedule unused; its steps, DataLoader fetches and "
    "workers' batches timed), or it marks its steps with tracekit.capture.session (docs/capture.md).",
)


def capture(
    targets: Optional[List[str]] = typer.Argument(
        None,
        metavar="WORKLOAD [-- SCRIPT_ARGS]",
        help="A built-in workload (`tracekit workloads` lists them); with --script, the script's arguments "
        "after `--`.",
    ),
    out: Path = typer.Option(
        ..., "-o", "--out", help="Output folder: OUT/<workload>/<run>/ and <run>.parquet."
    ),
    python: Optional[List[str]] = typer.Option(
        None,
        "--python",
        help="Interpreter: a path, a command, or a version (3.9) from PATH/pyenv/conda/uv. "
        "Repeat for several; default: this one.",
    ),
    device: Optional[str] = typer.Option(
        None, "--device", help="cuda or cpu (default: cuda when available)."
    ),
    schedule: str = typer.Option(
        "wait=1,warmup=1,active=3,repeat=2",
        "--schedule",
        help="torch.profiler schedule (keys wait, warmup, active, repeat, skip_first). A DataLoader stall "
        "shows in the trace only when active exceeds the loader's prefetch depth (num_workers × "
        "prefetch_factor; the capture warns); the unprofiled steps' loader waits are recorded either way.",
    ),
    sets: Optional[List[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Set a workload knob, e.g. --set num_workers=0 (repeatable)."
    ),
    name: Optional[str] = typer.Option(
        None, "--name", help="Run name: one file name, no '/' (default: py3.11 etc.)."
    ),
    script: Optional[Path] = SCRIPT,
    repeat: int = REPEAT,
    no_parse: bool = NO_PARSE,
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace a run's earlier capture: its Parquet file, traces and manifest (other files in its "
        "folder are kept).",
    ),
) -> None:
    """Capture a workload under torch.profiler in each interpreter and parse it into Parquet."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py
    from tracekit.capture.knobs import KnobError, parse_assignments

    targets = list(targets or [])
    if script is None:
        if len(targets) != 1:
            raise CaptureError(
                "name one workload (`tracekit workloads` lists them), or pass --script train.py "
                f"(got {' '.join(targets) or 'none'})"
            )
        workload, script_args = targets[0], []
    else:
        workload, script_args = None, targets
    try:
        knobs = parse_assignments(sets or [])
    except KnobError as exc:
        raise CaptureError(str(exc)) from None
    paths = api.capture(
        workload,
        out,
        pythons=python or [],
        device=device,
        knobs=knobs,
        schedule=schedule,
        name=name,
        script=script,
        script_args=script_args,
        force=force,
        repeat=repeat,
        parse=not no_parse,
    )
    for path in paths:
        typer.echo(str(path))
