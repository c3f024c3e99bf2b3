"""The options of each verb, one frozen object each, declared by the stage that reads them: what a flag of
`tracekit analyze|diff|whatif|memory|parse` means is defined once, and the CLI, the notebook API, `demo`, `tb`
and `annotate` all pass it to the same function of `tracekit.api`. A field that is a flag declares it
(tracekit.flags: its flag, help and check), and the command's Typer options are made from it
(tracekit.commands.flags.with_options): a new option is one field.

    AnalyzeOptions   tracekit.analysis.options
    DiffOptions      tracekit.compare.options
    WhatIfOptions    tracekit.whatif.scenario (the what-if's scenario itself)
    MemoryOptions    tracekit.whatif.memory_options (the memory what-if's change itself)
    ParseOptions     tracekit.parse.options
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional, TypeVar

from tracekit.analysis.options import AnalyzeOptions
from tracekit.compare.options import DiffOptions
from tracekit.errors import TracekitError
from tracekit.parse.options import ParseOptions
from tracekit.whatif.memory_options import MemoryOptions
from tracekit.whatif.scenario import WhatIfOptions

__all__ = ["AnalyzeOptions", "DiffOptions", "WhatIfOptions", "ParseOptions", "MemoryOptions", "options_of"]

T = TypeVar("T")


def options_of(cls: type[T], options: Optional[T], given: dict[str, Any]) -> T:
    """`options`, or the options built from keyword arguments (`tk.analyze(path, savings=False)`);
    both at once, or a keyword the options do not have, is a TracekitError naming the valid ones."""
    if options is not None:
        if given:
            raise TracekitError(f"pass either options or {', '.join(sorted(given))}, not both")
        return options
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(given) - names)
    if unknown:
        raise TracekitError(
            f"unknown option {', '.join(unknown)}; the options are {', '.join(sorted(names))}"
        )
    return cls(**given)
