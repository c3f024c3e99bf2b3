"""The input pipeline measured without the profiler: loader waits per step in the manifest, the
DataLoader's settings, the window warning, and the one session a script gets however often it asks."""

from __future__ import annotations

import io
import json
import textwrap

import pytest

from tracekit.capture.knobs import DEFAULT_SCHEDULE, KnobError
from tracekit.capture.loader import Fetches, describe_loader, window_hides_loader, window_warning
from tracekit.errors import CaptureError
from tracekit.orchestrate.runner import run_capture

torch = pytest.importorskip("torch")
QUICK = {"timing_warmup": 1, "timing_steps": 3}


def _loader(**kw):
    ds = torch.utils.data.TensorDataset(torch.arange(32.0))
    return torch.utils.data.DataLoader(ds, batch_size=4, **kw)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_dataloader_is_described_with_its_prefetch_depth():
    # GIVEN a DataLoader with 3 workers and prefetch_factor 2, one without workers, and a plain list
    with_workers = describe_loader(_loader(num_workers=3, prefetch_factor=2, persistent_workers=True))
    without = describe_loader(_loader(num_workers=0))
    other = describe_loader([1, 2, 3])
    # THEN the settings are recorded and the depth is what the workers hold ahead
    assert with_workers["dataloader"] is True and with_workers["num_workers"] == 3
    assert with_workers["prefetch_depth"] == 6 and with_workers["persistent_workers"] is True
    assert with_workers["batch_size"] == 4 and with_workers["pin_memory"] is False
    assert without["prefetch_depth"] == 0 and without["prefetch_factor"] is None
    assert other == {"type": "builtins.list", "dataloader": False}


def test_the_window_warning_fires_when_the_active_steps_fit_in_the_queue():
    depth6 = {"num_workers": 3, "prefetch_factor": 2, "prefetch_depth": 6}
    assert window_hides_loader(DEFAULT_SCHEDULE, depth6)  # active=3 <= 6
    assert window_hides_loader(dict(DEFAULT_SCHEDULE, active=6), depth6)
    assert not window_hides_loader(dict(DEFAULT_SCHEDULE, active=7), depth6)
    assert not window_hides_loader(DEFAULT_SCHEDULE, {"prefetch_depth": 0})  # no workers: no queue
    assert not window_hides_loader(DEFAULT_SCHEDULE, None)
    text = window_warning(DEFAULT_SCHEDULE, depth6)
    assert "active=3" in text and "3 workers x prefetch_factor 2 = 6 batches" in text and "active=8" in text


def test_fetches_time_each_next_and_reset_per_step():
    # GIVEN an iterable whose every next() takes at least 2 ms
    import time

    def slow():
        for i in range(3):
            time.sleep(0.002)
            yield i

    f = Fetches()
    start = time.perf_counter_ns()
    it = f.timed(slow())
    # WHEN two items are fetched in one step, then one in the next
    next(it), next(it)
    first = f.take(start)
    next(it)
    second = f.take(start)
    # THEN each step has its own wait, count and end of its last fetch after the step's start
    assert first["fetches"] == 2 and first["wait_ms"] >= 4.0 and first["end_ms"] >= first["wait_ms"]
    assert second["fetches"] == 1 and 2.0 <= second["wait_ms"] < first["wait_ms"] + 50
    assert f.take(start) == {"wait_ms": 0.0, "fetches": 0, "end_ms": None}


def test_step_outside_the_session_is_a_clear_error():
    from tracekit.capture.recorder import CaptureConfig, Session

    cfg = CaptureConfig("/nonexistent", "w", "cpu", dict(DEFAULT_SCHEDULE), dict(QUICK))
    with pytest.raises(KnobError, match=r"before the session started: use `with session\(\) as s:`"):
        Session(cfg, stream=io.StringIO()).step()


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_the_unprofiled_warm_up_lasts_past_the_loaders_prefetched_batches():
    from tracekit.capture.recorder import CaptureConfig, Session

    # GIVEN a capture with 2 warm-up steps and a loop over a DataLoader whose 3 workers make 6 batches ahead
    cfg = CaptureConfig("/nonexistent", "w", "cpu", dict(DEFAULT_SCHEDULE), dict(QUICK, timing_warmup=2))
    out = io.StringIO()
    sess = Session(cfg, stream=out)
    planned = sess.n_total
    sess.loader(_loader(num_workers=3, prefetch_factor=2))  # lazy: no worker starts here
    # THEN the first 6 steps are warm-up, not timed, and the capture says why
    assert sess.n_untimed == 6 and sess.n_total == planned + 4
    assert "unprofiled warm-up extended to 6 steps" in out.getvalue()
    assert sess.loader_record() is None  # nothing fetched yet: no loader waits to report


def test_session_is_handed_out_once_per_capture_and_steps_enter_it(monkeypatch):
    # GIVEN a pending capture session, as `python -m tracekit.capture --script` leaves it
    from tracekit.capture import api
    from tracekit.capture.recorder import CaptureConfig, Session

    sched = dict(DEFAULT_SCHEDULE, wait=0, warmup=0, active=1, repeat=1)
    cfg = CaptureConfig("/nonexistent", "w", "cpu", sched, dict(QUICK))
    sess = Session(cfg, stream=io.StringIO())

    class Prof:  # the loop's bookkeeping only: no profiler here
        def step(self):
            pass

    sess._start_profiler = lambda: setattr(sess, "_prof", Prof())
    sess._stop_profiler = lambda exc: setattr(sess, "_prof", None)
    monkeypatch.setattr(api, "_pending", sess)
    monkeypatch.setattr(api, "_taken", None)
    # WHEN the script reads its knobs from one session() call, then loops over steps() twice (epochs)
    assert api.session().knobs == dict(QUICK)
    seen = []
    for _epoch in range(3):
        for item in api.steps(range(3)):
            seen.append(item)
    # THEN it was one capture: every call got the same session, the epochs continued it to the end
    assert api.session() is sess and sess.entered
    assert sess.done and len(seen) == sess.n_total == 1 + 3 + 1
    assert len(sess.loader_steps) == sess.n_total


@pytest.mark.slow
def test_a_loader_bound_cpu_capture_records_its_waits_and_loader(tmp_path, capfd, monkeypatch):
    # GIVEN dataloader_train with CPU-heavy samples (image_size) fed by one worker holding 4 batches
    # ahead: the loader is much slower than the small model's step (one torch thread in the training
    # process, so that on a 2-core machine it does not spin against its worker)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    knobs = dict(QUICK, num_workers=1, prefetch_factor=4, image_size=256, batch_size=16, features=32)
    knobs.update(dataset_size=128)
    knobs.update(hidden=32, log_every=0)
    # WHEN it is captured with the default schedule
    (path,) = run_capture("dataloader_train", tmp_path, device="cpu", knobs=knobs, name="lb")
    # THEN the capture warned that the window cannot show the stall, and the manifest holds the waits
    assert "tracekit.capture: warning: the profiled window (active=3 steps)" in capfd.readouterr().err
    m = json.loads((tmp_path / "dataloader_train" / "lb" / "manifest.json").read_text())
    loader = m["loader"]
    assert loader["dataloader"] and loader["num_workers"] == 1 and loader["prefetch_depth"] == 4
    assert loader["marked_by"] == "loader" and loader["window_hides_stall"] is True
    waits, steps = m["unprofiled_loader_wait_ms"], m["unprofiled_step_ms"]
    assert len(waits) == len(steps) == 3 and all(0 <= w <= s for w, s in zip(waits, steps))
    # loader-bound: most of the unprofiled step is spent waiting for the batch
    assert sum(waits) / sum(steps) > 0.5, (waits, steps)
    prof = m["ranks"][0]["profiled"]
    assert len(prof["loader_wait_ms"]) == len(prof["host_step_ms"]) == 10
    # AND the analysis names the loader as the main cause of the unprofiled step
    from tracekit.api import analyze

    report = analyze(path).report
    assert report.input_pipeline.unprofiled_wait_share > 0.5
    assert report.advice[0].kind == "dataloader_workers" and report.advice[0].basis == "unprofiled"


@pytest.mark.slow
def test_the_batch_on_device_counterpart_fetches_nothing(tmp_path):
    knobs = dict(QUICK, num_workers=1, image_size=32, batch_size=8, dataset_size=64, features=16)
    knobs.update(hidden=16, log_every=0, batch_on_device=True)
    run_capture(
        "dataloader_train", tmp_path, device="cpu", knobs=knobs, name="gpu",
        schedule="wait=0,warmup=1,active=1,repeat=1",
    )  # fmt: skip
    m = json.loads((tmp_path / "dataloader_train" / "gpu" / "manifest.json").read_text())
    assert m["loader"] is None and m["unprofiled_loader_wait_ms"] is None and m["status"] == "ok"


SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import tracekit.capture as tc

    fail_at = int(sys.argv[1])

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            if i == fail_at:
                raise ValueError(f"bad sample {i}")
            return torch.full((4,), float(i))

    knobs = tc.session().knobs  # read the knobs first: the same session the loop then uses
    loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=1, prefetch_factor=2)
    model = torch.nn.Linear(4, 1)
    for epoch in range(10):
        for x in tc.steps(loader, samples_per_step=4):
            model(x).sum().backward()
    """
)


@pytest.mark.slow
def test_a_script_reading_its_knobs_then_looping_is_one_capture(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    sched = "wait=1,warmup=1,active=2,repeat=1"
    run_capture(
        None, tmp_path / "out", device="cpu", knobs=QUICK, schedule=sched, script=script,
        script_args=["-1"], name="ok",
    )  # fmt: skip
    m = json.loads((tmp_path / "out" / "train" / "ok" / "manifest.json").read_text())
    # the unprofiled warm-up lasts past the 2 batches the worker makes ahead (timing_warmup=1 is shorter)
    assert m["status"] == "ok" and m["ranks"][0]["steps_completed"] == 2 + 3 + 4
    assert m["loader"]["marked_by"] == "steps" and m["loader"]["prefetch_depth"] == 2
    assert m["loader"]["unprofiled_warmup_steps"] == 2
    assert len(m["unprofiled_loader_wait_ms"]) == 3


@pytest.mark.slow
def test_a_loader_raising_in_its_worker_is_a_crashed_capture_with_the_workers_traceback(tmp_path, capfd):
    # GIVEN a script whose dataset raises on sample 36 (batch 9: the second cycle's first step)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    sched = "wait=1,warmup=1,active=2,repeat=2"  # unprofiled steps 0-4; cycles over 5-8 and 9-12
    # WHEN it is captured
    with pytest.raises(CaptureError, match=r"ValueError.*traces written so far are kept"):
        run_capture(
            None, tmp_path / "out", device="cpu", knobs=QUICK, schedule=sched, script=script,
            script_args=["36"], name="crash",
        )  # fmt: skip
    # THEN the worker's own traceback is shown and recorded, and the first cycle's trace is kept
    err = capfd.readouterr().err
    assert "in DataLoader worker process 0" in err and 'raise ValueError(f"bad sample {i}")' in err
    run_dir = tmp_path / "out" / "train" / "crash"
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "crashed" and "bad sample 36" in m["error"]
    assert len([p for p in run_dir.iterdir() if p.name.endswith(".pt.trace.json.gz")]) >= 1
    assert not (tmp_path / "out" / "train" / "crash.parquet").exists()


def test_dataloader_train_image_work_is_deterministic_and_sized():
    from workloads.dataloader_train import RandomDataset

    ds = RandomDataset(8, 24, 10, seed=0, sleep_ms=0, image_size=32)
    a, la = ds[3]
    b, lb = ds[3]
    assert a.shape == (24,) and torch.equal(a, b) and int(la) == int(lb)
    assert not torch.equal(ds[4][0], a)
    with pytest.raises(KnobError, match="image_size=30: use a multiple of 8"):
        RandomDataset(8, 24, 10, seed=0, sleep_ms=0, image_size=30)


def test_workload_fetches_are_timed_through_the_context():
    from tracekit.capture.knobs import resolve_knobs
    from tracekit.capture.workload import Context, knobs_of, load

    class Recorder:
        def __init__(self):
            self.sources = []

        def loader(self, iterable, source=None):
            self.sources.append(source)
            return iter(iterable)

    given = {"dataset_size": "16", "batch_size": "4", "features": "8", "hidden": "8", "num_workers": "0"}
    rec = Recorder()
    ctx = Context("cpu", resolve_knobs(knobs_of("dataloader_train"), given, "cpu", "d"), session=rec)
    runner = load("dataloader_train").build(ctx)
    runner.step()
    assert rec.sources == [runner.loader]
