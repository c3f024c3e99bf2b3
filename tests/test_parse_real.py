"""The parser on real traces: HTA's test traces (fixtures/hta, see SOURCES.md) and the H200 probes."""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
HTA = ROOT / "fixtures" / "hta"
SHARED_HTA = ROOT.parent / "shared" / "traces" / "hta"
H200 = ROOT / "fixtures" / "h200_probe"

TRACES = sorted(HTA.glob("*.json.gz")) + sorted(H200.glob("*.json.gz"))
SHARED_ONLY = sorted(p for p in SHARED_HTA.glob("*.json.gz") if not (HTA / p.name).exists())

KEPT_X_CATS = {
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
}
_cache: dict[Path, object] = {}


def parsed(path: Path):
    if path not in _cache:
        _cache[path] = parse_paths([path])
    return _cache[path]


def of_kind(capture, kind: str):
    t = capture.table
    return t.filter(pc.equal(t.column("kind").cast("string"), kind))


def check_invariants(capture) -> None:
    """What every parsed capture satisfies, whatever the trace."""
    events = of_kind(capture, "event")
    assert events.num_rows > 0
    assert events.column("ts_ns").null_count == 0
    steps = of_kind(capture, "step")
    ranks = set(events.column("rank").to_pylist())
    assert set(steps.column("rank").to_pylist()) == ranks  # every rank has at least one step
    assert "gpu_user_annotation" not in set(steps.column("cat").to_pylist())
    # The parser stores events and steps only (busy time and dispatch gaps are the analysis' to derive).
    assert set(capture.table.column("kind").cast("string").to_pylist()) == {"event", "step"}
    st = steps.to_pandas()[["rank", "step", "ts_ns", "dur_ns"]]
    assert not st.duplicated(["rank", "step"]).any()
    assert (st.dur_ns > 0).all()


@pytest.mark.parametrize("path", TRACES + SHARED_ONLY, ids=lambda p: p.name)
def test_every_real_trace_parses(path):
    capture = parsed(path)
    check_invariants(capture)
    raw = json.loads(gzip.decompress(path.read_bytes()))
    kept = KEPT_X_CATS | {"Kernel", "Runtime"}
    want = Counter(e.get("cat") for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") in kept)
    x = of_kind(capture, "event").filter(pc.equal(of_kind(capture, "event").column("ph").cast("string"), "X"))
    got = Counter(x.column("cat").cast("string").to_pylist())
    alias = {"Kernel": "kernel", "Runtime": "cuda_runtime"}
    assert got == Counter({alias.get(k, k): v for k, v in want.items()})


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_times_match_the_decimal_text_exactly(path):
    """Every X event's ts/dur in ns equals its JSON text × 1000, read as a decimal (never a float)."""
    text = gzip.decompress(path.read_bytes()).decode()
    raw = json.loads(text, parse_float=Decimal)
    want = sorted(
        (int(Decimal(e["ts"]) * 1000), int(Decimal(e["dur"]) * 1000), e["name"])
        for e in raw["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "kernel", "cuda_runtime", "Kernel", "Runtime")
    )
    ev = of_kind(parsed(path), "event").to_pandas()
    sub = ev[(ev.ph == "X") & ev.cat.isin(["cpu_op", "kernel", "cuda_runtime"])]
    got = sorted(zip(sub.ts_ns, sub.dur_ns, sub.name))
    assert got == want


def test_old_kineto_inference_trace():
    c = parsed(HTA / "inference_rank_1.json.gz")
    ev = of_kind(c, "event").to_pandas()
    assert set(ev.cat.dropna()) == {"kernel", "cuda_runtime", "ac2g"}
    k = ev[ev.cat == "kernel"]
    assert k.external_id.notna().all() and (k.device == 0).all() and (k.stream == 7).all()
    assert c.traces[0]["rank"] == 1


def test_async_cpu_to_gpu_flows_become_ac2g():
    ev = of_kind(parsed(HTA / "control.json.gz"), "event").to_pandas()
    flows = ev[ev.cat == "ac2g"]
    assert len(flows) == 24692 + 9450 and flows.flow_id.notna().all()
    assert parsed(HTA / "control.json.gz").traces[0]["rank"] == 3


def test_rocm_trace_streams_and_devices():
    ev = of_kind(parsed(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"), "event").to_pandas()
    rt = ev[ev.cat == "cuda_runtime"]
    assert rt.stream.notna().any() and set(rt.stream.dropna()) == {0}  # written "0x0"
    assert set(ev[ev.cat == "kernel"].device) == {2}


def test_ns_display_unit_trace_is_still_microseconds():
    c = parsed(HTA / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert c.traces[0]["metadata"]["displayTimeUnit"] == "ns"
    assert c.traces[0]["time_unit"] == "us"
    steps = of_kind(c, "step").to_pandas()
    assert steps.dur_ns.between(1e6, 60e9).all()  # steps of ms..s, as a µs reading gives


def test_triton_driver_launch_and_sync_events():
    ev = of_kind(parsed(HTA / "triton_example.json.gz"), "event").to_pandas()
    drv = ev[ev.cat == "cuda_driver"]
    assert list(drv.name) == ["cuLaunchKernel"] and drv.correlation.notna().all()
    sync = of_kind(parsed(HTA / "benchmark_result_2869224_1695835535_trace.json.gz"), "event").to_pandas()
    cs = sync[sync.cat == "cuda_sync"]
    assert len(cs) == 41 and cs.sync_kind.notna().all() and cs.wait_stream.notna().sum() == 20


def test_nccl_collective_args():
    ev = of_kind(parsed(HTA / "nccl_data.json.gz"), "event").to_pandas()
    coll = ev[ev.collective.notna()]
    assert (
        len(coll) == 48 and set(coll.pg_ranks) == {"[0, 1]", "[]"} and (coll.pg_ranks == "[0, 1]").sum() == 42
    )


def test_sampled_rank_pair_is_one_capture():
    c = parse_paths([HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"])
    check_invariants(c)
    steps = of_kind(c, "step").to_pandas()
    assert sorted(set(steps["rank"])) == [0, 1]
    names = steps.groupby("rank").name.apply(list).to_dict()
    assert all(re.fullmatch(r"ProfilerStep#\d+", n) for ns in names.values() for n in ns)


def test_h200_probe_steps_and_python_stack():
    c = parsed(H200 / "sync.pt.trace.json.gz")
    steps = of_kind(c, "step").to_pandas()
    assert list(steps.step) == [2, 3, 4]
    ev = of_kind(c, "event").to_pandas()
    py = ev[ev.cat == "python_function"]
    assert len(py) == 611 and py.py_id.notna().all()
    assert c.traces[0]["metadata"]["cuda_runtime_version"] == 13000


@pytest.mark.parametrize(
    "name", ["nccl_data.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "inference_rank_1.json.gz"]
)
def test_chunked_parallel_decode_equals_one_validating_decode(name, monkeypatch):
    """The fast path (array located from its surroundings, cut into chunks, decoded by 2 forked workers)
    gives exactly what one validating decode of the whole file gives."""
    import tracekit.parse.parser as parse_mod
    from tracekit.parse import decode as _decode

    path = HTA / name
    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    fast = parse_paths([path])
    monkeypatch.setattr(_decode, "locate_events", lambda buf: None)
    slow = parse_paths([path])
    assert fast.table.to_pylist() == slow.table.to_pylist()
    assert fast.meta == slow.meta


def test_streamed_parse_to_file_equals_in_memory_parse(tmp_path, monkeypatch):
    """The streamed parse (2 workers, tables handed over in shared-memory slots that are reused many
    times over: far more chunks than slots) writes what the in-memory parse holds."""
    import tracekit.parse.parser as parse_mod
    from tracekit.data.store import read_capture

    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    # the third file as rank 2 (as its own rank 0 it would be a second run of rank 0: refused)
    third = tmp_path / "rank2.triton_example.json.gz"
    third.write_bytes((HTA / "triton_example.json.gz").read_bytes())
    files = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz", third]
    out = parse_mod.parse_to_file(files, tmp_path / "c.parquet")
    assert out.meta["event_rows"] == sum(t["events"] for t in out.traces)
    back = read_capture(tmp_path / "c.parquet")
    mem = parse_paths(files)

    def canon(table):
        rows = table.to_pylist()
        return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r.values()))

    assert canon(back.table) == canon(mem.table)
    assert back.meta["sources"] == mem.meta["sources"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_fast_path_locates_the_events_of_every_real_trace(path):
    """Every real trace takes the fast path, and its metadata is what the validating decode reads."""
    from tracekit.parse import decode as _decode

    buf = gzip.decompress(path.read_bytes())
    located = _decode.locate_events(buf)
    assert located is not None
    metadata, start, end = located
    doc = _decode.split_document(buf, path, salvage=False, gz_damage=None)
    assert metadata == doc.metadata
    assert bytes(doc.events) == buf[start:end]


def test_rows_encoded_by_the_workers_make_the_file_parquetwriter_writes(tmp_path, monkeypatch):
    """The streamed parse's workers encode their chunks' row groups and the parent stitches them into the
    file (tracekit.data.stitch): byte for byte the file that one ParquetWriter writes from the same
    tables, decoded in this process (more chunks than workers, so row groups come from both)."""
    import tracekit.parse.parser as parse_mod

    files = [(HTA / "sampled_rank-0.json.gz", "sampled_rank-0.json.gz")]
    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    buf = gzip.decompress(files[0][0].read_bytes())
    assert len(parse_mod._decode.split_points(buf, 0, len(buf), 64 << 10)) > 6
    stitched = parse_mod.parse_files_to(files, tmp_path / "a.parquet")
    written = parse_mod.parse_files_to(files, tmp_path / "b.parquet", parallel=False)
    assert stitched.meta == written.meta
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_a_decode_worker_that_dies_is_one_error_not_a_hang(tmp_path, monkeypatch):
    """A worker killed mid-parse (the OOM killer, a user's kill -9) fails the parse with one message and
    leaves no output, where a multiprocessing.Pool would have waited forever for its result."""
    import os

    import tracekit.parse.parser as parse_mod
    from tracekit.errors import WorkerError

    real = parse_mod._decode_range

    def dies_on_third_chunk(job):
        if job[0] == third_start:
            os._exit(9)
        return real(job)

    files = [HTA / "sampled_rank-0.json.gz"]
    buf = gzip.decompress(files[0].read_bytes())
    third_start = parse_mod._decode.split_points(buf, *parse_mod._decode.locate_events(buf)[1:], 64 << 10)[2][
        0
    ]
    monkeypatch.setattr(parse_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    # Called inside the worker (the forked child has the patched module), never pickled.
    monkeypatch.setattr(parse_mod, "_decode_range", dies_on_third_chunk)
    with pytest.raises(WorkerError, match="worker process died .* while working on sampled_rank-0.json.gz;"):
        parse_mod.parse_to_file(files, tmp_path / "c.parquet")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_decode_workers_follow_the_cpus_this_process_may_use(monkeypatch):
    """One decode worker per CPU of the process' affinity (taskset, a scheduler's CPU set), not per CPU
    of the machine; TRACEKIT_WORKERS still wins."""
    from tracekit.data import pool as parser

    monkeypatch.delenv("TRACEKIT_WORKERS", raising=False)
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert parser.workers() == 1
        monkeypatch.setenv("TRACEKIT_WORKERS", "3")
        assert parser.workers() == 3
    finally:
        os.sched_setaffinity(0, before)
    monkeypatch.delenv("TRACEKIT_WORKERS")
    assert parser.workers() == len(before)
