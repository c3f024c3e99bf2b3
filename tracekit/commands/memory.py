"""`tracekit memory CAPTURE [--batch-scale F] [--amp bf16] [--grad-accum K] [--checkpoint N] ...`: device
memory per step explained, and what a change would do to the peak and the step time."""

from __future__ import annotations

from typing import List, Optional

import typer

from tracekit.analysis.options import AnalyzeOptions
from tracekit.commands.flags import OptionsFrom, emit, output_options, with_options
from tracekit.render.output import Output


@output_options("Overwrite --output if it exists.")
@with_options
def memory(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (.parquet or a capture folder), or trace files / run folders parsed on the fly, "
        "recorded with memory events (`tracekit capture ... --set profile_memory=true`).",
    ),
    batch_scale: float = typer.Option(
        1.0,
        "--batch-scale",
        help="F: the samples of each micro-batch × F (activations, temporaries, inputs).",
    ),
    amp: Optional[str] = typer.Option(
        None, "--amp", help="bf16 | fp16: mixed precision (autocast) where the capture ran in float32."
    ),
    grad_accum: int = typer.Option(
        1, "--grad-accum", help="K: the step's samples as K micro-batches of 1/K each, one optimizer step."
    ),
    checkpoint: int = typer.Option(
        0,
        "--checkpoint",
        help="N: activation checkpointing as torch's checkpoint_sequential with N segments (the last not "
        "checkpointed): each forward's activations cut into N parts of equal bytes.",
    ),
    checkpoint_modules: Optional[str] = typer.Option(
        None,
        "--checkpoint-modules",
        help="REGEX: checkpoint each call of the modules whose name matches (the trace's `nn.Module: "
        "Name_i` spans: a capture with --set with_stack=true).",
    ),
    fit_gib: Optional[float] = typer.Option(
        None,
        "--fit-gib",
        help="X: the largest batch whose predicted peak reserved memory fits in X GiB (under the other "
        "changes); leave room for the CUDA context and other processes.",
    ),
    no_time: bool = typer.Option(
        False, "--no-time", help="Predict memory only (no replay for the step time)."
    ),
    steps: AnalyzeOptions = OptionsFrom(AnalyzeOptions, "step"),  # type: ignore[assignment]  # --step
    *,
    out: Output,
) -> None:
    """Device memory per step explained (allocated and reserved, the peak by category: parameters,
    gradients, optimizer state, activations, temporaries, inputs/outputs; its phase and op, the largest
    blocks alive there), and with a change, the predicted peak and step time."""
    from tracekit import api

    opts = api.MemoryOptions(
        batch_scale=batch_scale,
        amp=amp,
        grad_accum=grad_accum,
        checkpoint=checkpoint,
        checkpoint_modules=checkpoint_modules,
        fit_gib=fit_gib,
        time=not no_time,
        step=steps.step,
    )
    emit(out, api.memory(inputs, opts))
