"""Many ranks (issue 12): the folder form of a capture, per-rank parse and analysis in worker processes,
the same results on every path, bad rank files, and the many-rank report."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clirun import run_main
from tests.test_render import check_golden, render
from tests.tracebuilder import TraceBuilder
from tracekit import api
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.pipeline import analyze
from tracekit.analysis.sketch import EXACT_VALUES, RELATIVE_ERROR, Sketch
from tracekit.data.store import FOLDER_META, read_capture, read_meta
from tracekit.errors import TracekitError, WorkerError
from tracekit.parse.parser import load_capture, parse_paths
from tracekit.scale import job as job_module
from tracekit.scale.executor import LocalExecutor, get_executor
from tracekit.scale.job import analyze_capture, parse_job

ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "fixtures" / "h200" / "ddp_slow_rank1"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
US = 1000


def make_job(folder: Path, n: int, straggler: int, steps: int = 2, t0: float = 0.0) -> Path:
    """An n-rank job: per step, a forward kernel (long on the straggler, a little longer on every
    third rank) and an all-reduce that ends at the same time on every rank.

        rank r GPU  [fwd 0,20+r%3)[==== nccl (waits) ====]      ends at 80 µs into the step
        straggler   [======== fwd 0,70 ========][nccl 70,80]
    """
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        t = TraceBuilder(rank=r, world_size=n, device_properties=[{"id": 0, "name": "Test GPU"}])
        corr = 0
        for k in range(steps):
            base = t0 + 100 * k
            t.step(k + 1, base, base + 100)
            fwd = 70 if r == straggler else 20 + r % 3
            t.op("aten::mm", base + 1, 4)
            corr += 1
            t.launch(base + 2, 2, corr=corr)
            t.kernel("fwd", base + 5, fwd - 5, corr=corr)
            t.op("c10d::allreduce_", base + 10, 4)
            corr += 1
            t.launch(base + 11, 2, corr=corr)
            t.kernel(NCCL, base + fwd, 80 - fwd, corr=corr)
        t.write(folder / f"rank{r}.pt.trace.json")
    return folder


def same_report(a, b) -> None:
    ja, jb = a.to_json(), b.to_json()
    for j in (ja, jb):
        j["capture"].pop("path", None)
    assert ja == jb


# -- the folder form ----------------------------------------------------------------------------------


def test_parse_to_a_folder_writes_one_dataset_of_one_file_per_rank(tmp_path, capsys):
    folder, single = tmp_path / "cap", tmp_path / "cap.parquet"
    code, out, _ = run_main(["parse", str(DDP), "-o", f"{folder}/"], capsys)
    assert code == 0 and out.startswith(f"wrote {folder}/: ")
    assert sorted(p.name for p in folder.iterdir()) == [FOLDER_META, "rank=0", "rank=1"]
    assert (folder / "rank=1" / "part-0.parquet").is_file()
    assert run_main(["parse", str(DDP), "-o", str(single)], capsys)[0] == 0
    # pyarrow reads the folder as one table, the rank from the folder names
    dataset = pq.read_table(folder)
    file_table = pq.read_table(single)
    assert dataset.num_rows == file_table.num_rows
    assert sorted(set(dataset["rank"].to_pylist())) == [0, 1]
    for r in (0, 1):
        in_folder = dataset.filter(pc.equal(dataset["rank"].cast("int32"), r)).num_rows
        assert in_folder == file_table.filter(pc.equal(file_table["rank"], r)).num_rows
    # the metadata of both forms says the same
    a, b = read_meta(folder), read_meta(single)
    assert a["sources"] == b["sources"] and a["traces"] == b["traces"]
    assert [p["rank"] for p in a["parts"]] == [0, 1]
    # every command reads it
    whole = read_capture(folder)
    assert whole.table.num_rows == file_table.num_rows and whole.summary()["ranks"] == [0, 1]
    code, out, _ = run_main(["info", str(folder)], capsys)
    assert code == 0 and "rank" in out
    code, out, _ = run_main(["diff", str(single), str(folder), "--json"], capsys)
    assert code == 0 and json.loads(out)["pairs"]


def test_folder_output_never_replaces_other_data(tmp_path, capsys):
    other = tmp_path / "runs"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    code, _, err = run_main(["parse", str(DDP), "-o", f"{other}/", "--force"], capsys)
    assert code == 2 and "not a tracekit capture" in err and (other / "keep.txt").read_text() == "mine"
    cap = tmp_path / "cap"
    assert run_main(["parse", str(DDP), "-o", f"{cap}/"], capsys)[0] == 0
    code, _, err = run_main(["parse", str(DDP), "-o", f"{cap}/"], capsys)
    assert code == 2 and "pass --force" in err
    assert run_main(["parse", str(DDP), "-o", f"{cap}/", "--force"], capsys)[0] == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_a_folder_without_its_metadata_file_is_not_a_capture(tmp_path):
    cap = tmp_path / "cap"
    parse_job([DDP], cap, folder=True)
    (cap / FOLDER_META).unlink()
    with pytest.raises(TracekitError, match="without _tracekit.json"):
        read_meta(cap)


# -- one result on every path --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def job12(tmp_path_factory) -> Path:
    return make_job(tmp_path_factory.mktemp("job12") / "job", 12, straggler=7)


@pytest.mark.parametrize("which", ["ddp", "job12"])
def test_results_are_identical_on_every_path(tmp_path, request, which, monkeypatch):
    traces = DDP if which == "ddp" else request.getfixturevalue("job12")
    folder = parse_job([traces], tmp_path / "cap", folder=True).output
    single = parse_job([traces], tmp_path / "cap.parquet", folder=False).output
    reference = analyze(load_capture(single))  # one process, the whole capture as one part
    check_invariants(reference, load_capture(single))
    for path in (folder, single):
        for executor in (LocalExecutor(1), LocalExecutor(2)):
            same_report(reference, analyze_capture(path, executor=executor))
    for per_task in (1, 3):  # how ranks are grouped into tasks changes nothing
        monkeypatch.setattr(job_module, "MAX_RANKS_PER_TASK", per_task)
        same_report(reference, analyze_capture(folder, executor=LocalExecutor(2)))
    same_report(reference, api.analyze([traces], savings=False).report)  # traces parsed on the fly
    checked = analyze_capture(folder, check=True)
    assert "idle never overlaps a device activity event" in checked.checked
    stragglers = {d.rank: d.straggler_rank for d in reference.devices}
    if which == "job12":
        assert all(s == 7 for r, s in stragglers.items() if r != 7) and stragglers[7] is None
        assert reference.job.stragglers[0].rank == 7 and reference.job.outliers[0].rank == 7
    else:
        assert stragglers == {0: 1, 1: None}


def test_a_file_per_worker_writes_the_same_capture_as_chunks_over_all_workers(tmp_path, job12):
    across = parse_job([job12], tmp_path / "a.parquet", folder=False, executor=LocalExecutor(2))
    assert job_module.across_files([1, 1], 2)
    from tracekit.parse.parser import parse_to_file

    parse_to_file([job12], tmp_path / "b.parquet")  # each file over the pool, streamed into one file
    a, b = read_capture(across.output), read_capture(tmp_path / "b.parquet")

    def rows(table):
        return sorted(json.dumps(r, sort_keys=True) for r in table.to_pylist())

    assert rows(a.table) == rows(b.table)
    assert a.meta["sources"] == b.meta["sources"] and a.meta["traces"] == b.meta["traces"]


# -- bad input --------------------------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


@pytest.mark.parametrize("output", ["cap/", "cap.parquet"])
def test_a_rank_file_that_fails_is_named_and_the_other_ranks_parse(tmp_path, capsys, output):
    traces = make_job(tmp_path / "job", 4, straggler=1)
    _truncate(traces / "rank2.pt.trace.json")
    out = tmp_path / output
    code, stdout, err = run_main(["parse", str(traces), "-o", str(out)], capsys)
    assert code == 2
    assert "rank 2 (job/rank2.pt.trace.json) left out" in err and "--salvage" in err
    assert "3 rank(s)" in stdout
    meta = read_meta(out)
    assert [f["rank"] for f in meta["failed"]] == [2]
    assert sorted(t["rank"] for t in meta["traces"]) == [0, 1, 3]
    code, report, _ = run_main(["analyze", str(out)], capsys)
    assert code == 0 and "left out: rank 2 (job/rank2.pt.trace.json)" in report
    # --salvage: the truncated rank keeps its complete events
    code, stdout, err = run_main(["parse", str(traces), "-o", str(out), "--force", "--salvage"], capsys)
    assert code == 0 and "4 rank(s)" in stdout and "salvaged job/rank2.pt.trace.json" in err


def test_a_job_whose_every_file_fails_is_an_error(tmp_path, capsys):
    traces = make_job(tmp_path / "job", 2, straggler=1)
    for p in traces.iterdir():
        _truncate(p)
    code, _, err = run_main(["parse", str(traces), "-o", str(tmp_path / "cap") + "/"], capsys)
    assert code == 2 and err.count("\n") == 1 and "rank" in err.lower()
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("output", ["cap/", "cap.parquet", None])
def test_copies_of_one_rank_are_refused_naming_both(tmp_path, capsys, output):
    traces = make_job(tmp_path / "job", 3, straggler=1)
    shutil.copy(traces / "rank1.pt.trace.json", traces / "rank1-copy.pt.trace.json")
    if output is None:
        with pytest.raises(TracekitError, match="rank1-copy.pt.trace.json.*both rank 1|both rank 1"):
            parse_paths([traces])
        return
    code, _, err = run_main(["parse", str(traces), "-o", str(tmp_path / output)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "job/rank1.pt.trace.json" in err and "job/rank1-copy.pt.trace.json" in err and "overlap" in err
    assert not (tmp_path / output.rstrip("/")).exists()


def test_successive_profiler_cycles_of_one_rank_are_one_rank(tmp_path, capsys):
    cycles = tmp_path / "job"
    make_job(cycles, 3, straggler=1)
    # a second profiler cycle of every rank, later: its own files, steps 3-4
    for r in range(3):
        t = TraceBuilder(rank=r, world_size=3)
        for k, n in enumerate((3, 4)):
            base = 1000 + 100 * k
            t.step(n, base, base + 100)
            t.kernel("fwd", base + 5, 20)
        t.write(cycles / f"rank{r}.cycle2.pt.trace.json")
    for output in ("cap/", "cap.parquet"):
        code, stdout, _ = run_main(["parse", str(cycles), "-o", str(tmp_path / output)], capsys)
        assert code == 0 and "3 rank(s), 12 step(s) from 6 file(s)" in stdout
    a = analyze_capture(tmp_path / "cap")
    same_report(a, analyze(load_capture(tmp_path / "cap.parquet")))
    assert [s.step for s in a.devices[0].samples] == [1, 2, 3, 4]


# -- the many-rank report ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report12(job12):
    report = analyze(parse_paths([job12]))
    check_invariants(report)
    return report


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_golden_many_ranks(report12, fmt):
    from tracekit.render.registry import renderers

    check_golden(f"analyze_ranks12{renderers()[fmt].suffix}", render(report12, fmt))


def test_many_ranks_are_summarised_and_rank_r_shown_in_full(tmp_path, capsys, job12):
    cap = tmp_path / "cap"
    assert run_main(["parse", str(job12), "-o", f"{cap}/"], capsys)[0] == 0
    code, text, _ = run_main(["analyze", str(cap), "--width", "100"], capsys)
    assert code == 0
    assert "rank 3 device 0" not in text  # no table set per rank
    assert "stragglers: the ranks others wait for" in text and "ranks that differ from the rest" in text
    assert "11 ranks (0-6, 8-11) wait for rank 7" in text
    code, one, _ = run_main(["analyze", str(cap), "--rank", "3", "--width", "100"], capsys)
    assert code == 0 and "rank 3 device 0 (Test GPU): where the step time went" in one
    assert "straggler: rank 7" in one and "rank 3 of a job of 12 ranks" in one
    code, out, _ = run_main(["analyze", str(cap), "--json"], capsys)
    doc = json.loads(out)
    assert len(doc["devices"]) == 12 and doc["job"]["stragglers"][0]["rank"] == 7
    code, _, err = run_main(["analyze", str(cap), "--rank", "12"], capsys)
    assert code == 2 and "rank 12 is not in" in err


def test_few_ranks_keep_a_table_set_per_rank(tmp_path, capsys):
    traces = make_job(tmp_path / "job", 3, straggler=2)
    code, text, _ = run_main(["analyze", str(traces), "--width", "100"], capsys)
    assert code == 0 and all(f"rank {r} device 0" in text for r in range(3))
    assert "figures across" not in text


def test_tensorboard_runs_are_groups_of_ranks_beyond_8(report12):
    from tracekit.export.tensorboard import report_scalars

    runs = report_scalars(report12)
    assert sorted(runs) == [f"ranks{a}-{a + 1}" for a in (0, 10, 2, 4, 6, 8)]
    step = runs["ranks6-7"][1]
    assert step["group_max/step/collective_wait_ms"] > 0  # rank 6 waits for rank 7
    assert step["group_max/idle_ms/total"] >= step["idle_ms/total"]


def test_store_in_a_capture_folder(tmp_path, capsys, job12, monkeypatch):
    cap = tmp_path / "cap"
    assert run_main(["parse", str(job12), "-o", f"{cap}/"], capsys)[0] == 0
    code, _, err = run_main(["analyze", str(cap), "--store", "--check"], capsys)
    assert code == 0 and f"stored the analysis in {cap}" in err and "ok: idle never overlaps busy" in err
    assert all((cap / f"rank={r}" / "idle-0.parquet").is_file() for r in range(12))
    idle = pq.read_table(cap, filters=[("kind", "=", "idle")])
    report = analyze_capture(cap)
    assert idle.num_rows > 0
    assert sum(idle["dur_ns"].to_pylist()) == sum(s.idle_total_ns for d in report.devices for s in d.samples)
    from tracekit.api import analysis_of as load_report

    def no_analysis(*_a, **_k):
        raise AssertionError("analysed again")

    monkeypatch.setattr(job_module, "analyze_capture", no_analysis)
    same_report(report, load_report(cap))
    # stored twice: the idle rows are replaced, not doubled
    monkeypatch.undo()
    assert run_main(["analyze", str(cap), "--store"], capsys)[0] == 0
    assert pq.read_table(cap, filters=[("kind", "=", "idle")]).num_rows == idle.num_rows


# -- the executor ------------------------------------------------------------------------------------


def _square(x: int) -> int:
    return x * x


def _die(x: int) -> int:
    if x == 3:
        os._exit(1)
    return x


def test_local_executor_keeps_the_input_order():
    assert list(LocalExecutor(2).map(_square, range(50))) == [x * x for x in range(50)]
    assert list(LocalExecutor(1).map(_square, [3])) == [9]


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_worker_that_dies_is_one_error():
    with pytest.raises(WorkerError, match="worker process died"):
        list(LocalExecutor(2).map(_die, range(8)))


class _Rank(int):
    @property
    def what(self) -> str:
        return f"rank {int(self)}"


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_worker_that_dies_is_named_by_the_tasks_in_flight():
    """GIVEN tasks that name their rank WHEN the worker of rank 3 dies THEN the error names rank 3 among
    the few in flight (the pool cannot tell which worker held which), not the whole job."""
    with pytest.raises(WorkerError, match=r"while working on (one of )?(rank \d+, )*rank 3[,;]") as err:
        list(LocalExecutor(2).map(_die, [_Rank(r) for r in range(40)]))
    assert "rank 39" not in str(err.value)  # never handed out: at most pool.window(2) in flight


def test_ray_without_its_backend_is_one_clear_error():
    import importlib.util

    if importlib.util.find_spec("tracekit.scale.ray_backend") is not None:
        pytest.skip("the Ray backend is present")
    with pytest.raises(TracekitError, match="--ray is not available"):
        get_executor("auto")
    assert isinstance(get_executor(None), LocalExecutor)


# -- the kernel-median sketch ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 10**9), min_size=1, max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=5),
    scale=st.sampled_from([1, 40]),
)
def test_sketch_merge_is_independent_of_the_split(values, cuts, scale):
    v = np.repeat(np.asarray(values, np.int64), scale)  # scale 40: beyond EXACT_VALUES at times
    bounds = sorted({0, v.size, *(min(c * scale, v.size) for c in cuts)})
    parts = [Sketch.of(v[a:b]) for a, b in zip(bounds, bounds[1:])]
    whole, merged = Sketch.of(v), Sketch.merge(parts)
    assert (merged.count, merged.total, merged.min, merged.max) == (v.size, int(v.sum()), v.min(), v.max())
    assert merged.median == whole.median
    exact = float(np.median(v))
    if v.size <= EXACT_VALUES:
        assert merged.median == exact
    else:
        assert abs(merged.median - exact) <= RELATIVE_ERROR * exact + 1e-9 or exact == 0


def test_gzip_rank_files_parse_across_workers(tmp_path):
    traces = make_job(tmp_path / "job", 3, straggler=0)
    for p in list(traces.iterdir()):
        with open(p, "rb") as src, gzip.open(str(p) + ".gz", "wb") as dst:
            dst.write(src.read())
        p.unlink()
    result = parse_job([traces], tmp_path / "cap", folder=True, executor=LocalExecutor(2))
    assert result.ranks == [0, 1, 2] and result.steps == 6


def test_many_rank_json_validates_and_reads_back(report12):
    import jsonschema

    from tests.test_render import SCHEMA
    from tracekit.analysis.model import Report

    doc = json.loads(render(report12, "json"))
    jsonschema.validate(doc, SCHEMA)
    assert Report.from_json(doc) == report12 and Report.from_json(doc).job == report12.job


def test_commands_that_need_one_trace_say_so_for_a_capture_folder(tmp_path, capsys):
    cap = tmp_path / "cap"
    assert run_main(["parse", str(DDP), "-o", f"{cap}/"], capsys)[0] == 0
    code, _, err = run_main(["annotate", str(cap), "-o", str(tmp_path / "a.json.gz")], capsys)
    assert code == 2 and "a capture of 2 trace files" in err and err.count("\n") == 1


def test_a_gzip_file_of_several_members_reads_whole(tmp_path):
    # gzip allows concatenated members (`cat a.gz b.gz`); the fast gunzip reads every one
    trace = make_job(tmp_path / "job", 1, straggler=0) / "rank0.pt.trace.json"
    data = trace.read_bytes()
    cut = len(data) // 2
    two = tmp_path / "two" / "rank0.pt.trace.json.gz"
    two.parent.mkdir()
    two.write_bytes(gzip.compress(data[:cut]) + gzip.compress(data[cut:]) + b"\0" * 8)
    a, b = parse_paths([trace]), parse_paths([two])
    assert (
        a.table.num_rows == b.table.num_rows
        and a.meta["traces"][0]["events"] == b.meta["traces"][0]["events"]
    )
