"""Bad input: one clear TracekitError naming the file and the next step; truncated traces and --salvage."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.errors import InputNotFound, TraceFormatError, TruncatedTraceError
from tracekit.parse.parser import parse_paths


def trace_bytes(n_ops: int = 50) -> bytes:
    t = TraceBuilder()
    t.step(1, 0, 10_000)
    for i in range(n_ops):
        t.op(f"op{i}", 10 + i * 20, 10)
    # Kineto's layout: metadata first, traceEvents, then a trailing key
    doc = t.build()
    doc["traceName"] = "x.json"
    return json.dumps(doc, indent=2).encode()


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        (b"hello world", TraceFormatError, "not JSON"),
        (b"\x1f\x8b\x08\x00garbage-garbage", TraceFormatError, "gzip stream is corrupt"),
        (b'{"schemaVersion": 1, "deviceProperties": []}', TraceFormatError, "not a Chrome trace"),
        (b"42", TraceFormatError, "not a Chrome trace"),
        (b'{"traceEvents": {"a": 1}}', TraceFormatError, "not a list"),
        (b"[1, 2]", TraceFormatError, r"no usable profiler events \(skipped 2 events: 2 not an event obj"),
        (b'{"traceEvents": []}', TraceFormatError, "no profiler events"),
        (b'{"traceEvents": [{"ph": "M", "name": "process_sort_index", "pid": 1, "ts": 0}]}', TraceFormatError,
         "no profiler events"),
        (b"", TraceFormatError, "empty file"),
        (b'{"traceEvents": [{"ph": "X", "ts": NaN}]}', TraceFormatError, "not valid JSON"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_error(tmp_path, content, error, message):
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(error, match=message) as info:
        parse_paths([path])
    assert str(info.value).startswith(f"{path}: ")  # names the file as the user gave it
    assert "\n" not in str(info.value)


def test_missing_inputs(tmp_path):
    with pytest.raises(InputNotFound, match="no such file"):
        parse_paths([tmp_path / "nope.json"])
    with pytest.raises(InputNotFound, match="no trace files"):
        parse_paths([tmp_path])
    with pytest.raises(InputNotFound, match="no trace given"):
        parse_paths([])


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_trace_is_refused_with_a_hint_and_salvaged_on_request(tmp_path, gz):
    full = trace_bytes()
    cut = full.index(b'"op30"') + 3  # inside the 31st op
    data = full[:cut]
    path = tmp_path / ("cut.json.gz" if gz else "cut.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(TruncatedTraceError, match="--salvage"):
        parse_paths([path])
    capture = parse_paths([path], salvage=True)
    names = [r["name"] for r in capture.table.to_pylist() if r["kind"] == "event" and r["cat"] == "cpu_op"]
    assert names == [f"op{i}" for i in range(30)]  # every complete event, nothing else
    trace = capture.traces[0]
    op30 = full.rindex(b"{", 0, full.index(b'"op30"'))  # where the cut event starts
    last_complete = full.rindex(b"}", 0, op30) + 1
    assert trace["salvaged_dropped_bytes"] == len(data) - last_complete


def test_truncated_gzip_stream(tmp_path):
    packed = gzip.compress(trace_bytes(2000))
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TruncatedTraceError, match="--salvage"):
        parse_paths([path])
    capture = parse_paths([path], salvage=True)
    assert capture.traces[0]["events"] > 100


def test_truncated_before_any_event_cannot_be_salvaged(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(trace_bytes()[:40])
    with pytest.raises(TruncatedTraceError, match="nothing to salvage"):
        parse_paths([path], salvage=True)


def test_complete_trace_ignores_salvage(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(trace_bytes())
    assert parse_paths([path], salvage=True).traces[0]["salvaged_dropped_bytes"] == 0


def test_events_without_a_time_are_dropped_and_counted(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": "soon", "dur": 1},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    c = parse_paths([path])
    assert c.traces[0]["dropped_events_without_time"] == 2
    assert [r["name"] for r in c.table.to_pylist() if r["kind"] == "event"] == ["a"]


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not apply")
    path = tmp_path / "t.json"
    path.write_bytes(trace_bytes())
    path.chmod(0)
    try:
        with pytest.raises(InputNotFound, match="cannot read"):
            parse_paths([path])
    finally:
        path.chmod(0o644)
