"""The options of each verb, one frozen object each: what a flag of `tracekit analyze|diff|whatif|parse`
means is defined once, and the CLI, the notebook API, `demo`, `tb` and `annotate` all pass it to the
same function of `tracekit.api`. A field that is a flag declares it (tracekit.flags: its flag, help and
check), and the command's Typer options are made from it (tracekit.commands.flags.with_options): a new
option is one field. `WhatIfOptions` is the what-if's scenario itself (tracekit.whatif.scenario).

Importing this module loads no pandas (the CLI's parse path stays light); the analysis parameters are
built on demand (`AnalyzeOptions.params`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from tracekit.errors import TracekitError
from tracekit.flags import Flag, option, parse_fields
from tracekit.whatif.scenario import WhatIfOptions

if TYPE_CHECKING:
    from tracekit.analysis.partial import Params

__all__ = ["AnalyzeOptions", "DiffOptions", "WhatIfOptions", "ParseOptions", "options_of"]

T = TypeVar("T")


def _at_least(what: str, unit: str, advice: str) -> Callable[[Any], Any]:
    """A check that a number (or None) is >= 0; the error names the value and says what to give."""

    def check(value: Any) -> Any:
        if value is not None and not value >= 0:
            raise TracekitError(f"{what} {value:g}{unit}: {advice}")
        return value

    return check


@dataclass(frozen=True)
class AnalyzeOptions:
    """How `tracekit.api.analyze` analyses a capture; the fields with a flag are `tracekit analyze`'s.

    `check`: verify the invariants. `store`: keep the result in the capture. `rank`: that rank's report
    in full. `sync_tolerance_us`: how close (µs) a sync call must be to the start of an idle gap to have
    drained it (rule 4). `savings`: also predict the step time each host cause costs by replaying the
    capture without it (a job analysed whole: tracekit.api.run.analyzed_whole; tracekit.whatif.savings).
    `top_gaps`: longest gaps kept as evidence (None: the analysis' default). `evidence`: keep the idle
    and busy intervals in a report analysed in this process (`Report.idle_intervals`, what
    `check_invariants(report, capture)` checks; `tracekit analyze` turns it off); workers never ship
    them. `reuse_stored`: read the analysis a previous `analyze --store` kept in the capture when
    this tracekit wrote it (what diff does), instead of analysing again."""

    check: bool = option(
        False,
        Flag("--check", "Verify the invariants (causes sum to idle, idle never overlaps busy).", bool),
    )
    store: bool = option(
        False,
        Flag(
            "--store",
            "Store the result in the capture (idle rows + report) so diff does not recompute.",
            bool,
        ),
    )
    rank: Optional[int] = option(
        None,
        Flag(
            "--rank",
            "Show this rank in full (a job of more than 8 ranks is otherwise summarised across ranks).",
            Optional[int],
            parse=_at_least("rank", "", "ranks are numbered from 0"),
            typer={"min": 0},
        ),
    )
    sync_tolerance_us: float = option(
        2.0,
        Flag(
            "--sync-tolerance-us",
            "How close (µs) a sync call must be to the start of an idle gap to have drained it.",
            float,
            parse=_at_least("sync tolerance", " µs", "give a time >= 0"),
            typer={"min": 0.0, "max": 1e6},
        ),
    )
    savings: bool = option(
        True,
        Flag(
            "--savings/--no-savings",
            "Beside each cause, the step time saved if it alone were removed, profiled and unprofiled "
            "(a replay of the capture's dependency graph, as `tracekit whatif --set CAUSE=0`).",
            bool,
        ),
    )
    top_gaps: Optional[int] = None
    evidence: bool = True
    reuse_stored: bool = False

    def __post_init__(self) -> None:
        parse_fields(self)
        _at_least("top_gaps", "", "give a count >= 0")(self.top_gaps)

    def params(self, *, evidence: Optional[bool] = None) -> Params:
        """The analysis parameters (tracekit.analysis.partial.Params) these options give."""
        from tracekit.analysis.partial import DEFAULT_TOP_GAPS, Params

        return Params(
            sync_tolerance_ns=int(round(self.sync_tolerance_us * 1000)),
            top_gaps=DEFAULT_TOP_GAPS if self.top_gaps is None else self.top_gaps,
            evidence=self.evidence if evidence is None else evidence,
        )


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
    not an Analysis already (no savings; a stored analysis is reused). Tuples, so that the options stay
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
    analysis: AnalyzeOptions = AnalyzeOptions(savings=False, evidence=False, reuse_stored=True)

    def __post_init__(self) -> None:
        parse_fields(self)


@dataclass(frozen=True)
class ParseOptions:
    """Where and how `tracekit.api.parse` writes a capture; the fields with a flag are `tracekit parse`'s.
    `force`: overwrite. `salvage`: keep the complete events of a cut-off trace. `folder`: a folder of one
    Parquet file per rank (None: when `output` ends with a path separator or is an existing folder, or
    when several trace files are parsed on Ray)."""

    force: bool = option(False, Flag("--force", "Overwrite the output if it exists.", bool))
    salvage: bool = option(
        False,
        Flag("--salvage", "Keep every complete event of a truncated trace instead of refusing it.", bool),
    )
    folder: Optional[bool] = None


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
