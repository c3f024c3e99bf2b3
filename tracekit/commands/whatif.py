"""`tracekit whatif CAPTURE [--set CAUSE=FACTOR]...`: the step time if a cause changed, profiled and not."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracekit.cli import app, executor, ray_option

WHATIF_RAY_HELP = (
    "Parse a job's trace files as Ray tasks, a task per file (see `tracekit parse --ray`); the replay "
    "couples the ranks through their collectives and runs here."
)


@app.command()
def whatif(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (.parquet or a capture folder), or trace files / run folders parsed on the fly (one "
        "file per rank); local paths or URIs (s3://…).",
    ),
    sets: List[str] = typer.Option(
        [],
        "--set",
        help="CAUSE=FACTOR: scale the host time of a cause (interpreter, framework, launch, dataloader; "
        "FACTOR >= 0, 0 removes it), or sync=0: blocking calls no longer wait (their work stays).",
    ),
    kernels: List[str] = typer.Option(
        [],
        "--kernels",
        help="REGEX=FACTOR: device activities whose name matches REGEX take FACTOR x their time "
        "(e.g. 'gemm=0.25').",
    ),
    ops: List[str] = typer.Option(
        [],
        "--ops",
        help="REGEX=FACTOR: framework ops (cpu_op) whose name matches REGEX take FACTOR x their host time, "
        "and so does the device work they launch; 0 removes them, their syncs' waits included "
        "(e.g. 'aten::item=0').",
    ),
    rank_host: List[str] = typer.Option(
        [],
        "--rank-host",
        help="RANK=FACTOR: scale all host time of one rank (what if the straggler were fast).",
    ),
    python_speedup: Optional[float] = typer.Option(
        None,
        "--python-speedup",
        help="S: the interpreter runs S times faster (interpreter=1/S). An assumption about the "
        "interpreter share only: framework and launch time stay.",
    ),
    unprofiled_step_ms: Optional[float] = typer.Option(
        None,
        "--unprofiled-step-ms",
        help="The step time measured without the profiler (for traces without a tracekit manifest).",
    ),
    trace: Optional[Path] = typer.Option(
        None, "--trace", help="Write the predicted timeline as a Chrome trace (OUT.pt.trace.json.gz)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --trace if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (docs/DESIGN.md)."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print the result as Markdown."),
    width: Optional[int] = typer.Option(None, "--width", min=40, help="Terminal width of the text output."),
    ray: Optional[str] = ray_option(WHATIF_RAY_HELP),
) -> None:
    """Predict the step time if a cause were removed or changed: replay the capture as a dependency
    graph (host threads, launches, streams, syncs, collectives), unchanged and changed, with and
    without the profiler's own cost."""
    from tracekit.api import load as load_inputs
    from tracekit.data.store import check_output
    from tracekit.errors import TracekitError
    from tracekit.render.whatif import RENDERERS
    from tracekit.whatif import Replayer, parse_scenario
    from tracekit.whatif import whatif as run_whatif
    from tracekit.whatif.predict import COLUMNS

    if as_json and as_markdown:
        raise TracekitError("--json and --markdown both given; pick one")
    if unprofiled_step_ms is not None and not unprofiled_step_ms > 0:
        raise TracekitError(f"--unprofiled-step-ms {unprofiled_step_ms:g}: give the step time in ms, > 0")
    scenario = parse_scenario(sets, kernels, rank_host, python_speedup, ops)
    if trace is not None:
        check_output(trace, force)
    capture = _load(inputs, ray) if ray is not None else load_inputs(*inputs, columns=COLUMNS)
    rp = Replayer.of(capture)
    result, predicted = run_whatif(capture, scenario, unprofiled_step_ms=unprofiled_step_ms, replayer=rp)
    if trace is not None:
        _write_trace(capture, rp, predicted, result, trace)
    fmt = "json" if as_json else "markdown" if as_markdown else "text"
    opts = {"width": width} if fmt == "text" else {}
    RENDERERS[fmt](**opts).render(result, sys.stdout)


def _write_trace(capture, rp, predicted, result, trace: Path) -> None:
    """The predicted timeline as a Chrome trace (atomic write)."""
    from tracekit.whatif.timeline import chrome_trace, replayed_table, write_chrome_trace

    doc = chrome_trace(replayed_table(capture.table, rp.graph, predicted), f"whatif: {result.scenario_text}")
    write_chrome_trace(doc, trace)
    typer.echo(f"wrote {trace}", err=True)


def _load(inputs: List[str], ray: str):
    """The capture, its trace files (if several) parsed as Ray tasks into a temporary capture folder."""
    import tempfile

    from tracekit.api import load as load_inputs
    from tracekit.parse.parser import find_trace_files, load_capture
    from tracekit.scale.job import check_local_staging, parse_job

    if len(inputs) == 1 and _is_capture(inputs[0]) or len(find_trace_files(inputs)) < 2:
        return load_inputs(*inputs)
    with tempfile.TemporaryDirectory(prefix="tracekit-") as tmp, executor(ray) as ex:
        check_local_staging(ex, inputs)
        parsed = parse_job(inputs, Path(tmp) / "capture", folder=True, executor=ex)
        capture = load_capture(parsed.output)
    capture.path = None  # parsed on the fly, as without --ray: the temporary folder is gone
    return capture


def _is_capture(path: str) -> bool:
    from tracekit.data.store import is_capture

    return is_capture(path)
