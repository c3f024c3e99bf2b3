"""`tracekit whatif CAPTURE [--set CAUSE=FACTOR]...`: the step time if a cause changed, profiled and not."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tracekit.commands.flags import OptionsFrom, emit, executor, output_options, ray_option, with_options
from tracekit.render.output import Output
from tracekit.whatif.scenario import WhatIfOptions

WHATIF_RAY_HELP = (
    "Parse a job's trace files as Ray tasks, a task per file (see `tracekit parse --ray`); the replay "
    "couples the ranks through their collectives and runs here."
)


@output_options("Overwrite --output and the --trace file if they exist.")
@with_options
def whatif(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (.parquet or a capture folder), or trace files / run folders parsed on the fly (one "
        "file per rank); local paths or URIs (s3://…).",
    ),
    opts: WhatIfOptions = OptionsFrom(WhatIfOptions),  # type: ignore[assignment]  # its flags
    trace: Optional[Path] = typer.Option(
        None, "--trace", help="Write the predicted timeline as a Chrome trace (OUT.pt.trace.json.gz)."
    ),
    ray: Optional[str] = ray_option(WHATIF_RAY_HELP),
    *,
    out: Output,
) -> None:
    """Predict the step time if a cause were removed or changed: replay the capture as a dependency
    graph (host threads, launches, streams, syncs, collectives), unchanged and changed, with and
    without the profiler's own cost."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py
    from tracekit.data.store import check_output

    if trace is not None:
        check_output(trace, out.force, inputs, others=[out.path])
    with executor(ray) as ex:  # without --ray, this machine's: the capture is loaded here
        prediction = api.whatif(inputs, opts, executor=ex, keep_trace=trace is not None)
    if trace is not None:
        prediction.write_trace(trace, replace=out.force)
        typer.echo(f"wrote {trace}", err=True)
    emit(out, prediction.result)
