"""The analysis: pure functions from a capture's tables to a `tracekit.analysis.model.Report`.

    report = analyze(capture)            # capture: tracekit.data.store.Capture
    check_invariants(report)             # raises InvariantError when a rule is broken

Two halves (so that a job's ranks can be analysed in separate processes, tracekit.scale):
`partial.analyze_partial` does everything one set of ranks needs only its own events for (rules 1-4,
host breakdown, dispatch gaps, aggregates), `merge.merge` what needs the whole job (rule 5's collective
matching, the job-wide statistics). Here, in one process, the whole capture is one part.
"""

from __future__ import annotations

from typing import Any

from tracekit.analysis.attribution import DEFAULT_SYNC_TOLERANCE_NS
from tracekit.analysis.merge import merge
from tracekit.analysis.model import Report
from tracekit.analysis.partial import (
    DEFAULT_TOP_GAPS,
    DEFAULT_TOP_KERNELS,
    GAP_EDGES_US,
    Context,
    Params,
    analyze_partial,
)

__all__ = ["analyze", "GAP_EDGES_US"]


def analyze(
    capture: Any,
    *,
    sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
    top_gaps: int = DEFAULT_TOP_GAPS,
    top_kernels: int | None = DEFAULT_TOP_KERNELS,
    evidence: bool = True,
) -> Report:
    """Attribute every nanosecond of device idle time in every step of `capture` to a cause.

    `sync_tolerance_ns`: how far (ns) a sync call may lie from the instant the device went idle and
    still count as the sync that drained the queue (rule 4). `top_gaps`: how many of the longest gaps
    to keep as evidence. `top_kernels`: kernel names kept in the launch statistics (None: all).
    `evidence`: keep the idle and busy intervals in the report (check_invariants, --store)."""
    params = Params(sync_tolerance_ns, top_gaps, top_kernels, evidence)
    meta = capture.meta or {}
    part = analyze_partial(capture.table, Context.of(meta), params)
    return merge([part], meta, params, path=capture.path)


def _capture_info(capture: Any) -> dict:
    """The report's `capture` of an in-memory capture (what-if reports share it)."""
    from tracekit.analysis.merge import capture_info

    return capture_info(capture.meta or {}, capture.path)
