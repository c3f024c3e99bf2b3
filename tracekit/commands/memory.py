"""`tracekit memory CAPTURE [--batch-scale F] [--amp bf16] [--grad-accum K] [--checkpoint N] ...`: device
memory per step explained, and what a change would do to the peak and the step time."""

from __future__ import annotations

from typing import List

import typer

from tracekit.commands.flags import OptionsFrom, emit, output_options, with_options
from tracekit.render.output import Output
from tracekit.whatif.memory_options import MemoryOptions


@output_options("Overwrite --output if it exists.")
@with_options
def memory(
    inputs: List[str] = typer.Argument(
        ...,
        help="A capture (.parquet or a capture folder), or trace files / run folders parsed on the fly, "
        "recorded with memory events (`tracekit capture ... --set profile_memory=true`).",
    ),
    opts: MemoryOptions = OptionsFrom(MemoryOptions),  # type: ignore[assignment]  # its flags
    *,
    out: Output,
) -> None:
    """Device memory per step explained (allocated and reserved, the peak by category: parameters,
    gradients, optimizer state, activations, temporaries, inputs/outputs; its phase and op, the largest
    blocks alive there), and with a change, the predicted peak and step time."""
    from tracekit import api  # --help imports every command: benchmarks/import_costs.py

    emit(out, api.memory(inputs, opts))
