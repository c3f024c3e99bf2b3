"""`tracekit capture --script` on scripts that never import tracekit and make their own torch.profiler:
the profiler adopted (schedule, handler kept), its steps and the DataLoader's fetches timed, the loop's
steps outside it delimited by the fetches, the traces found where the handler wrote them; the bad inputs
(no profiler and no steps, a profiler that never records, traces gone) one line each."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.clirun import run_main
from tracekit.capture.adopt import Adopted, Adopter, Boundary, Fetch, schedule_params
from tracekit.errors import CaptureError
from tracekit.orchestrate.runner import run_capture

torch = pytest.importorskip("torch")

RECIPE = textwrap.dedent(
    """
    import sys
    import torch

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            return torch.full((8,), float(i)), i % 2

    loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=1)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before, after = int(sys.argv[1]), int(sys.argv[2])
    it = iter(loader)

    def train(batch):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(before):
        train(next(it))
    with torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=torch.profiler.tensorboard_trace_handler("./log"),
        record_shapes=True,
    ) as prof:
        for _ in range(8):
            train(next(it))
            prof.step()
    for _ in range(after):
        train(next(it))
    """
)


def _script(tmp_path, text, name="train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow
def test_the_seed_recipe_is_adopted_with_its_steps_inside_and_outside_the_profiler(tmp_path, monkeypatch):
    # GIVEN the seed recipe's shape (its own profiler, schedule and trace handler writing ./log), with 4
    #       training steps before the profiler and 3 after it, run from the folder it writes into
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, RECIPE)
    # WHEN it is captured unmodified
    (parquet,) = run_capture(None, tmp_path / "out", device="cpu", script=script, script_args=["4", "3"])
    run_dir = tmp_path / "out" / "train" / parquet.stem
    m = json.loads((run_dir / "manifest.json").read_text())
    # THEN the script's own schedule is the capture's, and its traces stay in ./log, copied beside
    assert m["status"] == "ok" and m["adopted"]["schedule_source"] == "torch.profiler.schedule"
    assert m["schedule"] == {"wait": 1, "warmup": 1, "active": 2, "repeat": 2, "skip_first": 0}
    assert m["adopted"]["record_shapes"] is True and m["adopted"]["activities"] == ["CPU"]
    written = sorted((tmp_path / "log").iterdir())
    assert len(written) == 2 and [t["path"] for t in m["adopted"]["traces"]] == [str(p) for p in written]
    copies = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("rank0."))
    assert len(copies) == 2 and all(n.endswith(".pt.trace.json") for n in copies)
    # AND each prof.step() delimited a profiled step, numbered as the trace's ProfilerStep#N
    rank = m["ranks"][0]
    prof = rank["profiled"]
    assert prof["profiler_step"] == list(range(8))
    assert prof["phases"] == ["wait", "warmup", "active", "active"] * 2
    assert prof["loader_fetches"] == [1] * 8 and all(w >= 0 for w in prof["loader_wait_ms"])
    # AND the unprofiled steps are the loop's own before (less the first: a warm-up) and after the
    #     profiler, delimited by its fetches, and the schedule's two wait steps
    un = rank["unprofiled"]
    assert un["where"] == ["outside", "outside", "wait", "wait", "outside", "outside"]
    assert un["clock"] == "host" and len(un["step_ms"]) == len(un["cpu_ms"]) == 6
    assert all(w <= s for w, s in zip(un["loader_wait_ms"], un["step_ms"]))
    # AND the DataLoader's worker timed every batch it made
    loader = m["loader"]
    assert loader["marked_by"] == "adopted" and loader["num_workers"] == 1
    (prod,) = loader["production"][:1]
    assert prod["workers"] == 1 and prod["batches"] >= 4 + 8 + 3
    assert prod["cpu_ms"]["median"] > 0 and prod["wall_ms"]["median"] > 0
    assert loader["usable_cpus"] >= 1 and m["samples_per_step"] == 4
    # AND the capture parses and analyses like any other
    from tracekit.api import analyze

    report = analyze(parquet).report
    assert len(report.host.steps) == 4  # the active steps of the two cycles
    assert report.input_pipeline is not None and report.input_pipeline.steady is not None


@pytest.mark.slow
def test_a_profiler_without_schedule_and_its_own_export_is_adopted(tmp_path, monkeypatch):
    # GIVEN `with profile() as prof:` around a few forward passes, exported after the block
    monkeypatch.chdir(tmp_path)
    script = _script(
        tmp_path,
        """
        import torch
        model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
        with torch.profiler.profile() as prof:
            for _ in range(5):
                model(x)
        prof.export_chrome_trace("trace.json")
        """,
    )
    (parquet,) = run_capture(None, tmp_path / "out", device="cpu", script=script)
    m = json.loads((parquet.with_suffix("") / "manifest.json").read_text())
    # THEN it records from start to stop: no schedule, no steps, the trace found where it was written
    assert m["adopted"]["schedule_source"] == "none" and m["ranks"][0]["profiled"]["phases"] == []
    assert (tmp_path / "trace.json").exists() and m["adopted"]["traces"][0]["path"].endswith("trace.json")
    assert m["loader"] is None and m["unprofiled_step_ms"] == []


@pytest.mark.slow
def test_a_profiler_that_exports_nothing_is_exported_by_tracekit(tmp_path):
    script = _script(
        tmp_path,
        """
        import torch
        model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
        with torch.profiler.profile() as prof:
            model(x)
        print(prof.key_averages().table(row_limit=3))
        """,
    )
    (parquet,) = run_capture(None, tmp_path / "out", device="cpu", script=script)
    m = json.loads((parquet.with_suffix("") / "manifest.json").read_text())
    assert len(m["adopted"]["exported_by_tracekit"]) == 1 and m["adopted"]["traces"] == []


BAD = {
    "no profiler": ("print('training without a profiler')", r"neither started a torch\.profiler\.profile"),
    "never records": (
        """
        import torch
        with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=5, warmup=1, active=2),
            on_trace_ready=torch.profiler.tensorboard_trace_handler("log"),
        ) as prof:
            for _ in range(3):
                torch.ones(4).sum()
                prof.step()
        """,
        r"never recorded a step: its schedule \(wait=5,warmup=1,active=2,repeat=0,skip_first=0\) records "
        r"only after 6 steps \(skip_first \+ wait \+ warmup\), and the loop called prof.step\(\) 3 times",
    ),
    "traces removed": (
        """
        import shutil, torch
        with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler("gone"),
        ) as prof:
            for _ in range(3):
                torch.ones(4).sum()
                prof.step()
        shutil.rmtree("gone")
        """,
        r"wrote 1 trace files, and none is there any more",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scripts_are_one_line(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    text, needle = BAD[case]
    with pytest.raises(CaptureError, match=needle):
        run_capture(None, tmp_path / "out", device="cpu", script=_script(tmp_path, text))


@pytest.mark.slow
def test_a_script_without_profiler_or_steps_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, "x = 1\n")
    code, _, err = run_main(["capture", "--script", str(script), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("tracekit: error: ")
    assert "neither started a torch.profiler.profile" in err


def test_lightnings_wrapped_schedule_is_read_and_a_custom_one_is_not():
    class ScheduleWrapper:  # Lightning keeps torch's schedule in `_schedule`
        def __init__(self, schedule):
            self._schedule = schedule

        def __call__(self, step):
            return self._schedule(step)

    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2, skip_first=4)
    expect = {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 4}
    assert schedule_params(sched) == expect and schedule_params(ScheduleWrapper(sched)) == expect
    assert schedule_params(lambda step: None) is None and schedule_params(None) is None


US = 1000  # the test's times are µs


def _boundary(kind, entry, ret, before, after, num):
    return Boundary(kind, entry * US, entry * US, before, None, ret * US, ret * US, num, after)


def test_steps_from_a_profilers_boundaries_and_the_fetches_outside_it():
    # GIVEN (µs) fetches of one DataLoader at 0, 100 and 200 before the profiler starts (300-305), one
    #       in each of its steps, a step() at 400 (-> warmup), 500 (-> record), 600 (-> none, done),
    #       stop() at 700, and fetches at 800, 900 and 1000 after it
    ad = Adopter("/nonexistent", "cpu")
    fetch = [(0, 10), (100, 110), (200, 220), (310, 320), (415, 420), (510, 530), (800, 805), (900, 950)]
    fetch += [(1000, 1001)]
    ad.fetches = [Fetch(a * US, b * US, a * US, 1, True) for a, b in fetch]
    p = Adopted(0, object())
    p.boundaries = [
        _boundary("start", 300, 305, None, "NONE", 0),
        _boundary("step", 400, 410, "NONE", "WARMUP", 1),
        _boundary("step", 500, 505, "WARMUP", "RECORD_AND_SAVE", 2),
        _boundary("step", 600, 650, "RECORD_AND_SAVE", "NONE", 3),
        _boundary("stop", 700, 710, "NONE", None, 3),
    ]
    ad.profilers = [p]
    # WHEN the steps are built
    steps = ad.steps()
    # THEN two outside steps before (0-100, 100-200: 200 starts no whole step), three profiler steps
    #      (the piece 650-700 before stop() is none), two outside steps after
    got = [(s.start_ns // US, s.end_ns // US, s.phase, round(s.wait_ms * 1e3), s.fetches) for s in steps]
    assert got == [
        (0, 100, "outside", 10, 1),
        (100, 200, "outside", 10, 1),
        (305, 400, "wait", 10, 1),
        (410, 500, "warmup", 5, 1),
        (505, 600, "active", 20, 1),
        (800, 900, "outside", 5, 1),
        (900, 1000, "outside", 50, 1),
    ]
    assert [s.step_num for s in steps if s.where == "profiler"] == [0, 1, 2]
    # AND the manifest's unprofiled steps are all but the first, with where they were; the CPU time of a
    #     step is the process' between its ends (here the clock's own)
    rec = ad.rank_record("ok", None, None)
    un = rec["unprofiled"]
    assert un["where"] == ["outside", "wait", "outside", "outside"]
    assert un["host_step_ms"] == un["step_ms"] == un["cpu_ms"] == [0.1, 0.095, 0.1, 0.1]
    assert un["loader_wait_ms"] == [0.01, 0.01, 0.005, 0.05] and un["loader_fetch_end_ms"][1] == 0.015
    assert rec["profiled"]["phases"] == ["wait", "warmup", "active"]
    assert rec["profiled"]["loader_wait_ms"] == [0.01, 0.005, 0.02]


def test_kinetos_start_and_stop_lines_are_dropped_from_the_childs_output():
    import io

    from tracekit.orchestrate.runner import forward_output

    # GIVEN a child's output with Kineto's lines among the script's own, cut into odd chunks
    text = (
        b"step 1\n"
        b"USDT:2026-12-06 03:18:52 21741:21741 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        b"[W1206 CPUAllocator.cpp:245] Memory block of unknown size\n"
        b"USDT:2026-12-06 03:18:53 21741:21741 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
        b"progress 50%\rprogress 100%"
    )

    class Chunks(io.RawIOBase):
        def __init__(self):
            self.parts = [text[i : i + 7] for i in range(0, len(text), 7)]

        def read1(self, n):
            return self.parts.pop(0) if self.parts else b""

    got = []
    forward_output(Chunks(), got.append)
    # THEN everything but the two USDT lines comes through, in order, the partial last line too
    assert "".join(got) == (
        "step 1\n[W1206 CPUAllocator.cpp:245] Memory block of unknown size\nprogress 50%\rprogress 100%"
    )


def test_a_long_run_after_the_profilers_last_cycle_keeps_bounded_records(tmp_path):
    from tracekit.capture.adopt import QUIET_STEPS

    # GIVEN a profiler whose one cycle ends at its second step, then 500 more steps and fetches in it,
    #       then 500 fetches after it stopped
    ad = Adopter(str(tmp_path), "cpu")
    ad.install()
    try:
        data = torch.utils.data.TensorDataset(torch.arange(2000.0))
        it = iter(torch.utils.data.DataLoader(data, batch_size=1))
        sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
        with torch.profiler.profile(schedule=sched, on_trace_ready=lambda p: None) as prof:
            for _ in range(502):
                next(it)
                prof.step()
        for _ in range(500):
            next(it)
    finally:
        ad.uninstall()
    # THEN torch's classes are as they were
    assert "export_chrome_trace" not in torch.profiler.profile.__dict__
    assert torch.profiler.profile.step.__qualname__ == "profile.step"
    # AND tracekit kept the recorded steps and QUIET_STEPS past them, and as many fetches after the stop
    (p,) = ad.profilers
    # start(), the step() into the active step, QUIET_STEPS step() calls with nothing recorded, stop()
    assert len(p.boundaries) == 1 + 1 + QUIET_STEPS + 1
    assert len(ad.fetches) <= 2 * (2 + QUIET_STEPS) + QUIET_STEPS + 2
    phases = [s.phase for s in ad.steps() if s.where == "profiler"]
    assert phases[:2] == ["warmup", "active"] and set(phases[2:]) == {"done"}
