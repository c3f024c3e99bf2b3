"""`DiffOptions`: how captures are compared, each field that is a flag of `tracekit diff` declared once
(tracekit.flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tracekit.analysis.options import STEP, AnalyzeOptions
from tracekit.flags import Flag, option, parse_fields

__all__ = ["DiffOptions"]


def _tuple(value: Any) -> tuple:
    return (value,) if isinstance(value, str) else tuple(value)


def _labels(value: Any) -> Optional[tuple]:
    """None, or a name per capture (the command line's none given is None)."""
    return _tuple(value) or None if value is not None else None


@dataclass(frozen=True)
class DiffOptions:
    """How `tracekit.api.diff` compares captures; the fields with a flag are `tracekit diff`'s. `labels`:
    a name per capture, in order. `confidence`: of the intervals (both checked by
    tracekit.compare.diff.check_arguments). `compare`: what the comparison varies on purpose (a knob, a
    manifest field). `top_ops`: framework ops listed. `analysis`: how each side is analysed when it is
    not an Analysis already (no savings; a stored analysis is reused). `step`: the steps' marker of every
    side (AnalyzeOptions.step). Tuples, so that the options stay
    hashable and nobody changes them under a running diff."""

    labels: Optional[tuple[str, ...]] = option(
        None,
        Flag(
            "--label",
            "A name per capture, in order (default: run name).",
            list[str],
            parse=_labels,
        ),
    )
    compare: tuple[str, ...] = option(
        (),
        Flag(
            "--compare",
            "What the comparison varies on purpose: a knob (amp) or a manifest field (torch.version); "
            "its difference is then compared, not a reason to call the captures not comparable.",
            list[str],
            parse=_tuple,
        ),
    )
    confidence: float = option(0.95, Flag("--confidence", "Confidence of the intervals, e.g. 0.95.", float))
    top_ops: int = option(
        10,
        Flag("--top-ops", "Framework ops listed (largest change per call first).", int, typer={"min": 0}),
    )
    step: Optional[str] = option(None, STEP)
    analysis: AnalyzeOptions = AnalyzeOptions(savings=False, evidence=False, reuse_stored=True)

    def __post_init__(self) -> None:
        parse_fields(self)
