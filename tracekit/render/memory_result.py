"""`tracekit memory`'s result (tracekit.whatif.memory.MemoryResult) in text and Markdown: the devices'
memory sections (tracekit.render.memory), then the prediction."""

from __future__ import annotations

from typing import Any, Optional

from tracekit.analysis.memory_model import CATEGORIES
from tracekit.analysis.model import HostReport, Report
from tracekit.render.base import Section
from tracekit.render.markdown import write_header, write_sections
from tracekit.render.memory import human, memory_sections, oom_note
from tracekit.render.sections import manifest_parts
from tracekit.render.text import make_console, print_sections


def memory_result_sections(result: Any) -> list[Section]:
    """A tracekit.whatif.memory.MemoryResult: its devices' memory sections, then the prediction."""
    out = memory_sections(Report(capture=result.capture, devices=(), host=HostReport(), memory=result.memory))
    if result.prediction is not None:
        out.append(_prediction_section(result.prediction))
    return out


def _prediction_section(p: Any) -> Section:
    rows = []
    for d in p.devices:
        where = f"{d.rank}:host" if d.device < 0 else f"{d.rank}:{d.device}"
        rows.append(
            [
                where,
                human(d.observed_peak_allocated),
                human(d.predicted_peak_allocated),
                f"{100 * d.change:+.1f}%",
                human(d.predicted_peak_reserved) if d.predicted_peak_reserved is not None else "-",
                d.predicted_peak_phase,
                *_steps(d),
            ]
        )
    notes = []
    for d in p.devices:
        cats = ", ".join(f"{c.title} {human(d.predicted_by_category.get(c.name, 0))}" for c in CATEGORIES)
        notes.append(f"rank {d.rank} device {d.device}: at the predicted peak {cats}")
        if d.predicted_peak_allocated_upper is not None:
            notes.append(
                f"rank {d.rank} device {d.device}: under mixed precision the peak lies between "
                f"{human(d.predicted_peak_allocated)} and {human(d.predicted_peak_allocated_upper)}: up to "
                "the upper figure where float32 inputs carry float32 through the ops after them (which "
                "inputs an op took is not in the trace)"
            )
        if p.scenario.fit_gib is not None:
            if d.fit_batch_scale is None:
                notes.append(
                    f"rank {d.rank} device {d.device}: nothing fits in {p.scenario.fit_gib:g} GiB: what does "
                    "not grow with the batch is larger already"
                )
            else:
                batch = f"batch {d.fit_batch_size} (captured {d.batch_size})" if d.fit_batch_size else ""
                notes.append(
                    f"rank {d.rank} device {d.device}: fits in {p.scenario.fit_gib:g} GiB up to "
                    f"{batch or f'× {d.fit_batch_scale:.2f} the captured batch'}"
                    + (f" (× {d.fit_batch_scale:.2f})" if batch else "")
                )
        notes.extend(f"rank {d.rank} device {d.device}: {n}" for n in d.notes)
    notes.extend(p.notes)
    if any(d.predicted_step_ms is not None for d in p.devices):
        notes.append(
            "step ms: the capture's timed steps without the profiler ("
            + ", ".join(sorted({d.unprofiled_basis for d in p.devices}))
            + "), else the traced steps'; traced: "
            + "; ".join(
                f"{d.rank}:{d.device} {_ms(d.observed_step_ms)} → {_ms(d.predicted_step_ms)} ms"
                for d in p.devices
            )
        )
    notes.append(
        "a model (tracekit.whatif.memory): predicted reserved is allocated × the observed reserved/allocated "
        "ratio at the peak; docs/results/memory.md holds predictions against measured runs"
    )
    return Section(
        f"what if: {p.scenario.describe()}",
        [
            "dev",
            "peak",
            "predicted",
            "change",
            "reserved",
            "in",
            "step ms → predicted",
        ],
        rows,
        notes,
        align="rrrrrlr",
    )


def _steps(d: Any) -> list[str]:
    """A device's step time and its prediction: without the profiler where the capture timed steps so."""
    if d.unprofiled_observed_step_ms is not None:
        obs, pred = d.unprofiled_observed_step_ms, d.unprofiled_predicted_step_ms
    else:
        obs, pred = d.observed_step_ms, d.predicted_step_ms
    return ["-" if obs is None and pred is None else f"{_ms(obs)} → {_ms(pred)}"]


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def memory_header(result: Any) -> list[str]:
    parts = manifest_parts(dict(result.capture))
    lines = ["tracekit memory" + (": " + ", ".join(parts) if parts else "")]
    oom = oom_note(result.capture)
    if oom:
        lines.append(oom)
    return lines


class MemoryTextRenderer:
    name = "text"
    suffix = ".txt"

    def __init__(self, width: Optional[int] = None, color: Optional[bool] = None) -> None:
        self.width, self.color = width, color

    def render(self, result: Any, out: Any) -> None:
        console = make_console(out, self.width, self.color)
        for line in memory_header(result):
            console.print(line, style="bold", markup=False)
        print_sections(console, memory_result_sections(result))


class MemoryMarkdownRenderer:
    name = "markdown"
    suffix = ".md"

    def render(self, result: Any, out: Any) -> None:
        write_header(out, memory_header(result))
        write_sections(out, memory_result_sections(result))
