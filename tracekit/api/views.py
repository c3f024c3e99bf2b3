"""The notebook API's result objects: a `Report`, `DiffResult` or `WhatIfResult` with pandas views of it
(`tracekit.api` returns them). Every figure comes from the result object the renderers format; the
DataFrames are views of it, computed nowhere else.
"""

from __future__ import annotations

import html
import io
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import pandas as pd

from tracekit.analysis.advice import command as advice_command
from tracekit.analysis.memory_model import CATEGORY_NAMES
from tracekit.analysis.model import CAUSES, HOST_STATES, Report
from tracekit.data.files import Location
from tracekit.data.store import Capture
from tracekit.errors import TracekitError
from tracekit.render.diff import PlotRenderer
from tracekit.render.registry import get_renderer
from tracekit.whatif.timeline import chrome_trace, replayed_table, write_chrome_trace

PathLike = Union[str, Path]

__all__ = ["Analysis", "Comparison", "WhatIf"]


def _renderer(fmt: str, result: Any, **options: Any) -> Any:

    return get_renderer(fmt, type(result), **options)


def _render(renderer: Any, result: Any) -> str:
    buf = io.StringIO()
    renderer.render(result, buf)
    return buf.getvalue()


def _html(title: str, tables: Sequence[tuple[str, pd.DataFrame]], notes: Sequence[str] = ()) -> str:
    parts = [f"<h4>{html.escape(title)}</h4>"]
    for caption, df in tables:
        if len(df):
            parts.append(f"<b>{html.escape(caption)}</b>")
            parts.append(df.to_html(index=False, float_format=lambda x: f"{x:.3f}", na_rep=""))
    parts += [f"<p>{html.escape(n)}</p>" for n in notes]
    return "\n".join(parts)


@dataclass(frozen=True)
class Analysis:
    """One capture's analysis: the `Report` and pandas views of it."""

    report: Report
    # The capture, when it was analysed in this process. One that `analyze` read itself holds the columns
    # the analysis read (all of them with store), and once the whole of it was analysed, without check
    # or store, only its sync records (the frames held the rest); a loaded capture passed in is untouched.
    capture: Optional[Capture] = None
    stored: Optional[Location] = None  # where `store` kept the analysis

    def steps(self) -> pd.DataFrame:
        """One row per (rank, device, step): step, busy and idle-by-cause times (ms), utilisation."""
        rows = []
        for d in self.report.devices:
            for s in d.samples:
                row = {"rank": s.rank, "device": s.device, "step": s.step, "step_ms": s.dur_ns / 1e6}
                row["busy_ms"] = s.busy_ns / 1e6
                row["gpu_utilization"] = s.busy_ns / s.dur_ns if s.dur_ns else 0.0
                row.update({f"idle_{c}_ms": s.idle_ns.get(c, 0) / 1e6 for c in CAUSES})
                row["collective_wait_ms"] = s.collective_wait_ns / 1e6
                rows.append(row)
        columns = ["rank", "device", "step", "step_ms", "busy_ms", "gpu_utilization"]
        columns += [f"idle_{c}_ms" for c in CAUSES] + ["collective_wait_ms"]
        return pd.DataFrame(rows, columns=columns)

    def causes(self) -> pd.DataFrame:
        """One row per (rank, device, cause): idle ms per step and its share of the step; for the host
        causes, the step time a replay predicts saved if that cause alone were removed (ms/step),
        profiled and unprofiled (NaN for busy and queued, or where the savings were not computed);
        for `dataloader`, the loader wait the capture measured without the profiler (ms per step and
        share of the unprofiled step; NaN for the other causes and where the fetches were not timed:
        the profiled window can hide a loader stall, `Report.input_pipeline`)."""
        rows = []
        nan = float("nan")
        ip = self.report.input_pipeline
        un_wait = statistics.fmean(ip.unprofiled_wait_ms) if ip is not None else nan
        un_share = ip.unprofiled_wait_share if ip is not None else nan
        for d in self.report.devices:
            step_ms = sum(d.step_ns) / max(d.steps, 1) / 1e6
            per = d.idle_ms_per_step
            saved = d.savings_ms_per_step or {}
            for cause in ("busy", *CAUSES):
                ms = step_ms * d.gpu_utilization if cause == "busy" else per.get(cause, 0.0)
                share = ms / step_ms if step_ms else 0.0
                rows.append(
                    {
                        "rank": d.rank,
                        "device": d.device,
                        "cause": cause,
                        "ms_per_step": ms,
                        "share": share,
                        "saved_ms_per_step": saved.get("profiled", {}).get(cause, nan),
                        "saved_unprofiled_ms_per_step": saved.get("unprofiled", {}).get(cause, nan),
                        "unprofiled_ms_per_step": un_wait if cause == "dataloader" else nan,
                        "unprofiled_share": un_share if cause == "dataloader" else nan,
                    }
                )
        cols = ["rank", "device", "cause", "ms_per_step", "share"]
        cols += [
            "saved_ms_per_step",
            "saved_unprofiled_ms_per_step",
            "unprofiled_ms_per_step",
            "unprofiled_share",
        ]
        return pd.DataFrame(rows, columns=cols)

    def ranks(self) -> pd.DataFrame:
        """One row per (rank, device): mean step, utilisation, idle, collective wait, straggler."""
        rows = []
        for d in self.report.devices:
            rows.append(
                {
                    "rank": d.rank,
                    "device": d.device,
                    "name": d.name,
                    "steps": d.steps,
                    "step_ms": sum(d.step_ns) / max(d.steps, 1) / 1e6,
                    "gpu_utilization": d.gpu_utilization,
                    "idle_ms_per_step": sum(d.idle_ms_per_step.values()),
                    "collective_wait_ms_per_step": d.collective_wait_ms_per_step,
                    "straggler_rank": d.straggler_rank,
                    "throughput_per_s": d.throughput_per_s,
                }
            )
        cols = ["rank", "device", "name", "steps", "step_ms", "gpu_utilization", "idle_ms_per_step"]
        return pd.DataFrame(
            rows, columns=cols + ["collective_wait_ms_per_step", "straggler_rank", "throughput_per_s"]
        )

    def sync_sources(self) -> pd.DataFrame:
        """Where the host waited for the device: source line, function, op, call, idle ms per step."""
        rows = [
            {
                "source": s.source,
                "function": s.function,
                "op": s.op,
                "call": s.call,
                "idle_ms_per_step": s.idle_ms_per_step,
                "gaps": s.gaps,
            }
            for s in self.report.sync_sources
        ]
        return pd.DataFrame(rows, columns=["source", "function", "op", "call", "idle_ms_per_step", "gaps"])

    def runtime_calls(self) -> pd.DataFrame:
        """The `runtime` idle time by the runtime/driver call that held the host, largest first."""
        return pd.DataFrame(
            [
                {"call": c.call, "idle_ms_per_step": c.idle_ms_per_step, "gaps": c.gaps}
                for c in self.report.runtime_calls
            ],
            columns=["call", "idle_ms_per_step", "gaps"],
        )

    def advice(self) -> pd.DataFrame:
        """The advice, largest predicted saving first: the rule, the knob, the share of its step (`basis`),
        the step time the replay predicts saved per step, unprofiled and profiled (NaN: not predicted or
        not computed; `bound`: an upper bound), the least and most unprofiled saving over the profiler costs
        measured on real captures where the trace does not fix that cost (NaN where it does), the steps they
        are savings of, and the `tracekit whatif` command that reproduces the prediction."""
        cols = [
            "kind",
            "knob",
            "share",
            "basis",
            "saved_unprofiled_ms",
            "saved_unprofiled_min_ms",
            "saved_unprofiled_max_ms",
            "step_unprofiled_ms",
            "saved_profiled_ms",
            "step_profiled_ms",
            "bound",
            "command",
            "message",
            "evidence",
            "note",
        ]
        where = self.report.capture.get("path") or "CAPTURE"
        rows = []
        for a in self.report.advice:
            saved, step = a.saved_ms or {}, a.step_ms or {}
            rows.append(
                {
                    "kind": a.kind,
                    "knob": a.knob,
                    "share": a.share,
                    "basis": a.basis,
                    "saved_unprofiled_ms": saved.get("unprofiled", np.nan),
                    "saved_unprofiled_min_ms": saved.get("unprofiled_min", np.nan),
                    "saved_unprofiled_max_ms": saved.get("unprofiled_max", np.nan),
                    "step_unprofiled_ms": step.get("unprofiled", np.nan),
                    "saved_profiled_ms": saved.get("profiled", np.nan),
                    "step_profiled_ms": step.get("profiled", np.nan),
                    "bound": a.bound,
                    "command": advice_command(a, where),
                    "message": a.message,
                    "evidence": a.evidence,
                    "note": a.prediction_note,
                }
            )
        return pd.DataFrame(rows, columns=cols)

    def op_stats(self) -> pd.DataFrame:
        """Framework ops: calls and CPU µs per call and ms per step."""
        rows = []
        for o in self.report.op_stats:
            n = max(len(o.steps), 1)
            rows.append(
                {
                    "op": o.name,
                    "calls": o.calls,
                    "us_per_call": o.us_per_call,
                    "ms_per_step": sum(o.ns_per_step) / n / 1e6,
                }
            )
        return pd.DataFrame(rows, columns=["op", "calls", "us_per_call", "ms_per_step"])

    def host(self) -> pd.DataFrame:
        """One row per (rank, step) of the step thread: its time by state and its dispatch gaps (ms)."""
        rows = []
        for h in self.report.host.steps:
            # the step (tracekit.analysis.steps) and the host window the states sum to
            row = {
                "rank": h.rank,
                "step": h.step,
                "step_ms": h.step_time_ns / 1e6,
                "host_window_ms": h.dur_ns / 1e6,
            }
            row.update({f"{s}_ms": h.breakdown_ns.get(s, 0) / 1e6 for s in HOST_STATES})
            row["dispatch_gap_ms"] = h.dispatch_gap_ns / 1e6
            row["dispatch_gaps"] = h.dispatch_gaps
            rows.append(row)
        cols = [
            "rank",
            "step",
            "step_ms",
            "host_window_ms",
            *(f"{s}_ms" for s in HOST_STATES),
            "dispatch_gap_ms",
            "dispatch_gaps",
        ]
        return pd.DataFrame(rows, columns=cols)

    def memory(self) -> pd.DataFrame:
        """One row per (rank, device, step) of a capture with memory events: allocated at the step's
        start, peak and end, reserved peak, where the peak was (ms into the step, phase, op) and the
        allocated bytes at the peak by category (`<category>_bytes`, summing to `peak_allocated`;
        tracekit.analysis.memory_model.CATEGORIES). Empty without memory events."""
        rows = []
        for m in self.report.memory:
            for s in m.steps:
                row: dict[str, Any] = {"rank": m.rank, "device": m.device, "step": s.step}
                row.update(
                    allocated_start=s.allocated_start,
                    peak_allocated=s.peak_allocated,
                    allocated_end=s.allocated_end,
                    peak_reserved=s.peak_reserved,
                    peak_at_ms=s.peak_at_ns / 1e6,
                    peak_phase=s.peak_phase,
                    peak_op=s.peak_op,
                )
                row.update({f"{c}_bytes": s.by_category.get(c, 0) for c in CATEGORY_NAMES})
                row["reserve_bytes"] = s.reserve_at_peak
                rows.append(row)
        cols = ["rank", "device", "step", "allocated_start", "peak_allocated", "allocated_end"]
        cols += ["peak_reserved", "peak_at_ms", "peak_phase", "peak_op"]
        cols += [f"{c}_bytes" for c in CATEGORY_NAMES] + ["reserve_bytes"]
        return pd.DataFrame(rows, columns=cols)

    def to_json(self) -> dict:
        """The JSON report (docs/DESIGN.md's contract), as a dict."""
        return self.report.to_json()

    def text(self, width: int = 100) -> str:
        return _render(_renderer("text", self.report, width=width, color=False), self.report)

    def markdown(self) -> str:
        return _render(_renderer("markdown", self.report), self.report)

    def _repr_html_(self) -> str:
        cap = self.report.capture
        title = f"tracekit analysis: {cap.get('workload') or cap.get('path') or 'capture'}"
        causes = self.causes()
        if len(causes):
            causes = causes.pivot_table(
                index=["rank", "device"], columns="cause", values="ms_per_step", sort=False
            )
            causes = causes.reset_index()
        notes = [a.message for a in self.report.advice]
        adv = self.advice()[["kind", "knob", "saved_unprofiled_ms", "step_unprofiled_ms", "command"]]
        tables = [("ms per step", causes), ("sync sources", self.sync_sources()), ("advice", adv)]
        return _html(title, tables, notes)

    def __repr__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class Comparison:
    """A diff of captures: the `DiffResult` and pandas views of it."""

    result: Any  # tracekit.compare.diff.DiffResult

    def figures(self) -> pd.DataFrame:
        """One row per (pair, figure): A, B, change B/A − 1, its interval, significance."""
        return self._rows("figures")

    def ops(self) -> pd.DataFrame:
        """Framework ops' CPU time per call, per pair."""
        return self._rows("ops")

    def _rows(self, what: str) -> pd.DataFrame:
        rows = []
        for pair in self.result.pairs:
            for f in getattr(pair, what):
                ci = f.change_ci or (None, None)
                rows.append(
                    {
                        "a": pair.a.label,
                        "b": pair.b.label,
                        "figure": f.label,
                        "unit": f.unit,
                        "value_a": f.a,
                        "value_b": f.b,
                        "change": f.change,
                        "ci_low": ci[0],
                        "ci_high": ci[1],
                        "significant": f.significant,
                        "verdict": f.verdict,
                    }
                )
        cols = ["a", "b", "figure", "unit", "value_a", "value_b", "change", "ci_low", "ci_high"]
        return pd.DataFrame(rows, columns=[*cols, "significant", "verdict"])

    def to_json(self) -> dict:
        return self.result.to_json()

    def markdown(self) -> str:
        return _render(_renderer("markdown", self.result), self.result)

    def text(self, width: int = 120) -> str:
        return _render(_renderer("text", self.result, width=width, color=False), self.result)

    def plot(self, path: PathLike) -> Path:
        """Write the PNG of `tracekit diff --plot` (one stacked bar per capture)."""

        return PlotRenderer().render_to(self.result, Path(path))

    def _repr_html_(self) -> str:
        return _html("tracekit diff", [("figures", self.figures()), ("framework ops", self.ops())])

    def __repr__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class WhatIf:
    """A what-if prediction (`tracekit.api.whatif`): the `WhatIfResult` and pandas views of it; what
    `--trace` writes needs the replay, which it keeps."""

    result: Any  # tracekit.whatif.model.WhatIfResult
    capture: Any = field(default=None, repr=False, compare=False)
    replayer: Any = field(default=None, repr=False, compare=False)
    predicted: Any = field(default=None, repr=False, compare=False)  # the predicted node times
    traceable: bool = field(default=True, repr=False, compare=False)  # whatif(keep_trace=False): no trace

    def devices(self) -> pd.DataFrame:
        """One row per (rank, device): mean step observed, replayed unchanged, predicted (ms), the change
        predicted / replayed − 1, the predicted GPU utilisation and the unprofiled predicted step."""
        rows = []
        for d in self.result.devices:
            rows.append(
                {
                    "rank": d.rank,
                    "device": d.device,
                    "steps": len(d.steps),
                    "observed_step_ms": d.observed_step_ms,
                    "replayed_step_ms": d.replayed_step_ms,
                    "predicted_step_ms": d.predicted_step_ms,
                    "change": d.change,
                    "predicted_gpu_utilization": d.predicted_gpu_utilization if d.device >= 0 else None,
                    "unprofiled_predicted_step_ms": d.to_json()["unprofiled_predicted_step_ms"],
                }
            )
        cols = ["rank", "device", "steps", "observed_step_ms", "replayed_step_ms", "predicted_step_ms"]
        cols += ["change", "predicted_gpu_utilization", "unprofiled_predicted_step_ms"]
        return pd.DataFrame(rows, columns=cols)

    def to_json(self) -> dict:
        return self.result.to_json()

    def text(self, width: int = 100) -> str:
        return _render(_renderer("text", self.result, width=width, color=False), self.result)

    def markdown(self) -> str:
        return _render(_renderer("markdown", self.result), self.result)

    def write_trace(self, path: PathLike, *, replace: bool = True) -> Path:
        """The predicted timeline as a Chrome trace (`tracekit whatif --trace`; an atomic write, over an
        existing file only with `replace`)."""

        if not self.traceable:
            raise TracekitError(
                "this prediction was made with whatif(..., keep_trace=False), which lets the capture's "
                "table go: run whatif again without it to write the predicted timeline"
            )
        table = replayed_table(self.capture.table, self.replayer.graph, self.predicted)
        doc = chrome_trace(table, f"whatif: {self.result.scenario_text}")
        write_chrome_trace(doc, Path(path), replace=replace)
        return Path(path)

    def _repr_html_(self) -> str:
        return _html(f"tracekit whatif: {self.result.scenario_text}", [("step time (ms)", self.devices())])

    def __repr__(self) -> str:
        return self.text()
