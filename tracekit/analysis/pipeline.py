"""The analysis: pure functions from a capture's tables to a `tracekit.analysis.model.Report`. The
front door that every command uses is `tracekit.api.analyze` (it adds the savings, runs large jobs rank
by rank in workers and reads stored analyses); this is the stage's own function, for tests and tools.

    report = analyze(capture)            # capture: tracekit.data.store.Capture
    check_invariants(report)             # raises InvariantError when a rule is broken

Two halves (so that a job's ranks can be analysed in separate processes, tracekit.scale):
`partial.analyze_partial` does everything one set of ranks needs only its own events for (rules 1-4,
host breakdown, dispatch gaps, aggregates), `merge.merge` what needs the whole job (rule 5's collective
matching, the job-wide statistics). Here, in one process, the whole capture is one part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tracekit.analysis.attribution import DEFAULT_SYNC_TOLERANCE_NS
from tracekit.analysis.events import load_frames
from tracekit.analysis.host import Threads
from tracekit.analysis.merge import capture_info, merge
from tracekit.analysis.model import Report
from tracekit.analysis.partial import (
    DEFAULT_TOP_GAPS,
    DEFAULT_TOP_KERNELS,
    GAP_EDGES_US,
    CaptureContext,
    Params,
    analyze_partial,
    idle_by_device,
)
from tracekit.analysis.steps import cycle_starts_of

__all__ = ["analyze", "prepare", "idle_by_device", "Context", "GAP_EDGES_US"]


def analyze(
    capture: Any,
    *,
    sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
    top_gaps: int = DEFAULT_TOP_GAPS,
    top_kernels: int | None = DEFAULT_TOP_KERNELS,
    evidence: bool = True,
    context: Context | None = None,
) -> Report:
    """Attribute every nanosecond of device idle time in every step of `capture` to a cause.

    `sync_tolerance_ns`: how far (ns) a sync call may lie from the instant the device went idle and
    still count as the sync that drained the queue (rule 4). `top_gaps`: how many of the longest gaps
    to keep as evidence. `top_kernels`: kernel names kept in the launch statistics (None: all).
    `evidence`: keep the idle and busy intervals in the report (check_invariants, --store).
    `context`: `prepare(capture, sync_tolerance_ns)` when the caller keeps the frames for more work
    (the what-if savings reuse them); its tolerance is the one used."""
    if context is not None:
        sync_tolerance_ns = context.sync_tolerance_ns
    params = Params(sync_tolerance_ns, top_gaps, top_kernels, evidence)
    meta = capture.meta or {}
    part = analyze_partial(
        capture.table,
        CaptureContext.of(meta, getattr(capture, "step_marker", None)),
        params,
        frames=context.fr if context is not None else None,
        threads=context.threads if context is not None else None,
    )
    return merge([part], meta, params, path=capture.path)


@dataclass
class Context:
    """A capture's analysis frames and host threads, built once (`prepare`) for `analyze` and the
    what-if replay to share."""

    fr: Any
    threads: Optional[Threads]
    sync_tolerance_ns: int

    def hand_over(self) -> tuple[Any, Optional[Threads]]:
        """(frames, threads), the context left empty: whoever takes them holds the last references (the
        savings let them go once their graph is built, before its replays)."""
        out = (self.fr, self.threads)
        self.fr = self.threads = None
        return out


def prepare(capture: Any, sync_tolerance_ns: int, frames: Any = None, release: Any = None) -> Context:
    """The frames of the capture (`frames`: given, e.g. a replayed timeline's) and its host threads.
    `release`: `load_frames`'s, called once the table is no longer needed for the frames."""
    fr = (
        frames
        if frames is not None
        else load_frames(
            capture.table,
            cycle_starts_of(capture.meta),
            release,
            marker=getattr(capture, "step_marker", None),
        )
    )
    return Context(fr=fr, threads=Threads(fr.host, fr.steps), sync_tolerance_ns=sync_tolerance_ns)


def _capture_info(capture: Any) -> dict:
    """The report's `capture` of an in-memory capture (what-if reports share it)."""
    return capture_info(capture.meta or {}, capture.path)
