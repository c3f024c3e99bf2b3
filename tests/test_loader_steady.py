"""The input pipeline measured at its source: the DataLoader workers' batch records, and the steady state
the analysis derives from them (the training step, the workers' pace, the CPUs' floor), named in the
report and the advice."""

from __future__ import annotations

import io
import os

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.analysis.loader import steady_state
from tracekit.analysis.model import BOUND_CPUS, BOUND_PIPELINE, BOUND_TRAINING, Report
from tracekit.analysis.pipeline import analyze
from tracekit.capture import workers
from tracekit.parse.parser import parse_paths

torch = pytest.importorskip("torch")

MS = 1_000_000


def _records(folder, rows):
    """rows: (start_ms, end_ms, cpu_ms, runqueue_ms, seed, worker_id, num_workers)."""
    with open(os.path.join(folder, "worker.1.bin"), "wb") as fh:
        for a, b, c, q, seed, wid, n in rows:
            fh.write(workers.RECORD.pack(int(a * MS), int(b * MS), int(c * MS), int(q * MS), seed, wid, n))


def test_the_workers_records_are_summarised_per_iterator(tmp_path):
    # GIVEN two workers of one iterator making 4 batches of 100 ms wall, 60 ms of which on a CPU and
    #       30 waiting for one, over 0-200 ms; and one batch of another iterator
    _records(
        tmp_path,
        [
            (0, 100, 60, 30, 7, 0, 2),
            (0, 100, 60, 30, 7, 1, 2),
            (100, 200, 60, 30, 7, 0, 2),
            (100, 200, 60, 30, 7, 1, 2),
            (500, 510, 5, 0, 9, 0, 1),
        ],
    )
    with open(tmp_path / "worker.2.bin", "wb") as fh:  # a record cut short by a killed worker
        fh.write(b"\0" * 7)
    first, second = workers.summarize(str(tmp_path))
    # THEN the batches of each iterator are counted and timed; own = wall less the run-queue wait
    assert first["workers"] == 2 and first["batches"] == 4 and first["workers_seen"] == 2
    assert first["wall_ms"]["median"] == 100 and first["cpu_ms"]["median"] == 60
    assert first["runqueue_ms"]["median"] == 30 and first["own_ms"]["median"] == 70
    assert first["busy"] == 1.0 and (first["first_ms"], first["last_ms"]) == (0, 200)
    assert second["batches"] == 1 and second["workers"] == 1 and second["wall_ms"]["median"] == 10


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_forked_and_spawned_workers_time_their_batches(tmp_path, context):
    # GIVEN the capture's worker timing installed, and a DataLoader with 2 workers started either way
    workers.install(str(tmp_path))
    try:
        data = torch.utils.data.TensorDataset(torch.arange(64.0))
        loader = torch.utils.data.DataLoader(
            data, batch_size=4, num_workers=2, multiprocessing_context=context
        )
        batches = list(loader)
    finally:
        workers.uninstall()
    # THEN every batch was timed in its worker, and the training process' loop is torch's again
    (prod,) = workers.summarize(str(tmp_path))
    assert len(batches) == prod["batches"] == 16 and prod["workers"] == 2 and prod["workers_seen"] == 2
    import torch.utils.data._utils.worker as torch_worker

    assert torch_worker._worker_loop is not workers.worker_loop and workers.ENV not in os.environ


def _production(own, cpu, workers_=2, wall=None, batches=20):
    stats = {"median": own, "mean": own, "p10": own, "p90": own}
    return {
        "workers": workers_,
        "batches": batches,
        "wall_ms": dict(stats, median=wall or own),
        "own_ms": stats,
        "cpu_ms": {"median": cpu, "mean": cpu, "p10": cpu, "p90": cpu},
        "busy": 0.5,
    }


def _manifest(prod, cpus, threads, step=(40.0,), wait=(2.0,), cpu_ms=(60.0,), device="cpu"):
    return {
        "device_kind": device,
        "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 0},
        "loader": {
            "dataloader": True,
            "num_workers": prod["workers"],
            "prefetch_factor": 2,
            "prefetch_depth": 2 * prod["workers"],
            "marked_by": "adopted",
            "production": [prod],
            "usable_cpus": cpus,
            "trainer_threads": threads,
        },
        "ranks": [
            {
                "rank": 0,
                "unprofiled": {
                    "step_ms": list(step),
                    "loader_wait_ms": list(wait),
                    "cpu_ms": list(cpu_ms),
                    "loader_fetches": [1] * len(step),
                },
                "profiled": {},
            }
        ],
    }


def test_workers_too_slow_for_the_step_set_the_steady_state():
    # GIVEN 2 workers taking 100 ms per batch (90 ms CPU) on 16 CPUs, a training step of 33 ms (+0 wait)
    m = _manifest(_production(100.0, 90.0), 16, 8, step=(33.0,), wait=(0.0,), cpu_ms=(30.0,), device="cuda")
    st = steady_state(m)
    # THEN one batch every 50 ms sets the step; the CPUs allow (90 + 30) / 16
    assert st.bound == BOUND_PIPELINE and st.step_ms == pytest.approx(50.0)
    assert st.consumer_ms == pytest.approx(33.0) and st.cpu_floor_ms == pytest.approx(7.5)
    assert st.trainer_threads == 1 and not st.oversubscribed  # on CUDA the trainer's busy thread is one


def test_workers_and_trainer_sharing_too_few_cpus_set_the_steady_state():
    # GIVEN 2 workers of 100 ms CPU per batch and a 2-thread trainer of 60 ms CPU per step on 2 CPUs
    st = steady_state(_manifest(_production(100.0, 100.0), 2, 2, step=(40.0,), wait=(2.0,)))
    # THEN the CPUs' floor (100 + 60) / 2 is above the pool's 50 ms and the trainer's 38 ms
    assert st.bound == BOUND_CPUS and st.step_ms == pytest.approx(80.0) and st.oversubscribed
    assert st.pool_ms == pytest.approx(50.0) and st.consumer_ms == pytest.approx(38.0)


def test_the_workers_pace_is_their_batches_mean_time():
    # GIVEN 2 workers whose batches take 100 ms at the median, but one in four takes 220 ms: mean 130 ms
    prod = _production(100.0, 100.0)
    prod["own_ms"] = dict(prod["own_ms"], mean=130.0, p90=220.0)
    prod["cpu_ms"] = dict(prod["cpu_ms"], mean=128.0)
    st = steady_state(_manifest(prod, 16, 8, step=(20.0,), wait=(0.0,), device="cuda"))
    # THEN 20 batches take 20 x 130 / 2 ms: one every 65 ms, not the median's 50
    assert st.bound == BOUND_PIPELINE and st.step_ms == pytest.approx(65.0)
    assert st.production_ms == pytest.approx(130.0) and st.worker_cpu_ms == pytest.approx(128.0)


def test_a_pool_that_keeps_up_leaves_the_training_step():
    st = steady_state(_manifest(_production(20.0, 20.0, workers_=4), 16, 4, step=(30.0,), wait=(0.5,)))
    assert st.bound == BOUND_TRAINING and st.step_ms == pytest.approx(29.5)


def test_no_steady_state_without_enough_timed_batches():
    assert steady_state(_manifest(_production(20.0, 20.0, batches=3), 16, 4)) is None
    assert steady_state({"loader": {"production": []}}) is None and steady_state({}) is None


def _capture(tmp_path, manifest):
    """Three 50 µs profiled steps with a 1 µs fetch each, on a CPU (host steps only)."""
    t = TraceBuilder()
    for n in range(3):
        t.step(n, n * 50, n * 50 + 50)
        t.dataloader(n * 50, 1, kind="_MultiProcessingDataLoaderIter")
        t.op("aten::mm", n * 50 + 2, 40)
    cap = parse_paths([t.write(tmp_path / "t.pt.trace.json")])
    cap.meta["manifest"] = {"workload": "toy", **manifest}
    return cap


def test_the_report_names_the_bound_and_the_steady_step(tmp_path):
    from tracekit.render.registry import get_renderer

    # GIVEN the 2-CPU case above
    r = analyze(_capture(tmp_path, _manifest(_production(100.0, 100.0), 2, 2, step=(40.0,), wait=(2.0,))))
    # THEN the advice names the CPUs the workers and trainer share, with the steady step, first
    top = r.advice[0]
    assert top.kind == "cpu_oversubscription" and top.basis == "unprofiled"
    assert top.share == pytest.approx((80.0 - 38.0) / 80.0)
    assert "compete for 2 CPUs" in top.message and "at least 80 ms/step" in top.message
    # AND the input-pipeline section says what the steady state is and what sets it
    out = io.StringIO()
    get_renderer("text", width=300).render(r, out)
    text = " ".join(out.getvalue().split())
    assert "steady state (workers) 80.000 42.000 52.5%" in text
    assert "steady state without the profiler: at least 80.000 ms/step, set by CPU oversubscription" in text
    assert "the DataLoader's 2 workers and the training process' 2 threads are more than the 2 CPUs" in text
    assert "give the script's schedule active=6 or more" in text
    # AND the JSON carries it and reads back
    doc = r.to_json()
    assert doc["input_pipeline"]["steady"]["bound"] == BOUND_CPUS
    assert doc["input_pipeline"]["steady"]["oversubscribed"] is True
    back = Report.from_json(doc)
    assert back.input_pipeline == r.input_pipeline and back.advice == r.advice


def _foreign(tmp_path, steps=3, iterator="_MultiProcessingDataLoaderIter", first=0, fetch=1):
    """A trace made without tracekit: `steps` 50 µs steps numbered from `first`, a `fetch` µs fetch
    each, on a device (one kernel per step after the fetch), no manifest."""
    t = TraceBuilder()
    for n in range(steps):
        t.step(first + n, n * 50, n * 50 + 50)
        t.dataloader(n * 50, fetch, kind=iterator)
        t.kernel("k", n * 50 + max(10, fetch + 1), 10)
    return parse_paths([t.write(tmp_path / "f.pt.trace.json")])


def test_a_foreign_trace_with_a_multiworker_loader_warns_that_a_stall_can_hide(tmp_path):
    # GIVEN a trace of 3 active steps whose DataLoader is multi-worker, made without tracekit's capture
    r = analyze(_foreign(tmp_path))
    # THEN the input pipeline section holds the trace's figures and the warning with its fix
    ip = r.input_pipeline
    assert ip is not None and ip.unprofiled_step_ms == () and ip.active_steps == 3 and ip.hidden
    (warning,) = ip.warnings
    assert "multi-worker (_MultiProcessingDataLoaderIter)" in warning and "(3 active steps)" in warning
    assert "tracekit capture --script" in warning and "active window longer than" in warning
    from tracekit.render.registry import get_renderer

    out = io.StringIO()
    get_renderer("text", width=400).render(r, out)
    assert "warning: the trace's DataLoader is multi-worker" in out.getvalue()
    assert Report.from_json(r.to_json()).input_pipeline == ip


def test_a_foreign_trace_that_shows_a_wait_still_warns_that_a_longer_one_can_hide(tmp_path):
    # GIVEN the same trace whose fetches take 20 of each 50 µs step: the loader waits 40 % of the step
    r = analyze(_foreign(tmp_path, fetch=20))
    # THEN the warning says so: the queue refilled in the profiler's pauses served part of the window
    ip = r.input_pipeline
    assert ip is not None and ip.unmeasured and ip.profiled_wait_share == pytest.approx(0.4)
    assert "it shows the loader waiting 40% of the step already" in ip.warnings[0]


@pytest.mark.parametrize(
    "kw", [{"iterator": "_SingleProcessDataLoaderIter"}, {"steps": 17}], ids=["single-process", "long window"]
)
def test_no_foreign_loader_warning_where_no_stall_can_hide(tmp_path, kw):
    assert analyze(_foreign(tmp_path, **kw)).input_pipeline is None


def test_the_default_profiler_cost_is_untrusted_with_a_multiworker_loader(tmp_path):
    from tracekit.whatif.predict import Replayer

    # GIVEN the foreign trace above (no unprofiled step: the default cost), and one without a loader's
    #       workers
    source, target, est = Replayer.of(_foreign(tmp_path)).cost(None)
    assert source == "default" and target is None and est.cost_us == 5.3
    # THEN the note gives the default's range and says the unprofiled step cannot be trusted
    assert "ranged 1.5-12.5 µs/event" in est.note and "cannot be trusted" in est.note
    single = _foreign(tmp_path, iterator="_SingleProcessDataLoaderIter")
    assert "cannot be trusted" not in Replayer.of(single).cost(None)[2].note


def test_analyze_says_its_unprofiled_savings_rest_on_an_untrusted_default(tmp_path):
    import tracekit.api as api
    from tracekit.render.registry import get_renderer

    _foreign(tmp_path, fetch=20)  # the loader waits 40 % of the step: the loader advice fires
    report = api.analyze(tmp_path / "f.pt.trace.json").report
    assert report.savings is not None and report.savings.profiler_cost_source == "default"
    out = io.StringIO()
    get_renderer("text", width=1000).render(report, out)
    assert "Warning: the step without the profiler cannot be trusted from this trace alone" in out.getvalue()
    # AND every advice with an unprofiled saving says that step is unknown where a stall can hide
    assert report.input_pipeline is not None and report.input_pipeline.unmeasured
    predicted = [a for a in report.advice if a.saved_ms]
    assert [a.kind for a in predicted] == ["dataloader_workers"]
    assert "a stall the profiled window hid (the input pipeline's warning)" in predicted[0].prediction_note


def test_whatifs_producer_takes_the_workers_pace_when_the_timed_steps_are_scattered():
    from tracekit.whatif.loader import producers

    # GIVEN an adopted capture's unprofiled steps (not consecutive: wait steps and steps outside the
    #       profiler), both waiting for their batch, and 2 workers taking 100 ms per batch
    m = _manifest(_production(100.0, 90.0), 16, 1, step=(80.0, 90.0), wait=(40.0, 50.0), cpu_ms=(30.0, 30.0))
    m["ranks"][0]["unprofiled"].update(consecutive=False, loader_fetch_end_ms=[40.0, 50.0])
    (p,) = producers(m).values()
    # THEN the pool's period is the workers' own pace, not a span between scattered fetches
    assert p.period_ms == pytest.approx(50.0) and p.consumer_ms == pytest.approx(40.0)
    del m["loader"]["production"]
    assert next(iter(producers(m).values())).period_ms is None


def test_a_thin_baseline_takes_the_smaller_of_two_upper_bounds():
    # GIVEN one unprofiled step taken right after the profiler's pause (the trainer 100 ms, 110 ms CPU)
    #       and three recorded steps of 20, 20 and 60 ms (1 ms waiting; 30, 30, 70 ms CPU)
    m = _manifest(_production(100.0, 100.0), 2, 2, step=(101.0,), wait=(1.0,), cpu_ms=(110.0,))
    m["ranks"][0]["profiled"] = {
        "phases": ["wait", "warmup", "active", "active", "active"],
        "host_step_ms": [500.0, 40.0, 20.0, 20.0, 60.0],
        "loader_wait_ms": [300.0, 1.0, 1.0, 1.0, 1.0],
        "cpu_ms": [200.0, 35.0, 30.0, 30.0, 70.0],
        "loader_fetches": [1, 1, 1, 1, 1],
    }
    st = steady_state(m)
    # THEN each figure is the smaller of the unprofiled step's and the recorded steps' median
    assert st.consumer_ms == pytest.approx(19.0) and st.trainer_cpu_ms == pytest.approx(30.0)
    assert st.consumer_basis == "the smaller of 1 unprofiled and 3 profiled steps' medians"
    assert st.cpu_floor_ms == pytest.approx(65.0) and st.bound == BOUND_CPUS
    # AND the other way round: the unprofiled step is the smaller
    m["ranks"][0]["unprofiled"].update(step_ms=[11.0], cpu_ms=[25.0])
    st = steady_state(m)
    assert st.consumer_ms == pytest.approx(10.0) and st.trainer_cpu_ms == pytest.approx(25.0)
