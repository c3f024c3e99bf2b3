"""The options of each verb, one frozen object each, declared by the stage that reads them: what a flag of
`tracekit analyze|diff|whatif|parse` means is defined once, and the CLI, the notebook API, `demo`, `tb`
and `annotate` all pass it to the same function of `tracekit.api`. A field that is a flag declares it
(tracekit.flags: its flag, help and check), and the command's Typer options are made from it
(tracekit.commands.flags.with_options): a new option is one field.

    AnalyzeOptions   tracekit.analysis.options
    DiffOptions      tracekit.compare.options
    WhatIfOptions    tracekit.whatif.scenario (the what-if's scenario itself)
    ParseOptions     tracekit.parse.options
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional, TypeVar

from tracekit.analysis.options import AnalyzeOptions, check_step
from tracekit.compare.options import DiffOptions
from tracekit.errors import TracekitError
from tracekit.parse.options import ParseOptions
from tracekit.whatif.scenario import WhatIfOptions

__all__ = ["AnalyzeOptions", "DiffOptions", "WhatIfOptions", "ParseOptions", "MemoryOptions", "options_of"]

T = TypeVar("T")


@dataclass(frozen=True)
class MemoryOptions:
    """The memory what-if of `tracekit.api.memory` (tracekit.whatif.memory.MemoryScenario): `batch_scale`
    (F × the samples of a micro-batch), `amp` ("bf16" | "fp16"), `grad_accum` (K micro-batches of 1/K the
    batch), `checkpoint` (N checkpoint_sequential segments) or `checkpoint_modules` (a regex over the
    trace's module names), `fit_gib` (the largest batch whose reserved peak fits in that many GiB);
    `time`: also predict the step time (a replay of the capture; False: memory only); `step`: --step's
    regex, the annotation that starts each step where the trace has no ProfilerStep. No change: the
    memory report alone."""

    batch_scale: float = 1.0
    amp: Optional[str] = None
    grad_accum: int = 1
    checkpoint: int = 0
    checkpoint_modules: Optional[str] = None
    fit_gib: Optional[float] = None
    time: bool = True
    step: Optional[str] = None

    def __post_init__(self) -> None:
        check_step(self.step)
        self.scenario()

    def scenario(self) -> Any:
        """The tracekit.whatif.memory.MemoryScenario; a bad value is a TracekitError naming its flag."""
        from tracekit.whatif.memory import MemoryScenario

        return MemoryScenario(
            self.batch_scale,
            self.amp,
            self.grad_accum,
            self.checkpoint,
            self.checkpoint_modules,
            self.fit_gib,
        )



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
