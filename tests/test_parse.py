"""The parser on tiny synthetic traces: every kept field and every format quirk (docs/QUIRKS.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import find_trace_files, load_capture, parse_paths, rank_of


def write(tmp_path: Path, trace: dict | TraceBuilder, name: str = "t.pt.trace.json") -> Path:
    doc = trace.build() if isinstance(trace, TraceBuilder) else trace
    path = tmp_path / name
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def rows(capture, kind: str = "event", **where) -> list[dict]:
    t = capture.table.filter(pc.equal(capture.table.column("kind").cast("string"), kind))
    out = t.to_pylist()
    return [r for r in out if all(r[k] == v for k, v in where.items())]


def test_raw_events_keep_their_fields(tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 20, ext=5)
    t.launch(12, 5, corr=1)
    t.kernel("gemm", 30, 40, corr=1, device=0, stream=7)
    t.memcpy(75, 5, corr=2, nbytes=4096, stream=9)
    c = parse_paths([write(tmp_path, t)])
    [op] = rows(c, cat="cpu_op")
    assert (op["name"], op["ts_ns"], op["dur_ns"], op["external_id"], op["pid"], op["tid"]) == (
        "aten::mm",
        10_000,
        20_000,
        5,
        100,
        100,
    )
    [k] = rows(c, cat="kernel")
    assert (k["device"], k["stream"], k["correlation"], k["ts_ns"], k["dur_ns"]) == (0, 7, 1, 30_000, 40_000)
    [m] = rows(c, cat="gpu_memcpy")
    assert (m["bytes"], m["stream"]) == (4096, 9)
    [launch] = rows(c, cat="cuda_runtime")
    assert launch["correlation"] == 1
    flows = rows(c, cat="ac2g")
    assert sorted((f["ph"], f["flow_id"]) for f in flows) == [("f", 1), ("f", 2), ("s", 1)]
    [meta] = rows(c, ph="M")
    assert (meta["name"], meta["label"]) == ("process_name", "python3")
    assert {r["rank"] for r in c.table.to_pylist()} == {0}


def test_times_are_exact_nanoseconds_from_the_decimal_text(tmp_path):
    # 1.7e15 µs with three decimals has 19 significant digits: a double would round the last one.
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
        ' "ts": 1712195495519689.047, "dur": 63.813},'
        '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1712195495519695, "dur": 1e-3},'
        '{"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2.5e2, "dur": 0.0005}]}'
    )
    path = tmp_path / "exact.json"
    path.write_text(text)
    c = parse_paths([path])
    got = {r["name"]: (r["ts_ns"], r["dur_ns"]) for r in rows(c, cat="cpu_op")}
    assert int(float("1712195495519689.047") * 1000) != 1712195495519689047  # the float route would be wrong
    assert got == {
        "a": (1712195495519689047, 63813),
        "b": (1712195495519695000, 1),
        "c": (250000, 0),  # 0.5 ns rounds half to even
    }


def test_integer_and_float_times_mix(tmp_path):
    t = TraceBuilder()
    t.op("a", 10, 2)
    t.op("b", 12.25, 1.5)
    c = parse_paths([write(tmp_path, t)])
    assert sorted((r["ts_ns"], r["dur_ns"]) for r in rows(c, cat="cpu_op")) == [(10000, 2000), (12250, 1500)]


@pytest.mark.parametrize(
    ("unit", "ts", "expected_ns", "why"),
    [
        ("ms", 1000.5, 1_000_500, "µs with decimals"),
        ("ns", 1000.5, 1_000_500, "Kineto DISPLAY_TRACE_IN_NS: still µs"),
        ("ns", 1000, 1000, "integer numbers and displayTimeUnit ns: ns"),
        ("ms", 1_700_000_000_000_000_000, 1_700_000_000_000_000_000, "too large to be µs: ns"),
    ],
)
def test_time_unit_decision(tmp_path, unit, ts, expected_ns, why):
    t = TraceBuilder(extra_meta={"displayTimeUnit": unit})
    t.op("a", ts, 1 if isinstance(ts, int) else 1.5)
    c = parse_paths([write(tmp_path, t)])
    [op] = rows(c, cat="cpu_op")
    assert op["ts_ns"] == expected_ns, why
    assert c.traces[0]["time_unit"] == ("ns" if expected_ns == ts else "us")


def test_steps_come_from_profiler_step_spans_on_the_owning_thread(tmp_path):
    t = TraceBuilder()
    t.step(3, 0, 100)
    t.step(4, 100, 250)
    # Kineto copies ProfilerStep spans onto the GPU timeline: never steps.
    t.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "ProfilerStep#3",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "dur": 90,
        }
    )
    t.annotation("ProfilerStep#x", 0, 10)  # not a step number
    c = parse_paths([write(tmp_path, t)])
    steps = [(r["step"], r["name"], r["ts_ns"], r["dur_ns"], r["pid"], r["tid"]) for r in rows(c, "step")]
    assert steps == [
        (3, "ProfilerStep#3", 0, 100_000, 100, 100),
        (4, "ProfilerStep#4", 100_000, 150_000, 100, 100),
    ]


def test_a_trace_without_steps_is_one_step(tmp_path):
    t = TraceBuilder()
    t.op("a", 10, 5)
    t.op("b", 30, 5, tid=7)
    t.op("c", 40, 5, tid=7)
    t.kernel("k", 20, 60)
    c = parse_paths([write(tmp_path, t)])
    [step] = rows(c, "step")
    assert (step["step"], step["name"], step["ts_ns"], step["dur_ns"]) == (0, "trace", 10_000, 70_000)
    assert (step["pid"], step["tid"]) == (100, 7)  # the host thread with the most cpu_ops


def test_old_kineto_categories_are_normalised(tmp_path):
    # torch 1.8/1.9 Kineto: Kernel / Runtime / Memcpy / Memset, flows async_gpu, lower-case "external id"
    events = [
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
         "args": {"correlation": 9, "external id": 4}},
        {"ph": "s", "cat": "async_gpu", "id": 9, "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 3,
         "args": {"correlation": 9, "external id": 4, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "Memcpy", "name": "m", "pid": 0, "tid": 7, "ts": 30, "dur": 1},
        {"ph": "X", "cat": "Memset", "name": "s", "pid": 0, "tid": 8, "ts": 40, "dur": 1},
        {"ph": "f", "cat": "async_cpu_to_gpu", "id": 9, "name": "x", "pid": 0, "tid": 7, "ts": 20, "bp": "e"},
    ]  # fmt: skip
    c = parse_paths([write(tmp_path, {"traceEvents": events})])
    cats = [(r["cat"], r["external_id"], r["device"], r["stream"]) for r in rows(c)]
    assert cats == [
        ("cuda_runtime", 4, None, None),
        ("ac2g", None, None, None),
        ("kernel", 4, 0, 7),
        ("gpu_memcpy", None, 0, 7),  # device from pid, stream from tid
        ("gpu_memset", None, 0, 8),
        ("ac2g", None, None, None),
    ]


def test_old_kineto_torch_annotations_written_as_operators_are_annotations(tmp_path):
    # torch 1.8/1.9 Kineto wrote ProfilerStep#N and the DataLoader fetch as "Operator" spans
    events = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#5", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "Operator", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "pid": 1, "tid": 1, "ts": 1, "dur": 9},
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    ]  # fmt: skip
    c = parse_paths([write(tmp_path, {"traceEvents": events})])
    cats = [(r["kind"], r["cat"], r["name"]) for r in rows(c)]
    assert cats[:3] == [
        ("event", "user_annotation", "ProfilerStep#5"),
        ("event", "user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
        ("event", "cpu_op", "aten::mm"),
    ]
    assert [r["name"] for r in c.table.to_pylist() if r["kind"] == "step"] == ["ProfilerStep#5"]


def test_rocm_string_streams_and_odd_ids(tmp_path):
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 5, "tid": 5, "ts": 1, "dur": 1,
         "args": {"stream": "0x0", "correlation": 3}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 2, "tid": 0, "ts": 3, "dur": 1,
         "args": {"device": 2, "stream": "0x1a", "correlation": "3"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 9},
        {"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "ts": 0, "args": {"name": "spans"}},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 9, "s": "g"},
        {},
    ]  # fmt: skip
    c = parse_paths([write(tmp_path, {"traceEvents": events})])
    got = [(r["cat"], r["stream"], r["correlation"], r["pid"]) for r in rows(c)]
    assert got == [("cuda_runtime", 0, 3, 5), ("kernel", 26, 3, 2), (None, None, None, None)]


def test_memory_instants_and_python_functions(tmp_path):
    t = TraceBuilder()
    t.memory(5, 1024, 4096, device=0)
    t.memory(6, -1024, 3072, device=0)
    t.python("train.py(57): main", 1, 50, py_id=3, parent=1)
    c = parse_paths([write(tmp_path, t)])
    mem = [
        (r["bytes"], r["total_allocated"], r["total_reserved"], r["device"]) for r in rows(c, name="[memory]")
    ]
    assert mem == [(1024, 4096, 8192, 0), (-1024, 3072, 6144, 0)]
    [py] = rows(c, cat="python_function")
    assert (py["name"], py["py_id"], py["py_parent"]) == ("train.py(57): main", 3, 1)


def test_cuda_sync_and_collective_args(tmp_path):
    events = [
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
         "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 9, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 20, "ts": 2, "dur": 5,
         "args": {"device": 0, "stream": 20, "Collective name": "allreduce", "In msg nelems": 1024,
                  "Group size": 2, "Process Group Ranks": "[0, 1]"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 3, "dur": 1,
         "args": {"Sequence number": 17, "Fwd thread id": 1, "Process Group Ranks": [0, 1]}},
    ]  # fmt: skip
    c = parse_paths([write(tmp_path, {"traceEvents": events})])
    sync, nccl, op = rows(c)
    assert (sync["sync_kind"], sync["wait_stream"], sync["stream"], sync["device"]) == (
        "Stream Wait Event",
        9,
        7,
        0,
    )
    assert (nccl["collective"], nccl["msg_nelems"], nccl["group_size"], nccl["pg_ranks"]) == (
        "allreduce",
        1024,
        2,
        "[0, 1]",
    )
    assert (op["seq"], op["fwd_tid"], op["pg_ranks"]) == (17, 1, "[0, 1]")


def test_rank_from_distributed_info_then_file_name_then_zero():
    assert rank_of({"distributedInfo": {"rank": 5}}, "rank-3.json") == 5
    assert rank_of({"distributedInfo": {"rank": "6"}}, "x.json") == 6
    for name, rank in [
        ("rank-3.json", 3),
        ("job_rank3.pt.trace.json", 3),
        ("RANK_12.json.gz", 12),
        ("w.json", 0),
    ]:
        assert rank_of({}, name) == rank


def test_a_folder_of_rank_files_is_one_capture(tmp_path):
    for r in (0, 1):
        t = TraceBuilder(rank=r, world_size=2)
        t.step(1, 0, 10)
        t.kernel("k", 1, 2)
        t.write(tmp_path / f"worker{r}.pt.trace.json.gz")
    (tmp_path / "notes.txt").write_text("not a trace")
    c = parse_paths([tmp_path])
    assert sorted((r["rank"], r["step"]) for r in rows(c, "step")) == [(0, 1), (1, 1)]
    assert sorted((r["rank"], r["device"]) for r in rows(c, cat="kernel")) == [(0, 0), (1, 0)]
    assert [s["path"] for s in c.meta["sources"]] == [
        f"{tmp_path.name}/worker0.pt.trace.json.gz",
        f"{tmp_path.name}/worker1.pt.trace.json.gz",
    ]
    assert all(not s["path"].startswith("/") and len(s["xxh3_128"]) == 32 for s in c.meta["sources"])
    assert [t["metadata"]["distributedInfo"]["rank"] for t in c.traces] == [0, 1]


def test_trace_metadata_is_kept(tmp_path):
    t = TraceBuilder(
        rank=0,
        device_properties=[{"id": 0, "name": "NVIDIA H200"}],
        extra_meta={"baseTimeNanoseconds": 1790857026000000000, "cuda_runtime_version": 13000,
                    "traceName": "/tmp/tmpabc.json"},
    )  # fmt: skip
    t.op("a", 1, 1)
    c = parse_paths([write(tmp_path, t)])
    md = c.traces[0]["metadata"]
    assert md["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert md["baseTimeNanoseconds"] == 1790857026000000000
    assert md["cuda_runtime_version"] == 13000
    assert md["traceName"] == "tmpabc.json"  # no absolute paths


def test_bare_event_array_is_a_trace(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(
        json.dumps([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    )
    c = parse_paths([path])
    assert len(rows(c, cat="cpu_op")) == 1


def test_load_capture_reads_parquet_or_parses(tmp_path):
    from tracekit.data.store import write_capture

    t = TraceBuilder()
    t.step(1, 0, 10)
    trace = write(tmp_path, t)
    parsed = load_capture(trace)
    out = write_capture(parsed, tmp_path / "c.parquet")
    again = load_capture(out)
    assert again.table.num_rows == parsed.table.num_rows
    assert again.path == out
    assert load_capture(tmp_path).table.num_rows == parsed.table.num_rows  # the folder holds one trace


def test_find_trace_files_is_not_recursive(tmp_path):
    (tmp_path / "run1").mkdir()
    write(tmp_path / "run1", TraceBuilder(), "a.pt.trace.json")
    from tracekit.errors import InputNotFound

    with pytest.raises(InputNotFound, match="run1"):
        find_trace_files([tmp_path])
    assert [d for _, d in find_trace_files([tmp_path / "run1"])] == ["run1/a.pt.trace.json"]


def test_locate_events_reads_more_only_when_the_metadata_is_large():
    """The fast path reads 1 MiB of head and 64 KiB of tail first; a header or trailer larger than that
    (e.g. many GPUs' deviceProperties) is still found, and the result is what the small reads give."""
    from tracekit.parse import decode as _decode

    event = b'{"ph": "X", "cat": "cpu_op", "name": "a]", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}'
    for head_pad, tail_pad in [(10, 10), ((1 << 20) + 100, 10), (10, (1 << 16) + 100), (2 << 20, 1 << 17)]:
        doc = (
            b'{"pad": "'
            + b"x" * head_pad
            + b'", "traceEvents": ['
            + event
            + b", "
            + event
            + b'], "trail": "'
            + b"]" * tail_pad
            + b'"}'
        )
        metadata, start, end = _decode.locate_events(doc)
        assert doc[start:end] == b"[" + event + b", " + event + b"]"
        assert set(metadata) == {"pad", "trail"} and len(metadata["trail"]) == tail_pad


def test_chunk_size_gives_every_worker_work_on_small_rank_files(monkeypatch):
    """A big file is cut into CHUNK_BYTES chunks; a rank file of a few MB into smaller ones, so both
    cores decode it; below MIN_CHUNK_BYTES per chunk a file is not split further."""
    import tracekit.parse.parser as parse_mod

    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    assert parse_mod.chunk_bytes(1 << 30) == parse_mod.CHUNK_BYTES
    assert parse_mod.chunk_bytes(20 << 20) == (20 << 20) // 8
    assert parse_mod.chunk_bytes(100 << 10) == parse_mod.MIN_CHUNK_BYTES
    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 64 << 10)  # tests that force many chunks still get them
    assert parse_mod.chunk_bytes(1 << 30) == 64 << 10


def test_parse_prefers_jemalloc_unless_the_user_chose_a_pool(monkeypatch):
    import pyarrow as pa

    from tracekit.data.arrow import prefer_jemalloc

    if "jemalloc" not in pa.supported_memory_backends():
        pytest.skip("this pyarrow has no jemalloc")
    before = pa.default_memory_pool()
    try:
        pa.set_memory_pool(pa.system_memory_pool())
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
        prefer_jemalloc()
        assert pa.default_memory_pool().backend_name == "system"
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        prefer_jemalloc()
        assert pa.default_memory_pool().backend_name == "jemalloc"
    finally:
        pa.set_memory_pool(before)
