"""The fault table of docs/QUIRKS.md, one test per row: bad input and a hostile environment end in a
capture (with what was skipped counted and reported) or in one line and exit code 2, and never leave a
half-written output or temporary file behind."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.data.store import read_capture
from tracekit.errors import TracekitError, TruncatedTraceError
from tracekit.parse import decode as _decode
from tracekit.parse.parser import parse_to_file

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures/h200_probe/tiny.pt.trace.json.gz"
CONTROL = ROOT / "fixtures/hta/control.json.gz"


def small_trace() -> dict:
    t = TraceBuilder(device_properties=[{"id": 0, "name": "GPU"}])
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 20)
    t.launch(12, 5, corr=1)
    t.kernel("gemm", 30, 40, corr=1)
    t.launch(14, 5, corr=2)
    t.kernel("gemm", 72, 10, corr=2)
    return t.build()


def outputs(folder: Path) -> list[str]:
    """Every file in the output folder, hidden temporary files included."""
    return sorted(p.name for p in folder.iterdir())


def parse_into(folder: Path, trace: Path, *, salvage: bool = False):
    """parse_to_file into folder/out.parquet: (the Capture, None) or (None, the TracekitError). The
    folder then holds out.parquet or nothing."""
    folder.mkdir(exist_ok=True)
    try:
        capture = parse_to_file([trace], folder / "out.parquet", salvage=salvage)
    except TracekitError as exc:
        assert "\n" not in str(exc)
        assert outputs(folder) == []
        return None, exc
    assert outputs(folder) == ["out.parquet"]
    return capture, None


# --- truncation at every 10 % -----------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_truncation_at_every_tenth(tmp_path, gz):
    """Cut at 0 %, 10 %, ... 90 % of the file: refused with a message that says so and names --salvage;
    with --salvage, the complete events before the cut are kept (more of them the later the cut)."""
    text = gzip.decompress(TINY.read_bytes())
    data = gzip.compress(text, mtime=0) if gz else text
    kept = []
    for tenth in range(10):
        trace = tmp_path / f"cut{tenth}.pt.trace.json{'.gz' * gz}"
        trace.write_bytes(data[: len(data) * tenth // 10])
        _, error = parse_into(tmp_path / f"out{tenth}", trace)
        assert error is not None
        if tenth == 0:
            assert "empty file" in str(error)
            continue
        if gz:
            assert "gzip stream is truncated" in str(error)
        else:
            assert isinstance(error, TruncatedTraceError) and "ends early" in str(error)
        capture, error = parse_into(tmp_path / f"salvaged{tenth}", trace, salvage=True)
        if capture is None:  # cut before the first complete event
            assert "nothing to" in str(error)
            kept.append(0)
            continue
        kept.append(capture.meta["event_rows"])
        trace_entry = capture.traces[0]
        assert trace_entry["salvaged_dropped_bytes"] is not None
        if gz:
            assert "gzip stream is truncated" in trace_entry["gzip_damage"]
    assert kept == sorted(kept) and kept[-1] > 0


def test_corrupt_gzip_names_the_damage_and_salvage_keeps_what_decompressed(tmp_path):
    data = bytearray(TINY.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):  # a damaged block in the middle
        data[i] ^= 0x5A
    trace = tmp_path / "bad.pt.trace.json.gz"
    trace.write_bytes(bytes(data))
    _, error = parse_into(tmp_path / "out", trace)
    assert "gzip stream is corrupt after" in str(error) and "--salvage" in str(error)
    capture, _ = parse_into(tmp_path / "salvaged", trace, salvage=True)
    full, _ = parse_into(tmp_path / "full", TINY)
    assert 0 < capture.meta["event_rows"] < full.meta["event_rows"]
    assert "gzip stream is corrupt" in capture.traces[0]["gzip_damage"]


def test_gzip_cut_in_its_header_is_not_called_empty(tmp_path, capsys):
    trace = tmp_path / "t.pt.trace.json.gz"
    trace.write_bytes(TINY.read_bytes()[:30])
    code, _, err = run_main(["parse", str(trace), "-o", str(tmp_path / "o.parquet"), "--salvage"], capsys)
    assert code == 2
    assert "gzip stream is truncated (it ends after 0 decompressed bytes): nothing to read" in err
    assert "empty file" not in err


# --- values and events that cannot be used ----------------------------------------------------------


def write(tmp_path: Path, doc: dict | bytes, name: str = "t.pt.trace.json") -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


def test_bad_times_are_skipped_counted_and_reported(tmp_path, capsys):
    """A ts that is a string (not a number) or out of range (1e400): the event is skipped, counted in
    the trace entry, shown by `info`, and named on stderr by `parse` (a warning, exit 0)."""
    doc = small_trace()
    doc["traceEvents"][2]["ts"] = "soon"
    doc["traceEvents"][3]["ts"] = "1e400 here"
    trace = write(tmp_path, json.dumps(doc).replace('"1e400 here"', "1e400").encode())
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["parse", str(trace), "-o", str(out)], capsys)
    assert code == 0
    assert "tracekit: warning: t.pt.trace.json: skipped 2 events: 1 ts not a number, 1 ts out of range" in err
    code, text_out, _ = run_main(["info", str(out)], capsys)
    assert "skipped 2 events: 1 ts not a number, 1 ts out of range" in text_out
    code, json_out, _ = run_main(["info", str(out), "--json"], capsys)
    entry = json.loads(json_out)["traces"][0]
    assert entry["skipped_events"] == {"ts not a number": 1, "ts out of range": 1}


def test_a_string_time_holding_a_number_is_read(tmp_path):
    doc = small_trace()
    for e in doc["traceEvents"]:
        e["ts"] = str(e["ts"])
    capture, _ = parse_into(tmp_path / "o", write(tmp_path, doc))
    assert capture.meta["event_rows"] == len(doc["traceEvents"])
    assert capture.traces[0]["skipped_events"] == {}


def test_nothing_usable_left_is_one_error_saying_why(tmp_path, capsys):
    doc = small_trace()
    for e in doc["traceEvents"]:
        e["ts"] = "soon"
    code, _, err = run_main(["parse", str(write(tmp_path, doc)), "-o", str(tmp_path / "c.parquet")], capsys)
    assert code == 2
    n = len(doc["traceEvents"]) - 1  # the process_name metadata event is not counted
    assert f"no usable profiler events (skipped {n} events: {n} ts not a number)" in err
    assert outputs(tmp_path) == ["t.pt.trace.json"]


def test_negative_dur_on_device_activity_is_skipped_with_a_warning(tmp_path, capsys):
    doc = small_trace()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["dur"] = -40
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["parse", str(write(tmp_path, doc)), "-o", str(out)], capsys)
    assert code == 0
    assert "skipped 1 event: 1 negative dur on device activity" in err
    table = read_capture(out).table.to_pylist()
    assert [r["dur_ns"] for r in table if r["kind"] == "event" and r["cat"] == "kernel"] == [10_000]
    code, _, err = run_main(["analyze", str(out), "--check"], capsys)
    assert code == 0


@pytest.mark.parametrize("decoder", ["c", "msgspec"])
@pytest.mark.parametrize("command", ["parse", "analyze"])
def test_deeply_nested_args_keep_the_event(tmp_path, capsys, monkeypatch, decoder, command):
    """100,000 levels of [[[...]]] in an event's args: no RecursionError; the event is kept, the deep
    value dropped and counted, on both decoders."""
    if decoder == "msgspec":
        monkeypatch.setenv("TRACEKIT_DECODER", "msgspec")
    doc = small_trace()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["deep"] = "DEEP"
    text = json.dumps(doc).replace('"DEEP"', "[" * 100_000 + "]" * 100_000)
    trace = write(tmp_path, text.encode())
    argv = (
        ["parse", str(trace), "-o", str(tmp_path / "c.parquet")]
        if command == "parse"
        else ["analyze", str(trace)]
    )
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert "tracekit: warning: t.pt.trace.json: dropped 1 value: 1 nested deeper than 256 levels" in err
    if command == "parse":
        table = read_capture(tmp_path / "c.parquet").table.to_pylist()
        assert sum(r["kind"] == "event" and r["cat"] == "kernel" for r in table) == 2


@pytest.mark.parametrize("layout", ["array", "salvaged"])
def test_deep_nesting_on_the_validating_path(tmp_path, layout):
    """The whole-file decode (the JSON Array Format, a salvaged trace) strips deep values too."""
    doc = small_trace()
    doc["traceEvents"][2]["args"]["deep"] = "DEEP"
    events = json.dumps(doc["traceEvents"] if layout == "array" else doc)
    text = events.replace('"DEEP"', "[" * 50_000 + "]" * 50_000).encode()
    if layout == "salvaged":
        text = text[: text.rindex(b"}", 0, text.rindex(b"]"))]  # cut inside the last event
    capture, error = parse_into(tmp_path / "o", write(tmp_path, text), salvage=layout == "salvaged")
    assert error is None
    assert capture.traces[0]["dropped_values"] == {_decode.DROP_TOO_DEEP: 1}


def test_items_and_args_of_the_wrong_shape(tmp_path, capsys):
    """Items that are not event objects are skipped, args that are not an object dropped: counted, and
    the rest of the trace parses (msgspec alone used to refuse the whole file)."""
    doc = small_trace()
    doc["traceEvents"] += [5, "x", [1, 2]]
    doc["traceEvents"][2]["args"] = ["not", "an", "object"]
    code, _, err = run_main(["parse", str(write(tmp_path, doc)), "-o", str(tmp_path / "c.parquet")], capsys)
    assert code == 0
    assert "skipped 3 events: 3 not an event object; dropped 1 value: 1 args not an object" in err


# --- the environment: a killed worker, a full disk --------------------------------------------------
# A decode worker killed mid-parse:
# tests/test_parse_real.py::test_a_decode_worker_that_dies_is_one_error_not_a_hang


def _parse_command(trace: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tracekit", "parse", str(trace), "-o", str(out), *extra]


def test_file_size_limit_while_writing_parquet(tmp_path):
    """RLIMIT_FSIZE below the capture's size (the write fails with EFBIG): one line, exit 2, and the
    existing output (replaced with --force) and the folder are as they were."""
    out = tmp_path / "c.parquet"
    out.write_bytes(b"the previous capture")
    limit = 64 << 10

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = subprocess.run(
        _parse_command(CONTROL, out, "--force"), capture_output=True, text=True, preexec_fn=limited, cwd=ROOT
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0
    assert f"tracekit: error: cannot write {out} (File too large); nothing was written" in run.stderr
    assert outputs(tmp_path) == ["c.parquet"]
    assert out.read_bytes() == b"the previous capture"
    # the same parse without the limit writes more than the limit: the limit was hit, not skipped
    subprocess.run(_parse_command(CONTROL, out, "--force"), check=True, capture_output=True, cwd=ROOT)
    assert out.stat().st_size > limit


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")
def test_full_disk_while_writing_parquet(tmp_path):
    """A 64 KiB tmpfs (in a private mount namespace) fills up while the capture is written (ENOSPC):
    one line, exit 2, and nothing left on it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        'mount -t tmpfs -o size=64k tmpfs "$0" || exit 77; '
        '"$@"; rc=$?; echo "left: $(ls -A "$0" | tr "\\n" " ")"; exit $rc'
    )
    cmd = ["unshare", "-rm", "sh", "-c", script, str(disk), *_parse_command(CONTROL, disk / "c.parquet")]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if run.returncode == 77 or "unshare:" in run.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {run.stderr.strip()[:200]}")
    assert run.returncode == 2, run.stderr
    assert "tracekit: error: cannot write" in run.stderr and "No space left on device" in run.stderr
    assert run.stderr.strip().count("\n") == 0
    assert run.stdout.strip() == "left:"


def test_python_ignores_sigxfsz(tmp_path):
    """The file-size test relies on a write failing with EFBIG instead of the process being killed by
    SIGXFSZ: CPython ignores SIGXFSZ at start-up, and the forked workers inherit that."""
    code = "import signal; print(signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert run.stdout.strip() == "True"


@pytest.mark.parametrize("size", [0, 1, 5000, 300_000])
def test_gzip_prefix_is_the_whole_stream_when_only_the_checksum_is_bad(size):
    """Raw inflate gives every byte of an intact deflate stream (several members too), whatever its
    size, and all of it when only the CRC is wrong."""
    import random

    rnd = random.Random(size)
    text = bytes(rnd.choice(b"ab{}[]0123456789") for _ in range(size)) + b"x" * size  # runs: long matches
    data = gzip.compress(text, mtime=0)
    assert _decode._gunzip_prefix(data) == text
    assert _decode._gunzip_prefix(data + gzip.compress(b"second", mtime=0)) == text + b"second"
    broken = bytearray(data)
    broken[-8] ^= 0xFF  # the CRC32
    out, damage = _decode._gunzip(bytes(broken))
    assert out == text and "corrupt" in damage
    out, damage = _decode._gunzip(data[: len(data) // 2])
    assert text.startswith(out) and "truncated" in damage


def test_a_job_parsed_as_tasks_warns_once_in_the_driver(tmp_path, capsys):
    """Rank files parsed by worker tasks (the folder form): each file's losses are one `tracekit:
    warning:` line from the driver, not a worker's own warning (which on Ray prints on another node)."""
    files = []
    for rank in (0, 1):
        doc = small_trace()
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        if rank == 1:
            doc["traceEvents"][2]["ts"] = "soon"
        files.append(write(tmp_path, doc, name=f"rank{rank}.pt.trace.json"))
    out = tmp_path / "cap"
    code, _, err = run_main(["parse", *map(str, files), "-o", f"{out}/"], capsys)
    assert code == 0, err
    lines = [x for x in err.splitlines() if "warning" in x.lower()]
    assert lines == ["tracekit: warning: rank1.pt.trace.json: skipped 1 event: 1 ts not a number"], err
    assert (out / "rank=1" / "part-0.parquet").is_file()
