"""Renderers of a `WhatIfResult` (text, JSON, Markdown): the same Sections as the analysis report, laid
out by the same functions; every number comes from the result."""

from __future__ import annotations

from typing import TextIO

from tracekit.analysis.model import CAUSES
from tracekit.render.base import Section
from tracekit.render.markdown import write_header, write_sections
from tracekit.render.sections import HOST_WINDOW_DIFFERS, manifest_parts
from tracekit.render.text import make_console, print_sections
from tracekit.whatif.model import WhatIfResult


def _ms(x: float) -> str:
    return f"{x:.3f}"


def _pm(median: float, spread: float) -> str:
    return f"{median:.3f} ± {spread:.3f}"


def _change(x: float) -> str:
    text = f"{100 * x:+.1f}%"
    return "+0.0%" if text == "-0.0%" else text


def _where(d) -> str:
    return f"{d.rank}:{d.device}" if d.device >= 0 else f"{d.rank}:host"


def header(r: WhatIfResult) -> list[str]:
    parts = manifest_parts(dict(r.capture))
    lines = ["tracekit whatif" + (": " + ", ".join(parts) if parts else "")]
    lines.append(f"scenario: {r.scenario_text}")
    return lines


def sections(r: WhatIfResult) -> list[Section]:
    out = []
    rows = []
    for d in r.devices:
        js = d.to_json()
        sp = js["step_ms_spread"]
        rows.append(
            [
                _where(d),
                _pm(d.observed_step_ms, sp["observed"]),
                _pm(d.replayed_step_ms, sp["replayed"]),
                _pm(d.predicted_step_ms, sp["predicted"]),
                _change(d.change),
                f"{100 * d.predicted_gpu_utilization:.1f}%" if d.device >= 0 else "-",
                _ms(js["unprofiled_predicted_step_ms"])
                if js["unprofiled_predicted_step_ms"] is not None
                else "-",
            ]
        )
    counts = {len(d.steps) for d in r.devices}
    notes = [
        f"{counts.pop()} steps per device"
        if len(counts) == 1
        else "steps: " + ", ".join(f"{_where(d)} {len(d.steps)}" for d in r.devices),
        "step: until both the host window and the device work launched in it are done (median ± "
        "1.4826 MAD over steps); replayed: the capture unchanged through the graph; change: predicted / "
        "replayed - 1",
        f"replay error (replayed vs observed, largest): {100 * r.replay_error:.2f}%",
        *_step_notes(r),
    ]
    out.append(
        Section(
            "step time (ms): observed, replayed, predicted",
            ["rank:dev", "observed", "replayed", "predicted", "change", "GPU util", "unprofiled"],
            rows,
            notes,
        )
    )
    u = r.unprofiled
    if u is not None:
        rows = [
            ["step without the profiler", _ms(u.observed_step_ms) if u.observed_step_ms is not None else "-"],
            ["replayed without the profiler", _ms(u.replayed_step_ms)],
            ["predicted without the profiler", _ms(u.predicted_step_ms)],
            ["change", _change(u.change)],
            ["profiler cost, µs per recorded event", f"{u.profiler_cost_us_per_event:.2f}"],
        ]
        rows += [
            [f"predicted at {c:g} µs/event (sensitivity)", _ms(v)] for c, v in u.predicted_step_ms_by_cost
        ]
        src = {"manifest": "the capture's manifest", "flag": "--unprofiled-step-ms", "default": "none"}[
            u.source
        ]
        out.append(
            Section(
                "without the profiler (slowest device)",
                ["", "ms"],
                rows,
                [f"unprofiled step time from: {src}", u.note, *_loader_notes(u.loader)],
            )
        )
    devs = [d for d in r.devices if d.device >= 0 and d.predicted_idle_ns_per_step]
    if devs:
        rows = [[c] + [_ms(d.predicted_idle_ns_per_step.get(c, 0.0) / 1e6) for d in devs] for c in CAUSES]
        out.append(
            Section(
                "predicted idle time by cause (ms/step, the attribution on the predicted timeline)",
                ["cause"] + [f"{d.rank}:{d.device}" for d in devs],
                rows,
                ["within the predicted steps, as `tracekit analyze` counts them"],
            )
        )
    return out


def _loader_notes(loader) -> list[str]:
    """One line per rank's input pipeline (tracekit.whatif.loader)."""
    out = []
    for lp in loader:
        who = f"rank {lp['rank']} loader"
        workers = "" if lp["workers"] is None else f", {lp['workers']} workers"
        if lp["predicted_workers"] != lp["workers"] and lp["predicted_workers"] is not None:
            workers += f" -> {lp['predicted_workers']}"
        if lp["period_ms"] is None and lp["serial_ms"] == 0 and lp["predicted_period_ms"] is None:
            text = (
                f"{who}{workers}: kept up in "
                + (
                    f"all {lp['steps']}"
                    if not lp["waited_steps"]
                    else f"{lp['steps'] - lp['waited_steps']} of {lp['steps']}"
                )
                + " timed steps (throughput unknown); the "
                f"consumer {lp['consumer_ms']:.3f} ms + fetch {lp['fetch_ms']:.3f} ms"
            )
        elif lp["serial_ms"] > 0:
            text = f"{who}{workers}: loads in the training process, {lp['serial_ms']:.3f} ms per step"
        else:
            observed = "-" if lp["period_ms"] is None else f"{lp['period_ms']:.3f}"
            paced = "paces the step" if lp["paces_step"] else "does not pace the step"
            text = (
                f"{who}{workers}: one batch per {observed} ms observed ({lp['waited_steps']} of "
                f"{lp['steps']} timed steps waited), {lp['predicted_period_ms']:.3f} ms predicted: {paced} "
                f"(consumer {lp['consumer_ms']:.3f} ms observed)"
            )
        out.append(text + (f"; {lp['note']}" if lp["note"] else ""))
    return out


def _step_notes(r: WhatIfResult) -> list[str]:
    """Per device: its host windows where they differ from its steps, and its outlier steps."""
    notes = []
    for d in r.devices:
        where = f"{d.rank}:{d.device}" if d.device >= 0 else f"{d.rank}:host"
        host, step = d.to_json()["observed_host_window_ms"], d.observed_step_ms
        if step and abs(host / step - 1) > HOST_WINDOW_DIFFERS:
            notes.append(f"{where}: host windows median {host:.3f} ms, the steps {step:.3f} ms")
        if d.outlier_steps:
            notes.append(
                f"{where}: outlier step(s), far from the median: "
                + ", ".join(f"#{s} {v / 1e6:.3f} ms" for s, v in d.outlier_steps[:5])
            )
    return notes


def footer(r: WhatIfResult) -> list[str]:
    g = r.graph
    lines = list(r.notes)
    edges = g.get("edges") or {}
    if edges:
        lines.append(
            f"graph: {g.get('nodes', 0)} nodes, "
            + ", ".join(f"{v} {k}" for k, v in sorted(edges.items(), key=lambda kv: -kv[1]))
            + " edges"
        )
    if g.get("stream_waits"):
        lines.append(f"stream waits: {g['stream_waits']}")
    return lines


class WhatIfTextRenderer:
    name = "text"
    suffix = ".txt"

    def __init__(self, width: int | None = None, color: bool | None = None) -> None:
        self.width = width
        self.color = color

    def render(self, result: WhatIfResult, out: TextIO) -> None:

        console = make_console(out, self.width, self.color)
        for line in header(result):
            console.print(line, style="bold", markup=False)
        print_sections(console, sections(result))
        lines = footer(result)
        if lines:
            console.print()
            for line in lines:
                console.print(line, markup=False)


class WhatIfMarkdownRenderer:
    name = "markdown"
    suffix = ".md"

    def render(self, result: WhatIfResult, out: TextIO) -> None:

        write_header(out, header(result))
        write_sections(out, sections(result))
        for line in footer(result):
            out.write(f"{line}\n\n")


# the JSON renderer is every result's (tracekit.render.json); the table: tracekit.render.registry
__all__ = ["WhatIfTextRenderer", "WhatIfMarkdownRenderer", "sections"]
