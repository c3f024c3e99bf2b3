"""`AnalyzeOptions`: how a capture is analysed, each field that is a flag of `tracekit analyze` declared
once (tracekit.flags). Importing this module loads no pandas: the analysis parameters are built on
demand (`AnalyzeOptions.params`; `tracekit --help` and `tracekit parse` read these options).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from tracekit.errors import TracekitError
from tracekit.flags import Flag, checked_regex, option, parse_fields

if TYPE_CHECKING:
    from tracekit.analysis.partial import Params

__all__ = ["AnalyzeOptions", "STEP", "check_step"]


def _at_least(what: str, unit: str, advice: str) -> Callable[[Any], Any]:
    """A check that a number (or None) is >= 0; the error names the value and says what to give."""

    def check(value: Any) -> Any:
        if value is not None and not value >= 0:
            raise TracekitError(f"{what} {value:g}{unit}: {advice}")
        return value

    return check


def check_step(step: Optional[str]) -> Optional[str]:
    """--step's value: a regular expression (one line naming it when it is not)."""
    if step is None:
        return None
    if not step:
        raise TracekitError(
            "--step '': give a regex of the annotation (record_function) that starts each step"
        )
    return checked_regex(step, f"--step {step!r}")


# --step, of every command that reads steps: AnalyzeOptions.step, and the fields of DiffOptions and
# WhatIfOptions that carry it to their analyses; `tracekit info`, `tb` and `annotate` take
# AnalyzeOptions' (tracekit.commands.flags.OptionsFrom with its field named).
STEP = Flag(
    "--step",
    "A regex of the event name that starts each step: a record_function / annotation, a module "
    "('nn.Module: Net_0') or an op. Default: the ProfilerStep spans of prof.step(), else the iterations "
    "tracekit finds (a repeated annotation, module or op sequence; the report says which).",
    Optional[str],
    parse=check_step,
    identity=lambda v: True,  # which steps are measured, not what a scenario changes
    json=False,
    typer={"metavar": "REGEX"},
)


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
    this tracekit wrote it (what diff does), instead of analysing again. `step`: a regex of the event
    name (a record_function / annotation, a module or an op) that starts each step, instead of
    ProfilerStep or the iterations tracekit finds (tracekit.parse.iterations). `force`: with `store`,
    rewrite a capture that is read-only or another user's (tracekit.data.files.check_rewrite; `tracekit
    analyze` sets it from its output's --force, so it declares no flag of its own)."""

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
    step: Optional[str] = option(None, STEP)
    force: bool = False
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
