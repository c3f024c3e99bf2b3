"""tracekit's analysis inside TensorBoard: event files beside the traces, and a local TensorBoard server.

A capture directory ``OUT/<workload>/<run>/`` is both a PyTorch Profiler run (its ``*.pt.trace.json.gz``)
and, once `write_run_summaries` has run, a TensorBoard run with per-step scalars and the markdown report.
Runs of one workload (py3.9, py3.11, num_workers=0 ...) carry the same tags, so they overlay in the
Scalars dashboard. The event files are written with TensorBoard's own classes (`EventFileWriter`, the
`Event`/`Summary` protos and the scalar/text plugin metadata); nothing here needs torch or TensorFlow.
TensorBoard's modules, the analysis' and the parser's are imported by the functions that use them:
`tracekit view` and `tracekit --help` import this module (benchmarks/import_costs.py).

Tags (x axis: the step number N of ProfilerStep#N):

=========================  ============================================================================
``step/time_ms``           step window length (device sample; the host step on CPU-only captures)
``step/gpu_utilization``   busy / step window, 0..1
``step/collective_wait_ms`` part of NCCL kernels spent waiting for the slowest peer
``step/dispatch_gap_ms``   host dispatch gaps of the step thread (Python between framework calls)
``idle_ms/<cause>``        idle time of the step by cause (queued, dataloader, sync, launch, framework,
                           interpreter), and ``idle_ms/total``
``host/<state>_ms``        what the step thread did: dataloader, sync, launch, framework, interpreter
``host/dispatch_gaps``     number of dispatch gaps in the step
=========================  ============================================================================

A capture with several ranks writes one sub-run per rank (``<run>/rank<r>/``) so that each rank's curves
overlay with the same rank of another capture; a rank with several devices prefixes its device tags with
``gpu<d>/``. Beyond 8 ranks, one sub-run per group of consecutive ranks (``<run>/ranks0-31/``, at most 8
groups) holds the median of each tag over the group and its max (``group_max/<tag>``). The markdown
report is the text tag ``report`` of the capture's own run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

import numpy as np

from tracekit.data import files
from tracekit.data.store import read_capture
from tracekit.errors import InputNotFound, OutputExistsError, TracekitError
from tracekit.render.registry import get_renderer

if TYPE_CHECKING:
    from tracekit.analysis.model import Report

# tracekit's event files end with this suffix: they are the only ones it replaces or removes.
EVENT_SUFFIX = ".tracekit"
EVENT_GLOB = f"events.out.tfevents.*{EVENT_SUFFIX}"
TEXT_TAG = "report"
TRACE_GLOBS = ("*.pt.trace.json", "*.pt.trace.json.gz")

StepScalars = Mapping[int, Mapping[str, float]]


class TensorBoardMissing(TracekitError):
    """TensorBoard (or the PyTorch profiler plugin) is not installed in tracekit's environment."""


def _tb():
    """Import TensorBoard's writer and protos, or say how to install them."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.scalar import metadata as scalar_metadata
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from tensorboard.util import tensor_util
    except ImportError as exc:
        raise TensorBoardMissing(
            f"TensorBoard is not installed ({exc}); reinstall tracekit: `pip install tracekit`"
        ) from None
    return event_pb2, summary_pb2, scalar_metadata, text_metadata, EventFileWriter, tensor_util


def event_files(run_dir: Path) -> list[Path]:
    """tracekit's event files directly in `run_dir` (other writers' files are never touched)."""
    return sorted(Path(run_dir).glob(EVENT_GLOB))


def write_events(
    run_dir: Path,
    scalars: StepScalars,
    texts: Mapping[str, str] | None = None,
    *,
    wall_time: float | None = None,
) -> Path:
    """Write one event file into `run_dir`: `scalars[step][tag] = value`, and markdown `texts[tag]`.

    The file is written in a temporary directory beside `run_dir` and moved in; tracekit's previous event
    files in `run_dir` are then removed, so a rewrite never shows a run twice. Returns the new file.
    """
    event_pb2, summary_pb2, scalar_metadata, text_metadata, EventFileWriter, tensor_util = _tb()

    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise files.write_error(run_dir, exc) from None
    wall = time.time() if wall_time is None else wall_time
    scalar_meta = scalar_metadata.create_summary_metadata(display_name="", description="")
    text_meta = text_metadata.create_summary_metadata(display_name="", description="")
    old = event_files(run_dir)
    tmp = files.temp_file(run_dir, folder=True)
    try:
        with _quiet_writer_thread():
            writer = EventFileWriter(str(tmp), filename_suffix=EVENT_SUFFIX)
            for step in sorted(scalars):
                values = [
                    summary_pb2.Summary.Value(
                        tag=tag,
                        metadata=scalar_meta,
                        tensor=tensor_util.make_tensor_proto(np.float32(value)),
                    )
                    for tag, value in sorted(scalars[step].items())
                ]
                if values:
                    summary = summary_pb2.Summary(value=values)
                    writer.add_event(event_pb2.Event(wall_time=wall, step=int(step), summary=summary))
            for tag, text in sorted((texts or {}).items()):
                value = summary_pb2.Summary.Value(
                    tag=tag,
                    metadata=text_meta,
                    tensor=tensor_util.make_tensor_proto(np.array(text.encode("utf-8"), dtype=object)),
                )
                first = min(scalars) if scalars else 0
                writer.add_event(
                    event_pb2.Event(
                        wall_time=wall, step=int(first), summary=summary_pb2.Summary(value=[value])
                    )
                )
            writer.close()
        (written,) = list(tmp.iterdir())
        target = run_dir / written.name
        os.replace(written, target)
    except OSError as exc:
        raise files.write_error(run_dir, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for path in old:
        if path != target:
            path.unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _quiet_writer_thread() -> Iterator[None]:
    """TensorBoard's writer thread re-raises a failed write (a full disk), which `threading` prints as a
    traceback; the writer raises it again in this thread (at close), where it becomes one line."""
    old = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__name__ != "_AsyncWriterThread":
            old(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = old


def read_events(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """Read tracekit's event files back with TensorBoard's own loader: scalars by tag, texts by tag."""
    _tb()
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.util import tensor_util

    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    texts: dict[str, str] = {}
    for path in event_files(run_dir):
        for event in event_file_loader.EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                array = tensor_util.make_ndarray(value.tensor)
                if plugin == "scalars":
                    scalars[value.tag].append((event.step, float(array)))
                elif plugin == "text":
                    texts[value.tag] = array.item().decode("utf-8")
    return dict(scalars), texts


# -- from a Report ---------------------------------------------------------------------------------------


# Beyond this many ranks, sub-runs are groups of ranks, not ranks (TensorBoard draws one curve per run).
MAX_RANK_RUNS = 8


def report_scalars(report: Report) -> dict[str, dict[int, dict[str, float]]]:
    """Per-step scalars of a report, by sub-run: "" for the capture's own run, "rank<r>" per rank
    for up to MAX_RANK_RUNS ranks, beyond that "ranks<lo>-<hi>" per group of consecutive ranks (at
    most MAX_RANK_RUNS groups): each tag is the median over the group's devices, and `group_max/<tag>`
    its max (a straggler shows there)."""
    ranks = sorted({d.rank for d in report.devices} | {h.rank for h in report.host.steps})
    if len(ranks) <= MAX_RANK_RUNS:
        sub = {r: (f"rank{r}" if len(ranks) > 1 else "") for r in ranks}
        return _scalars(report, sub, lambda rows: rows[0])
    size = -(-len(ranks) // MAX_RANK_RUNS)
    groups = [ranks[i : i + size] for i in range(0, len(ranks), size)]
    sub = {r: f"ranks{g[0]}-{g[-1]}" for g in groups for r in g}
    return _scalars(report, sub, None)


def _scalars(report: Report, sub: dict[int, str], one) -> dict[str, dict[int, dict[str, float]]]:
    """The scalars of each device and host step, by sub-run and step; where a sub-run holds several
    ranks (`one` is None), each tag's values over them become their median and max."""

    from tracekit.analysis.model import CAUSES, HOST_STATES

    values: dict[str, dict[int, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    per_rank_devices: dict[int, int] = defaultdict(int)
    for d in report.devices:
        per_rank_devices[d.rank] += 1
    device_time: set[tuple[str, int]] = set()  # (sub-run, step) with a device's step time
    for d in report.devices:
        prefix = f"gpu{d.device}/" if per_rank_devices[d.rank] > 1 and one is not None else ""
        for s in d.samples:
            row = values[sub[d.rank]][s.step]
            row[f"{prefix}step/time_ms"].append(s.dur_ns / 1e6)
            if not prefix:
                device_time.add((sub[d.rank], s.step))
            row[f"{prefix}step/gpu_utilization"].append(s.busy_ns / s.dur_ns if s.dur_ns else 0.0)
            for cause in CAUSES:
                row[f"{prefix}idle_ms/{cause}"].append(s.idle_ns.get(cause, 0) / 1e6)
            row[f"{prefix}idle_ms/total"].append(s.idle_total_ns / 1e6)
            row[f"{prefix}step/collective_wait_ms"].append(s.collective_wait_ns / 1e6)
    for m in report.memory:  # each step's peak, and its categories there (tracekit.analysis.memory)
        prefix = f"gpu{m.device}/" if per_rank_devices[m.rank] > 1 and one is not None else ""
        for ms in m.steps:
            row = values[sub[m.rank]][ms.step]
            row[f"{prefix}memory/peak_allocated_mib"].append(ms.peak_allocated / 2**20)
            row[f"{prefix}memory/peak_reserved_mib"].append(ms.peak_reserved / 2**20)
            for category, n in ms.by_category.items():
                row[f"{prefix}memory/{category}_mib"].append(n / 2**20)
    for h in report.host.steps:
        row = values[sub[h.rank]][h.step]
        if (sub[h.rank], h.step) not in device_time:  # CPU-only captures: the host step
            row["step/time_ms"].append(h.step_time_ns / 1e6)
        row["step/dispatch_gap_ms"].append(h.dispatch_gap_ns / 1e6)
        row["host/dispatch_gaps"].append(float(h.dispatch_gaps))
        for state in HOST_STATES:
            row[f"host/{state}_ms"].append(h.breakdown_ns.get(state, 0) / 1e6)
    out: dict[str, dict[int, dict[str, float]]] = {}
    for name, steps in values.items():
        out[name] = {}
        for step, row in steps.items():
            if one is not None:
                out[name][step] = {tag: one(v) for tag, v in row.items()}
                continue
            scalars = {tag: float(statistics.median(v)) for tag, v in row.items()}
            scalars.update({f"group_max/{tag}": float(max(v)) for tag, v in row.items()})
            out[name][step] = scalars
    return out


def _markdown(report: Report) -> str:

    out = io.StringIO()
    get_renderer("markdown").render(report, out)
    return out.getvalue()


def write_run_summaries(
    run_dir: Path, report: Report, *, markdown: str | None = None, force: bool = True
) -> list[Path]:
    """Write the TensorBoard event files of one capture beside its traces: per-step scalars and the
    markdown report (rendered with tracekit.render.markdown unless given). Returns the files written.

    With `force=False` a run that already has tracekit event files is refused (OutputExistsError).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputNotFound(f"{run_dir}: no such capture directory")
    by_sub = report_scalars(report)
    subs = sorted(set(by_sub) | {""})
    if not force:
        existing = [p for s in subs for p in event_files(run_dir / s if s else run_dir)]
        if existing:
            raise OutputExistsError(f"{existing[0]} exists; pass --force to rewrite the event files")
    text = _markdown(report) if markdown is None else markdown
    written = []
    for s in subs:
        texts = {TEXT_TAG: text} if s == "" else None
        written.append(write_events(run_dir / s if s else run_dir, by_sub.get(s, {}), texts))
    return written


# -- finding runs and serving --------------------------------------------------------------------------


def find_trace_runs(logdir: Path) -> list[Path]:
    """Directories under `logdir` (itself included) that hold profiler traces: the profiler plugin's runs."""
    logdir = Path(logdir)
    runs = {p.parent for pattern in TRACE_GLOBS for p in logdir.rglob(pattern)}
    return sorted(runs)


def iter_event_runs(logdir: Path) -> Iterable[Path]:
    """Directories under `logdir` holding tracekit event files."""
    return sorted({p.parent for p in Path(logdir).rglob(EVENT_GLOB)})


class TensorBoardServer:
    """A TensorBoard serving `logdir` on `host:port` in this process (port 0: a free port)."""

    def __init__(self, logdir: Path, *, host: str = "127.0.0.1", port: int = 0, reload_s: int = 5) -> None:
        logdir = Path(logdir)
        if not logdir.is_dir():
            raise InputNotFound(f"{logdir}: no such directory; pass the OUT folder of `tracekit capture`")
        if not 0 <= port <= 0xFFFF:
            raise TracekitError(f"--port {port}: not a TCP port; pass 0..65535 (0 picks a free one)")
        _tb()
        from tensorboard import program

        # The profiler plugin logs every run it finds at INFO on stderr; keep the terminal for the address.
        os.environ.setdefault("TORCH_PROFILER_LOG_LEVEL", "WARNING")
        self.logdir = logdir
        self._tb = program.TensorBoard()
        argv = [
            "tensorboard",
            "--logdir",
            str(logdir),
            "--host",
            host,
            "--port",
            str(port),
            "--reload_interval",
            str(reload_s),
        ]
        self._tb.configure(argv=argv)
        self.url = ""

    def start(self) -> str:
        """Start serving in a daemon thread; returns the address (http://127.0.0.1:PORT/)."""
        from tensorboard import program

        try:
            self.url = self._tb.launch()
        except program.TensorBoardServerException as exc:
            raise TracekitError(f"TensorBoard could not start: {exc.msg}; pass another --port") from None
        return self.url


# -- (re)writing the event files of existing captures --------------------------------------------------


def capture_of_run(run_dir: Path):
    """The capture of a run folder: its ``<run>.parquet`` beside it when there is one, else its traces
    parsed now (with ``manifest.json`` as the manifest when `tracekit capture` wrote one)."""

    from tracekit.parse.parser import parse_paths

    run_dir = Path(run_dir)
    parquet = run_dir.with_name(run_dir.name + ".parquet")
    if parquet.is_file():
        return read_capture(parquet)
    traces = sorted(p for pattern in TRACE_GLOBS for p in run_dir.glob(pattern))
    capture = parse_paths(traces)
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        # a broken manifest only loses the capture details in the report header
        with contextlib.suppress(ValueError):
            capture.meta["manifest"] = json.loads(manifest.read_text())
    return capture
