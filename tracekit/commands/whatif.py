"""`tracekit whatif CAPTURE [--set CAUSE=FACTOR]...`: the step time if a cause changed, profiled and not."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tracekit.cli import app, emit, executor, output_options, ray_option
from tracekit.render.output import Output

WHATIF_RAY_HELP = (
    "Parse a job's trace files as Ray tasks, a task per file (see `tracekit parse --ray`); the replay "
    "couples the ranks through their collectives and runs here."
)


PYTHON_SPEEDUP = typer.Option(
    None,
    "--python-speedup",
    help="S: Python bytecode runs S times faster (a pyperformance-style figure). With a calibration in the "
    "manifest, only the bytecode part of the host path between torch ops speeds up (tracekit.whatif.python); "
    "without one, interpreter time / S (an upper bound). Framework and launch stay.",
)
PYTHON_FROM = typer.Option(
    None,
    "--python-from",
    help="B (a capture or run folder; several runs joined with ','): predict this capture under B's "
    "interpreter, from the two manifests' calibrations (a torch op called from Python, the machine-speed "
    "control divided out); B's measured step time is shown beside the prediction.",
)
CUDA_GRAPHS = typer.Option(
    False,
    "--cuda-graphs",
    help="Predict the step with each step's device work launched as one CUDA graph: its interpreter, "
    "framework and launch time gone, one graph launch, kernels back to back at the graph-replay floor "
    "(kernel durations kept: what torch.compile's fusion would change is not predictable).",
)
CUDA_GRAPHS_REGION = typer.Option(
    None,
    "--cuda-graphs-region",
    help="REGEX: as --cuda-graphs, one graph per outermost host event (op, annotation, module) whose name "
    "matches, e.g. 'Optimizer.step' or 'nn.Module: Sequential'; the rest stays eager.",
)

LOADER_WORKERS = typer.Option(
    None,
    "--loader-workers",
    help="N: the DataLoader with N workers instead of the capture's (0 = load in the training process). "
    "Needs a capture that timed its fetches (tracekit capture); its producer's throughput is scaled by "
    "the worker count, up to the host's CPUs less one.",
)

PIN_MEMORY = typer.Option(
    False,
    "--pin-memory",
    help="Predict the step with the copies from pageable host memory made from pinned memory with "
    "non_blocking=True: their runtime calls (and the stream sync of a blocking copy) no longer block the "
    "host, and each copy takes a pinned copy's "
    "time (1 µs + bytes at 55 GB/s, measured on H200 hosts).",
)


@app.command()
@output_options("Overwrite --output and the --trace file if they exist.")
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
    python_speedup: Optional[float] = PYTHON_SPEEDUP,
    python_from: Optional[str] = PYTHON_FROM,
    cuda_graphs: bool = CUDA_GRAPHS,
    cuda_graphs_region: Optional[str] = CUDA_GRAPHS_REGION,
    loader_workers: Optional[int] = LOADER_WORKERS,
    pin_memory: bool = PIN_MEMORY,
    unprofiled_step_ms: Optional[float] = typer.Option(
        None,
        "--unprofiled-step-ms",
        help="The step time measured without the profiler (for traces without a tracekit manifest).",
    ),
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
    from tracekit import api
    from tracekit.data.store import check_output

    opts = api.WhatIfOptions(
        sets=tuple(sets),
        kernels=tuple(kernels),
        ops=tuple(ops),
        rank_host=tuple(rank_host),
        python_speedup=python_speedup,
        loader_workers=loader_workers,
        pin_memory=pin_memory,
        python_from=python_from,
        unprofiled_step_ms=unprofiled_step_ms,
        cuda_graphs=cuda_graphs,
        cuda_graphs_region=cuda_graphs_region,
    )
    opts.scenario()  # a bad flag fails before the --trace check and before anything is read
    if trace is not None:
        check_output(trace, out.force, inputs, others=[out.path])
    with executor(ray) as ex:  # without --ray, this machine's: the capture is loaded here
        prediction = api.whatif(inputs, opts, executor=ex, keep_trace=trace is not None)
    if trace is not None:
        prediction.write_trace(trace, replace=out.force)
        typer.echo(f"wrote {trace}", err=True)
    emit(out, prediction.result)
