"""Event files (written with TensorBoard's classes, read back with its loader) and `tracekit view`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tracekit.analysis.model import CAUSES, HOST_STATES
from tracekit.analysis.pipeline import analyze
from tracekit.errors import InputNotFound, OutputExistsError
from tracekit.export.tensorboard import (
    EVENT_GLOB,
    TEXT_TAG,
    event_files,
    read_events,
    report_scalars,
    write_events,
    write_run_summaries,
)
from tracekit.parse.parser import load_capture

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "fixtures" / "h200_probe"


def make_logdir(tmp: Path, names: tuple[str, ...] = ("mlp", "sync")) -> Path:
    """The probe traces laid out as `tracekit capture` lays out OUT: OUT/<workload>/<run>/<file>."""
    for name in names:
        run = tmp / "probe" / name
        run.mkdir(parents=True)
        shutil.copy(PROBE / f"{name}.pt.trace.json.gz", run / f"h200.{name}.pt.trace.json.gz")
    return tmp


# -- the writer ------------------------------------------------------------------------------------------


def test_events_round_trip_through_tensorboards_loader(tmp_path):
    # GIVEN two steps of scalars and a markdown text
    scalars = {3: {"step_time_ms": 12.5, "idle_ms/sync": 0.25}, 2: {"step_time_ms": 11.0}}
    # WHEN written and read back with TensorBoard's EventFileLoader
    path = write_events(tmp_path, scalars, {TEXT_TAG: "# report\n\n| a | b |"})
    got, texts = read_events(tmp_path)
    # THEN every value is there at its step, and the file is tracekit's own
    assert path.name.endswith(".tracekit") and path.parent == tmp_path
    assert got == {"step_time_ms": [(2, 11.0), (3, 12.5)], "idle_ms/sync": [(3, 0.25)]}
    assert texts == {TEXT_TAG: "# report\n\n| a | b |"}


def test_rewrite_replaces_only_tracekits_event_files(tmp_path):
    foreign = tmp_path / "events.out.tfevents.1.host.1.0"  # e.g. the user's own SummaryWriter
    foreign.write_bytes(b"")
    first = write_events(tmp_path, {1: {"x": 1.0}})
    second = write_events(tmp_path, {1: {"x": 2.0}})
    assert event_files(tmp_path) == [second] and not first.exists() or first == second
    assert foreign.exists()
    assert read_events(tmp_path)[0] == {"x": [(1, 2.0)]}
    # no temporary folder is left beside the run
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")] == []


# -- from a real report ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataloader_report():
    return analyze(load_capture(PROBE / "dataloader.pt.trace.json.gz"))


def test_report_scalars_match_the_report_samples(dataloader_report):
    report = dataloader_report
    (dev,) = report.devices
    rows = report_scalars(report)[""]
    assert sorted(rows) == [s.step for s in dev.samples]
    for s in dev.samples:
        row = rows[s.step]
        assert row["step/time_ms"] == s.dur_ns / 1e6
        assert row["step/gpu_utilization"] == pytest.approx(s.busy_ns / s.dur_ns)
        assert sum(row[f"idle_ms/{c}"] for c in CAUSES) == pytest.approx(row["idle_ms/total"])
        # busy + idle is the step (DESIGN.md invariant), seen through the scalars
        assert row["step/gpu_utilization"] * row["step/time_ms"] + row["idle_ms/total"] == pytest.approx(
            row["step/time_ms"]
        )
    # the DataLoader probe sleeps 0.5 ms per sample, 32 samples per batch: its idle is dataloader time
    assert all(rows[s]["idle_ms/dataloader"] > 10 for s in rows)
    host = {h.step: h for h in report.host.steps}
    for step, row in rows.items():
        assert row["step/dispatch_gap_ms"] == host[step].dispatch_gap_ns / 1e6
        assert sum(row[f"host/{k}_ms"] for k in HOST_STATES) == pytest.approx(host[step].dur_ns / 1e6)


def test_write_run_summaries_beside_the_traces(tmp_path, dataloader_report):
    run = make_logdir(tmp_path, ("dataloader",)) / "probe" / "dataloader"
    (path,) = write_run_summaries(run, dataloader_report)
    assert path.parent == run
    scalars, texts = read_events(run)
    tags = set(scalars)
    assert {"step/time_ms", "step/gpu_utilization", "step/collective_wait_ms", "step/dispatch_gap_ms"} <= tags
    assert "idle_ms/total" in tags
    assert {f"idle_ms/{c}" for c in CAUSES} <= tags
    assert "dataloader" in texts[TEXT_TAG] and texts[TEXT_TAG].startswith("# ")
    with pytest.raises(OutputExistsError, match="--force"):
        write_run_summaries(run, dataloader_report, force=False)
    write_run_summaries(run, dataloader_report, force=True)
    assert len(list(run.glob(EVENT_GLOB))) == 1


def test_write_run_summaries_needs_the_folder(tmp_path, dataloader_report):
    with pytest.raises(InputNotFound, match="no-such"):
        write_run_summaries(tmp_path / "no-such", dataloader_report)


# -- tracekit view ----------------------------------------------------------------------------------------


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def start_view(logdir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """`python -m tracekit view LOGDIR` as a user runs it; returns the process and its address."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "view", str(logdir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if not line.startswith("TensorBoard at http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"view printed {line!r}; stderr: {proc.stderr.read()[-2000:]}")
    return proc, line.split()[2]


def stop_view(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Ctrl-C, as a user stops it: (exit code, rest of stdout, stderr)."""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def wait_for(fn, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_view_serves_scalars_and_profiler_runs_on_localhost(tmp_path, dataloader_report):
    logdir = make_logdir(tmp_path, ("dataloader", "mlp"))
    write_run_summaries(logdir / "probe" / "dataloader", dataloader_report)
    proc, url = start_view(logdir)
    try:
        assert url.startswith("http://127.0.0.1:")
        want = ["probe/dataloader", "probe/mlp"]
        runs = wait_for(lambda: _get(url + "data/plugin/pytorch_profiler/runs")["runs"] == want)
        assert runs, _get(url + "data/plugin/pytorch_profiler/runs")
        tags = wait_for(lambda: _get(url + "data/plugin/scalars/tags"))
        assert "idle_ms/dataloader" in tags["probe/dataloader"]
        q = urllib.parse.urlencode({"run": "probe/dataloader", "tag": "step/time_ms"})
        points = _get(url + f"data/plugin/scalars/scalars?{q}")
        steps = [p[1] for p in points]
        assert steps == [s.step for s in dataloader_report.devices[0].samples]
    finally:
        rc, out, err = stop_view(proc)
    assert rc == 0 and "stopped" in out
    # the run without event files is named, with the command that writes them
    assert "1 of 2 trace runs have no tracekit scalars yet" in err and f"tracekit tb {logdir}" in err


def test_view_port_option_and_sigterm(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, url = start_view(make_logdir(tmp_path, ("mlp",)), "--port", str(port))
    assert url == f"http://127.0.0.1:{port}/"
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_view_missing_folder_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "view", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode == 2
    assert "nope: no such directory" in proc.stderr and "Traceback" not in proc.stderr


# -- tracekit tb ------------------------------------------------------------------------------------------


def test_tb_writes_every_run_then_keeps_them_unless_forced(tmp_path):
    from typer.testing import CliRunner

    from tracekit.cli import get_app

    logdir = make_logdir(tmp_path, ("mlp", "sync"))
    runner = CliRunner()
    first = runner.invoke(get_app(), ["tb", str(logdir)])
    assert first.exit_code == 0, first.output
    assert first.output.count("wrote 1 event file") == 2
    for name in ("mlp", "sync"):
        scalars, texts = read_events(logdir / "probe" / name)
        assert "step/time_ms" in scalars and TEXT_TAG in texts
    kept = runner.invoke(get_app(), ["tb", str(logdir)])
    assert kept.output.count("kept: has event files (pass --force to rewrite)") == 2
    forced = runner.invoke(get_app(), ["tb", str(logdir), "--force"])
    assert forced.output.count("wrote 1 event file") == 2
    assert all(len(event_files(logdir / "probe" / n)) == 1 for n in ("mlp", "sync"))


def test_tb_reads_the_parquet_capture_beside_the_run(tmp_path):
    from tracekit.data.store import read_capture, write_capture
    from tracekit.export.tensorboard import capture_of_run
    from tracekit.parse.parser import parse_to_file

    logdir = make_logdir(tmp_path, ("mlp",))
    run = logdir / "probe" / "mlp"
    capture = parse_to_file([run], run.with_name("mlp.parquet"))
    capture.meta["manifest"] = {"workload": "heavy_mlp", "python": "3.11.7"}
    write_capture(capture, run.with_name("mlp.parquet"), force=True)
    got = capture_of_run(run)
    assert got.path == run.with_name("mlp.parquet")
    assert got.manifest == read_capture(run.with_name("mlp.parquet")).manifest


def test_tb_on_a_folder_without_traces(tmp_path):
    from typer.testing import CliRunner

    from tracekit.cli import get_app

    result = CliRunner().invoke(get_app(), ["tb", str(tmp_path)])
    assert result.exit_code != 0
    assert "no profiler traces" in str(result.exception or result.output)


def test_cpu_only_capture_gets_host_scalars(tmp_path):
    from tests.tracebuilder import TraceBuilder
    from tracekit.parse.parser import parse_paths

    t = TraceBuilder()
    for n, start in ((1, 0), (2, 100)):
        t.step(n, start, start + 100)
        t.op("aten::mm", start + 10, 30)
        t.op("aten::add", start + 60, 20)
    t.write(tmp_path / "cpu.pt.trace.json")
    report = analyze(parse_paths([tmp_path / "cpu.pt.trace.json"]))
    assert report.cpu_only
    rows = report_scalars(report)[""]
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert row["step/time_ms"] == pytest.approx(0.1)
        assert not any(k.startswith(("idle_ms/", "step/gpu")) for k in row)
        assert sum(row[f"host/{k}_ms"] for k in HOST_STATES) == pytest.approx(0.1)


def test_two_ranks_write_one_sub_run_each(tmp_path):
    from tests.tracebuilder import TraceBuilder
    from tracekit import api
    from tracekit.parse.parser import parse_paths

    # GIVEN rank 0 busy 60 of 100 µs per step and rank 1 busy 30
    for rank, busy in ((0, 60), (1, 30)):
        t = TraceBuilder(rank=rank, world_size=2)
        for n, start in ((1, 0), (2, 100)):
            t.step(n, start, start + 100)
            t.op("aten::mm", start + 1, 5)
            t.launch(start + 2, 2, corr=10 * n + rank)
            t.kernel("gemm", start + 10, busy, corr=10 * n + rank)
        t.write(tmp_path / f"rank{rank}.pt.trace.json")
    capture = parse_paths([tmp_path / "rank0.pt.trace.json", tmp_path / "rank1.pt.trace.json"])
    # WHEN the event files are written
    written = write_run_summaries(tmp_path, api.analyze(capture).report)
    # THEN the capture's own run holds the report, and each rank its own scalars under the same tags
    assert sorted(p.parent.name for p in written) == sorted([tmp_path.name, "rank0", "rank1"])
    assert TEXT_TAG in read_events(tmp_path)[1]
    for rank, busy in ((0, 60), (1, 30)):
        scalars, _ = read_events(tmp_path / f"rank{rank}")
        assert [v for _, v in scalars["step/gpu_utilization"]] == pytest.approx([busy / 100] * 2)
