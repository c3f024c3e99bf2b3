"""The Python API, for notebooks and scripts (docs/api.md walks through it). The CLI commands call it too.

    import tracekit as tk
    cap = tk.load("runs/heavy_mlp/py3.11.parquet")     # or a trace file, a run folder, several rank files
    a = tk.analyze(cap)                                 # an Analysis: shows as tables in Jupyter
    a.causes()                                          # pandas: idle ms per step by cause, per device
    a.steps(), a.ranks(), a.sync_sources(), a.op_stats(), a.host()
    d = tk.diff("a.parquet", "b.parquet")               # a Comparison
    d.figures()                                         # pandas: each figure in A and B, change, interval

Every figure comes from the same result objects the renderers format (`tracekit.analysis.model.Report`,
`tracekit.compare.diff.DiffResult`); the DataFrames are views of them, computed nowhere else.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import pandas as pd

from tracekit.analysis.model import CAUSES, HOST_STATES, Report
from tracekit.data.store import Capture

if TYPE_CHECKING:
    from tracekit.scale.executor import Executor

PathLike = Union[str, Path]
CaptureLike = Union[Capture, PathLike]

__all__ = ["Analysis", "Comparison", "analyze", "diff", "load"]


def load(*paths: PathLike, salvage: bool = False, columns: Optional[Sequence[str]] = None) -> Capture:
    """One capture: a `.parquet` capture, a trace file (`.pt.trace.json[.gz]`), a run folder, or several
    trace files of one job (one per rank). `salvage` keeps the complete events of a cut-off trace.
    `columns`: keep only these columns of the event table (less memory for a caller that reads no others)."""
    from tracekit.errors import TracekitError
    from tracekit.parse.parser import load_capture, parse_paths

    if not paths:
        raise TracekitError("load() needs a capture, a trace file or a run folder")
    items = [_location(p) for p in paths]
    if len(items) == 1 and not salvage:
        return load_capture(items[0], columns=columns)
    cap = parse_paths(items, salvage=salvage)
    if columns is not None:
        cap.table = cap.table.select([c for c in columns if c in cap.table.column_names])
    return cap


def analyze(capture: CaptureLike, *, sync_tolerance_us: float = 2.0, savings: bool = True) -> Analysis:
    """Attribute every nanosecond of GPU idle time in each step to a cause (docs/DESIGN.md). `savings`:
    also predict the step time each host cause costs, by replaying the capture without it (profiled and
    unprofiled; tracekit whatif, DESIGN.md "What if"), from the same frames.

    A capture named by its path (a file or a capture folder) of more than 8 ranks, or without
    `savings`, is analysed rank by rank in worker processes (tracekit.scale: memory does not grow with
    its events); the savings, which replay the whole job's graph, are then not computed, and the
    Analysis holds no Capture."""
    from tracekit.analysis.partial import Params
    from tracekit.data.store import is_capture, read_meta
    from tracekit.scale.job import analyze_capture, analyze_loaded, in_one_process, savings_skipped

    params = Params(sync_tolerance_ns=int(round(sync_tolerance_us * 1000)))
    if not isinstance(capture, Capture) and is_capture(capture):
        meta = read_meta(capture)  # read once (a round trip on object storage)
        if not in_one_process(capture, savings, meta):
            report = analyze_capture(capture, params=params, meta=meta)
            return Analysis(savings_skipped(report) if savings else report)
    cap = capture if isinstance(capture, Capture) else load(capture)
    # in this process, as `tracekit analyze` does it, keeping the idle and busy intervals (evidence)
    return Analysis(analyze_loaded(cap, replace(params, evidence=True), savings=savings), cap)


def analysis_of(path: PathLike, executor: Optional[Executor] = None) -> Report:
    """The analysis of a capture: the one stored in it (`analyze --store`) when this tracekit wrote it,
    else analysed now (a capture, file or folder, rank by rank in `executor`'s workers: processes here
    by default, or Ray). `path` is a capture, a trace file or a run folder, local or a URI."""
    from tracekit.analysis.model import REPORT_VERSION
    from tracekit.data.store import is_capture, read_meta
    from tracekit.scale.job import analyze_capture, analyze_inputs
    from tracekit.version import __version__

    if not is_capture(path):
        return analyze_inputs([_location(path)], executor=executor)[0]
    meta = read_meta(path)
    stored = meta.get("analysis")
    if (
        isinstance(stored, dict)
        and stored.get("tracekit_report") == REPORT_VERSION
        and stored.get("tracekit_version", meta.get("tracekit_version")) == __version__
    ):
        return Report.from_json(stored)
    return analyze_capture(path, meta=meta, executor=executor)


def diff(
    *captures: Union[CaptureLike, Sequence[PathLike], Analysis],
    labels: Optional[Sequence[str]] = None,
    confidence: float = 0.95,
    compare: Sequence[str] = (),
    top_ops: int = 10,
    executor: Optional[Executor] = None,
) -> Comparison:
    """Each later capture against the first, every figure with its interval. A capture is a path, a
    loaded Capture, an Analysis, or a list of paths: repeats of one configuration pooled into one side.
    `executor` runs the per-rank analyses (tracekit.scale: processes here by default, or Ray)."""
    from tracekit.compare.diff import default_labels
    from tracekit.compare.diff import diff as diff_reports
    from tracekit.errors import NotComparableError, TracekitError

    if len(captures) < 2:
        raise NotComparableError(f"diff needs at least two captures, got {len(captures)}")
    if labels is not None and len(labels) != len(captures):
        raise TracekitError(f"{len(labels)} labels for {len(captures)} captures; give one per capture")
    reports = [_side(c, executor) for c in captures]
    names = labels or default_labels(reports, [_default_label(c) for c in captures])
    return Comparison(
        diff_reports(reports, list(names), confidence=confidence, top_ops=top_ops, compared=compare)
    )


def _side(item: Any, executor: Optional[Executor] = None) -> Report:
    """One side of a diff as a Report (several runs of one configuration merged)."""
    from tracekit.compare.group import merge_reports

    if isinstance(item, Analysis):
        return item.report
    if isinstance(item, Capture):
        from tracekit.analysis.pipeline import analyze as run_analysis

        return run_analysis(item)
    if isinstance(item, (list, tuple)):
        paths = [_location(p) for p in item]
        if len(paths) == 1:
            return _named(analysis_of(paths[0], executor), paths[0])
        reports = [_named(analysis_of(p, executor), p) for p in paths]
        names = [str(r.capture.get("run") or label_of(p)) for r, p in zip(reports, paths)]
        return _named(merge_reports(reports, names), ",".join(map(str, paths)))
    return _named(analysis_of(_location(item), executor), _location(item))


def _location(item: PathLike) -> PathLike:
    """A path as a Path, a URI (s3://…) as it is (a Path would merge its '//')."""
    from tracekit.data.files import is_uri

    return item if is_uri(item) else Path(item)


def _named(report: Report, path: PathLike) -> Report:
    """The report with the capture's path as the user named it (relative paths stay relative)."""
    return replace(report, capture={**report.capture, "path": str(path)})


def _default_label(item: Any) -> str:
    if isinstance(item, Analysis):
        return str(item.report.capture.get("run") or item.report.capture.get("workload") or "capture")
    if isinstance(item, Capture):
        return label_of(item.path) if item.path is not None else "capture"
    if isinstance(item, (list, tuple)):
        return label_of(item[0])
    return label_of(item)


def label_of(path: PathLike) -> str:
    """A capture's short name from its path: the file name without the trace and Parquet suffixes."""
    from tracekit.data.files import name_of

    name = name_of(path)
    for suffix in (".gz", ".json", ".pt.trace", ".parquet"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or str(path)


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
    capture: Optional[Capture] = None

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
        profiled and unprofiled (NaN for busy and queued, or where the savings were not computed)."""
        rows = []
        nan = float("nan")
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
                    }
                )
        cols = ["rank", "device", "cause", "ms_per_step", "share"]
        return pd.DataFrame(rows, columns=cols + ["saved_ms_per_step", "saved_unprofiled_ms_per_step"])

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
            row = {"rank": h.rank, "step": h.step, "step_ms": h.dur_ns / 1e6}
            row.update({f"{s}_ms": h.breakdown_ns.get(s, 0) / 1e6 for s in HOST_STATES})
            row["dispatch_gap_ms"] = h.dispatch_gap_ns / 1e6
            row["dispatch_gaps"] = h.dispatch_gaps
            rows.append(row)
        cols = [
            "rank",
            "step",
            "step_ms",
            *(f"{s}_ms" for s in HOST_STATES),
            "dispatch_gap_ms",
            "dispatch_gaps",
        ]
        return pd.DataFrame(rows, columns=cols)

    def to_json(self) -> dict:
        """The JSON report (docs/DESIGN.md's contract), as a dict."""
        return self.report.to_json()

    def text(self, width: int = 100) -> str:
        from tracekit.render.registry import get_renderer

        return _render(get_renderer("text", width=width, color=False), self.report)

    def markdown(self) -> str:
        from tracekit.render.registry import get_renderer

        return _render(get_renderer("markdown"), self.report)

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
        return _html(title, [("ms per step", causes), ("sync sources", self.sync_sources())], notes)

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
        from tracekit.render.diff import to_json

        doc = to_json(self.result)
        rows = []
        for pair in doc["pairs"]:
            for f in pair[what]:
                rows.append(
                    {
                        "a": pair["a"],
                        "b": pair["b"],
                        "figure": f["label"],
                        "unit": f["unit"],
                        "value_a": f["a"],
                        "value_b": f["b"],
                        "change": f.get("change"),
                        "ci_low": (f.get("change_ci") or [None, None])[0],
                        "ci_high": (f.get("change_ci") or [None, None])[1],
                        "significant": f.get("significant"),
                        "verdict": f.get("verdict"),
                    }
                )
        cols = [
            "a",
            "b",
            "figure",
            "unit",
            "value_a",
            "value_b",
            "change",
            "ci_low",
            "ci_high",
            "significant",
        ]
        cols.append("verdict")
        return pd.DataFrame(rows, columns=cols)

    def to_json(self) -> dict:
        from tracekit.render.diff import to_json

        return to_json(self.result)

    def markdown(self) -> str:
        from tracekit.render.diff import MarkdownRenderer

        return _render(MarkdownRenderer(), self.result)

    def text(self, width: int = 120) -> str:
        from tracekit.render.diff import TerminalRenderer

        return _render(TerminalRenderer(width=width, color=False), self.result)

    def plot(self, path: PathLike) -> Path:
        """Write the PNG of `tracekit diff --plot` (one stacked bar per capture)."""
        from tracekit.render.diff import PlotRenderer

        return PlotRenderer().render_to(self.result, Path(path))

    def _repr_html_(self) -> str:
        return _html("tracekit diff", [("figures", self.figures()), ("framework ops", self.ops())])

    def __repr__(self) -> str:
        return self.text()
