"""What a memory what-if changes, and every flag of `tracekit memory`: `MemoryOptions` declares each once
(its flag, help, check and description: tracekit.flags), and the CLI, the API (`tk.memory(path,
batch_scale=2)`) and the memory model (tracekit.whatif.memory) read its fields. A batch × F
(`--batch-scale`), mixed precision (`--amp`), K micro-batches (`--grad-accum`), activation checkpointing
(`--checkpoint N` segments, `--checkpoint-modules REGEX`), the largest batch in X GiB (`--fit-gib`);
every mistake is a TracekitError naming its flag (one line, exit 2). Importing it loads no pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tracekit import flags
from tracekit.analysis.options import STEP
from tracekit.errors import TracekitError
from tracekit.flags import Flag, option

AMP_DTYPES = ("bf16", "fp16")

__all__ = ["MemoryOptions", "AMP_DTYPES"]


def _check(test: Callable[[Any], bool], message: str) -> Callable[[Any], Any]:
    """A parse that keeps a value `test` accepts (None always) and refuses any other with `message`."""

    def parse(value: Any) -> Any:
        if value is not None and not test(value):
            raise TracekitError(message.format(value))
        return value

    return parse


def _regex(value: Optional[str]) -> Optional[str]:
    return None if value is None else flags.checked_regex(value, f"--checkpoint-modules {value!r}")


@dataclass(frozen=True)
class MemoryOptions:
    """The change a memory what-if predicts and how it is run, each field a flag of `tracekit memory` and a
    keyword of `tracekit.api.memory`. No change: the memory report alone."""

    batch_scale: float = option(
        1.0,
        Flag(
            "--batch-scale",
            "F: the samples of each micro-batch × F (activations, temporaries, inputs).",
            float,
            parse=_check(lambda v: v > 0 and math.isfinite(v), "--batch-scale {:g}: give a factor > 0"),
            describe=lambda o: f"batch × {o.batch_scale:g}" if o.batch_scale != 1 else None,
            typer={"metavar": "F"},
        ),
    )
    amp: Optional[str] = option(
        None,
        Flag(
            "--amp",
            "bf16 | fp16: mixed precision (autocast) where the capture ran in float32.",
            Optional[str],
            parse=_check(lambda v: v in AMP_DTYPES, "--amp {}: choose one of " + ", ".join(AMP_DTYPES)),
            describe=lambda o: f"mixed precision ({o.amp})" if o.amp else None,
        ),
    )
    grad_accum: int = option(
        1,
        Flag(
            "--grad-accum",
            "K: the step's samples as K micro-batches of 1/K each, one optimizer step.",
            int,
            parse=_check(lambda v: v >= 1, "--grad-accum {}: give a count of micro-batches >= 1"),
            describe=lambda o: (
                f"{o.grad_accum} micro-batches of 1/{o.grad_accum} the batch" if o.grad_accum > 1 else None
            ),
            typer={"metavar": "K"},
        ),
    )
    checkpoint: int = option(
        0,
        Flag(
            "--checkpoint",
            "N: activation checkpointing as torch's checkpoint_sequential with N segments (the last not "
            "checkpointed): where the trace has module calls (with_stack), cut as torch cuts them, else "
            "each forward's activations in N parts of equal bytes.",
            int,
            parse=_check(lambda v: v >= 0, "--checkpoint {}: give a number of segments >= 0"),
            describe=lambda o: f"checkpoint_sequential, {o.checkpoint} segments" if o.checkpoint else None,
            typer={"metavar": "N"},
        ),
    )
    checkpoint_modules: Optional[str] = option(
        None,
        Flag(
            "--checkpoint-modules",
            "REGEX: checkpoint each call of the modules whose name matches (the trace's `nn.Module: "
            "Name_i` spans: a capture with --set with_stack=true).",
            Optional[str],
            parse=_regex,
            describe=lambda o: (
                f"checkpointed modules /{o.checkpoint_modules}/" if o.checkpoint_modules else None
            ),
            typer={"metavar": "REGEX"},
        ),
    )
    fit_gib: Optional[float] = option(
        None,
        Flag(
            "--fit-gib",
            "X: the largest batch whose predicted peak reserved memory fits in X GiB (under the other "
            "changes); leave room for the CUDA context and other processes.",
            Optional[float],
            parse=_check(lambda v: v > 0, "--fit-gib {:g}: give a memory size in GiB > 0"),
            describe=lambda o: f"the largest batch in {o.fit_gib:g} GiB" if o.fit_gib is not None else None,
            typer={"metavar": "X"},
        ),
    )
    time: bool = option(
        True,
        Flag(
            "--time/--no-time",
            "Also predict the step time (a replay of the capture); --no-time: memory only.",
            bool,
            identity=lambda v: True,  # how the prediction is made, not what changes
            json=False,
        ),
    )
    step: Optional[str] = option(None, STEP)  # the steps' marker (AnalyzeOptions.step)

    def __post_init__(self) -> None:
        flags.parse_fields(self)
        if self.checkpoint and self.checkpoint_modules:
            raise TracekitError("--checkpoint and --checkpoint-modules both given; choose one")

    @property
    def factor(self) -> float:
        """What multiplies the per-sample blocks' sizes (batch, micro-batches)."""
        return self.batch_scale / self.grad_accum

    @property
    def changes_time(self) -> bool:
        return self.batch_scale != 1 or self.amp is not None or self.grad_accum > 1 or self.checkpointed

    @property
    def checkpointed(self) -> bool:
        return self.checkpoint > 1 or bool(self.checkpoint_modules)

    @property
    def is_identity(self) -> bool:
        return flags.is_identity(self)

    def to_json(self) -> dict:
        return {**flags.to_json(self), "text": self.describe()}

    def describe(self) -> str:
        return ", ".join(flags.describe(self)) or "unchanged"
