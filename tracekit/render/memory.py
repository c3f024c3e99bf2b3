"""A report's device memory (tracekit.analysis.memory) as Sections, for the text and Markdown reports."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from tracekit.analysis.memory_model import CATEGORIES, DeviceMemory, MemoryStep
from tracekit.analysis.model import Report
from tracekit.render.base import Section

TOP_STEPS = 10  # steps shown in the per-step table (the JSON has every one)
# What a report says when a capture with device activity has no memory events.
NO_MEMORY_EVENTS = (
    "device memory: the trace has no memory events (record them with `tracekit capture ... --set "
    "profile_memory=true`, or torch.profiler.profile(profile_memory=True))"
)


def oom_note(capture: Mapping[str, Any]) -> Optional[str]:
    """The capture's out-of-memory result (tracekit.capture.memory), or None."""
    oom = capture.get("oom")
    if not isinstance(oom, Mapping) or not oom.get("message"):
        return None
    return f"the capture ran {oom['message']}; the trace holds the steps before it"


def unit_of(n: int) -> tuple[str, int]:
    """The unit a table of byte figures up to n is shown in: (name, bytes)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return unit, scale
    return "B", 1


def in_unit(n: int, scale: int) -> str:
    return str(n) if scale == 1 else f"{n / scale:.1f}"


def human(n: int) -> str:
    unit, scale = unit_of(n)
    return f"{in_unit(n, scale)} {unit}"


def memory_sections(report: Report) -> list[Section]:
    """Per device: the peak by category, the steps, the largest blocks alive at the peak."""
    out: list[Section] = []
    for m in report.memory:
        peak = m.peak
        if peak is None:
            continue
        out.append(_peak_section(m, peak))
        if len(m.steps) > 1:
            out.append(_steps_section(m))
        if m.largest:
            out.append(_largest_section(m))
    return out


def _device_name(m: DeviceMemory) -> str:
    return f"rank {m.rank} host allocator" if m.host_allocator else f"rank {m.rank} device {m.device}"


def _peak_section(m: DeviceMemory, peak: MemoryStep) -> Section:
    unit, scale = unit_of(max(peak.peak_allocated + peak.reserve_at_peak, 1))
    total = peak.peak_allocated or 1
    rows = [
        [c.title, in_unit(peak.by_category.get(c.name, 0), scale)]
        + [f"{100 * peak.by_category.get(c.name, 0) / total:.1f}%"]
        for c in CATEGORIES
    ]
    rows.append(["allocated at the peak", in_unit(peak.peak_allocated, scale), "100.0%"])
    if not m.host_allocator:
        rows.append(["reserve (reserved, not allocated)", in_unit(peak.reserve_at_peak, scale), ""])
    return Section(
        f"{_device_name(m)}: device memory at its peak (step {peak.step})",
        ["", unit, "% of peak"],
        rows,
        _peak_notes(m, peak),
    )


def _peak_notes(m: DeviceMemory, peak: MemoryStep) -> list[str]:
    where = f"in {peak.peak_op}" if peak.peak_op else "outside any op"
    of = f" of {human(m.device_total)}" if m.device_total else ""
    reserved = "" if m.host_allocator else f" (reserved up to {human(peak.peak_reserved)} in the step)"
    notes = [
        f"peak {human(peak.peak_allocated)}{of} allocated{reserved} in step {peak.step}, "
        f"{peak.peak_at_ns / 1e6:.3f} ms into it, in {peak.peak_phase}, {where}"
    ]
    if m.allocator_peak:
        diff = peak.peak_allocated / m.allocator_peak - 1
        notes.append(
            f"the allocator's own peak of that step (max_memory_allocated, read by the capture): "
            f"{human(m.allocator_peak)} ({diff:+.1%})"
        )
    if m.host_allocator:
        notes.append(
            "the host's (CPU) allocator reports only what it allocated while the profiler ran: its figures "
            "start from zero and hold no parameters or state allocated before"
        )
    if not m.addresses:
        notes.append(
            "the capture's memory events carry no block addresses (parsed by an older tracekit): lifetimes "
            "and categories cannot be told; parse the trace files again (`tracekit parse`)"
        )
    elif not m.model and not m.host_allocator:
        notes.append(
            "what was allocated before the trace and never freed in it is `unattributed`: the capture "
            "recorded no model (parameters, gradients, optimizer state; `tracekit capture` records them)"
        )
    notes.extend(memory_warnings(m))
    return notes


def memory_warnings(m: DeviceMemory) -> list[str]:
    """One line per kind of event that does not add up (MemoryCheck), for text, Markdown and advice."""
    c, out = m.check, []
    if c.frees_before_trace:
        out.append(
            f"{c.frees_before_trace} frees of blocks allocated before the trace began "
            f"({human(c.frees_before_trace_bytes)}): counted as memory held at its start"
            + (
                f"; {human(c.unexplained_free_bytes)} more than the start held"
                if c.unexplained_free_bytes
                else ""
            )
        )
    if c.total_mismatches:
        out.append(
            f"warning: {c.total_mismatches} of {c.events} memory events do not follow from the one before "
            "(events missing or out of order); the allocator's totals are used"
        )
    for n, what in (
        (c.double_allocations, "addresses allocated again before their free (the first block closed there)"),
        (c.double_frees, "frees of an address already freed (ignored)"),
        (c.size_mismatches, "frees of another size than their allocation"),
    ):
        if n:
            out.append(f"warning: {n} {what}")
    if c.excess_bytes:
        out.append(
            f"warning: live blocks exceed the allocator's total by up to {human(c.excess_bytes)} (events "
            "missing): taken off temporaries first"
        )
    if c.after_last_step:
        out.append(
            f"warning: {c.after_last_step} memory events after the last step window of their profiler cycle "
            "(a trace cut mid-step?): in no step's figures"
        )
    return out


def _steps_section(m: DeviceMemory) -> Section:
    top = max(s.peak_reserved for s in m.steps)
    unit, scale = unit_of(max(top, max(s.peak_allocated for s in m.steps), 1))
    reserved = not m.host_allocator  # the host's allocator reserves nothing
    rows = [
        [str(s.step), in_unit(s.allocated_start, scale), in_unit(s.peak_allocated, scale)]
        + [in_unit(s.allocated_end, scale)]
        + ([in_unit(s.peak_reserved, scale)] if reserved else [])
        + [s.peak_phase, _short(s.peak_op)]
        for s in m.steps[:TOP_STEPS]
    ]
    notes = [] if len(m.steps) <= TOP_STEPS else [f"{len(m.steps) - TOP_STEPS} more steps in the JSON report"]
    columns = ["step", "at start", "peak", "at end"] + (["reserved peak"] if reserved else [])
    return Section(
        f"{_device_name(m)}: memory per step ({unit})",
        columns + ["peak in", "op at peak"],
        rows,
        notes,
        align="r" * len(columns) + "ll",
    )


def _largest_section(m: DeviceMemory) -> Section:
    rows = []
    titles = {c.name: c.title for c in CATEGORIES}
    for b in m.largest:
        made = "before the trace" if b.phase == "before" else f"{_short(b.op, 32)} ({b.phase})"
        rows.append(
            [
                human(b.bytes),
                titles.get(b.category, b.category),
                made,
                _at(b.alloc_step, b.alloc_at_ns),
                _at(b.free_step, b.free_at_ns) if b.free_step is not None else "not in the trace",
            ]
        )
    return Section(
        f"{_device_name(m)}: largest blocks alive at the peak",
        ["size", "category", "allocated in", "allocated (step @ ms)", "freed (step @ ms)"],
        rows,
        align="rllll",
    )


def _at(step: Optional[int], at_ns: Optional[int]) -> str:
    if step is None:
        return "-"
    return f"#{step} @ {at_ns / 1e6:.3f}" if at_ns is not None else f"#{step}"


def _short(name: Optional[str], width: int = 40) -> str:
    if not name:
        return "-"
    return name if len(name) <= width else name[: width - 1] + "…"
