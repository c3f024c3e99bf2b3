"""The options of each verb, one frozen object each: what a flag of `tracekit analyze|diff|whatif|parse`
means is defined here once, and the CLI, the notebook API, `demo`, `tb` and `annotate` all pass it to
the same function of `tracekit.api`. A new option is a field here (with its default and its check) plus
its flag in the command.

Importing this module loads no pandas (the CLI's parse path stays light); the analysis parameters are
built on demand (`AnalyzeOptions.params`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.analysis.partial import Params
    from tracekit.whatif.scenario import Scenario

__all__ = ["AnalyzeOptions", "DiffOptions", "WhatIfOptions", "ParseOptions", "options_of"]

T = TypeVar("T")


@dataclass(frozen=True)
class AnalyzeOptions:
    """How `tracekit.api.analyze` analyses a capture.

    `sync_tolerance_us`: how close (µs) a sync call must be to the start of an idle gap to have drained
    it (rule 4). `savings`: also predict the step time each host cause costs by replaying the capture
    without it (whole captures of at most `WHOLE_MAX_RANKS` ranks; tracekit.whatif.savings). `check`:
    verify the invariants. `store`: keep the result in the capture. `rank`: that rank's report in full.
    `top_gaps`: longest gaps kept as evidence (None: the analysis' default). `evidence`: keep the idle
    and busy intervals in a report analysed in this process (`Report.idle_intervals`, what
    `check_invariants(report, capture)` checks; `tracekit analyze` turns it off); workers never ship
    them. `reuse_stored`: read the analysis a previous `analyze --store` kept in the capture when
    this tracekit wrote it (what diff does), instead of analysing again. `force`: with `store`, rewrite a
    capture that is read-only or another user's (tracekit.data.files.check_rewrite)."""

    sync_tolerance_us: float = 2.0
    savings: bool = True
    check: bool = False
    store: bool = False
    force: bool = False
    rank: Optional[int] = None
    top_gaps: Optional[int] = None
    evidence: bool = True
    reuse_stored: bool = False

    def __post_init__(self) -> None:
        if not self.sync_tolerance_us >= 0:
            raise TracekitError(f"sync tolerance {self.sync_tolerance_us:g} µs: give a time >= 0")
        if self.rank is not None and self.rank < 0:
            raise TracekitError(f"rank {self.rank}: ranks are numbered from 0")
        if self.top_gaps is not None and self.top_gaps < 0:
            raise TracekitError(f"top_gaps {self.top_gaps}: give a count >= 0")

    def params(self, *, evidence: Optional[bool] = None) -> Params:
        """The analysis parameters (tracekit.analysis.partial.Params) these options give."""
        from tracekit.analysis.partial import DEFAULT_TOP_GAPS, Params

        return Params(
            sync_tolerance_ns=int(round(self.sync_tolerance_us * 1000)),
            top_gaps=DEFAULT_TOP_GAPS if self.top_gaps is None else self.top_gaps,
            evidence=self.evidence if evidence is None else evidence,
        )


@dataclass(frozen=True)
class DiffOptions:
    """How `tracekit.api.diff` compares captures. `labels`: a name per capture, in order. `confidence`:
    of the intervals (both checked by tracekit.compare.diff.check_arguments). `compare`: what the
    comparison varies on purpose (a knob, a manifest field). `top_ops`: framework ops listed.
    `analysis`: how each side is analysed when it is not an Analysis already (no savings; a stored
    analysis is reused)."""

    labels: Optional[tuple[str, ...]] = None
    confidence: float = 0.95
    compare: tuple[str, ...] = ()
    top_ops: int = 10
    analysis: AnalyzeOptions = AnalyzeOptions(savings=False, evidence=False, reuse_stored=True)

    def __post_init__(self) -> None:
        # tuples, so that the options stay hashable and nobody changes them under a running diff
        if self.labels is not None:
            object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "compare", tuple(self.compare))


@dataclass(frozen=True)
class WhatIfOptions:
    """The scenario of `tracekit.api.whatif`, as the flags of `tracekit whatif` write it: `sets`
    ("CAUSE=FACTOR", or "sync=0"), `kernels` and `ops` ("REGEX=FACTOR"), `rank_host` ("RANK=FACTOR"),
    `python_speedup` (S: a bytecode speed-up, translated into host time through the manifest's
    calibration; without one interpreter=1/S), `python_from` (B: see below); `cuda_graphs`: each step's
    device work launched as one CUDA graph, or with `cuda_graphs_region` (a regex) each outermost matching
    host event's; `loader_workers` (N DataLoader workers instead of the capture's: tracekit.whatif.loader);
    `unprofiled_step_ms`: the step time measured without the profiler, for traces without a tracekit
    manifest."""

    sets: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    rank_host: tuple[str, ...] = ()
    python_speedup: Optional[float] = None
    unprofiled_step_ms: Optional[float] = None
    cuda_graphs: bool = False
    cuda_graphs_region: Optional[str] = None
    loader_workers: Optional[int] = None
    pin_memory: bool = False  # the pageable copies made from pinned memory, without blocking the host
    # B (a capture or run folder, several joined with ','): the capture under B's interpreter, from the
    # manifests' calibrations (tracekit.whatif.python); B's measured step is shown beside the prediction.
    python_from: Optional[str] = None

    def __post_init__(self) -> None:
        for name in ("sets", "kernels", "ops", "rank_host"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.python_from is not None and self.python_speedup is not None:
            raise TracekitError("--python-from and --python-speedup both given; choose one")
        if self.unprofiled_step_ms is not None and not self.unprofiled_step_ms > 0:
            raise TracekitError(
                f"--unprofiled-step-ms {self.unprofiled_step_ms:g}: give the step time in ms, > 0"
            )

    def scenario(self) -> Scenario:
        """The scenario (tracekit.whatif.scenario.Scenario); a bad value is a ScenarioError naming it."""
        from tracekit.whatif.scenario import parse_scenario

        return parse_scenario(
            self.sets,
            self.kernels,
            self.rank_host,
            self.python_speedup,
            self.ops,
            self.cuda_graphs,
            self.cuda_graphs_region,
            self.loader_workers,
            self.pin_memory,
        )


@dataclass(frozen=True)
class ParseOptions:
    """Where and how `tracekit.api.parse` writes a capture. `folder`: a folder of one Parquet file per
    rank (None: when `output` ends with a path separator or is an existing folder, or when several trace
    files are parsed on Ray). `force`: overwrite. `salvage`: keep the complete events of a cut-off trace."""

    folder: Optional[bool] = None
    force: bool = False
    salvage: bool = False


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
