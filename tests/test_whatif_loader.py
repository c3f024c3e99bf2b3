"""The input pipeline in the replay: a producer whose throughput comes from the unprofiled loader waits
(tracekit.whatif.loader), paced against the replayed consumer; `--set dataloader=F` and
`--loader-workers N` change it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tracebuilder import TraceBuilder
from tracekit.parse.parser import parse_paths
from tracekit.whatif.loader import Producer, predict, producers
from tracekit.whatif.predict import Replayer, whatif
from tracekit.whatif.savings import cause_savings
from tracekit.whatif.scenario import WhatIfOptions


def _manifest(step_ms, wait_ms, end_ms=None, workers=3, cpus=16):
    return {
        "workload": "toy",
        "unprofiled_step_ms": list(step_ms),
        "loader": {"dataloader": True, "num_workers": workers, "prefetch_factor": 2, "prefetch_depth": 6},
        "host": {"cpu_count": cpus},
        "ranks": [
            {
                "rank": 0,
                "unprofiled": {
                    "step_ms": list(step_ms),
                    "host_step_ms": list(step_ms),
                    "loader_wait_ms": list(wait_ms),
                    "loader_fetch_end_ms": list(end_ms if end_ms is not None else wait_ms),
                },
            }
        ],
    }


def _replayer(tmp_path, manifest):
    """Three 40 µs host steps: a 2 µs fetch of a ready batch, then one 38 µs op (a consumer of 40 µs)."""
    t = TraceBuilder()
    for n in range(3):
        base = 40 * n
        t.step(n, base, base + 40)
        t.dataloader(base, 2, kind="_MultiProcessingDataLoaderIter")
        t.op("aten::conv2d", base + 2, 38)
    cap = parse_paths([t.write(tmp_path / "l.pt.trace.json")])
    cap.meta["manifest"] = manifest
    return Replayer.of(cap)


LOADER_BOUND = _manifest([0.100] * 4, [0.062] * 4)  # a batch every 100 µs; the consumer 38 µs


def _unprofiled(rp, **flags):
    result, _ = whatif(rp.capture, WhatIfOptions(**flags), replayer=rp, attribute=False)
    return result.unprofiled


def test_the_producer_period_is_measured_between_waited_fetches():
    # GIVEN steps of 100, 120, 80 µs whose fetches waited, ending 60, 70, 50 µs into their steps
    m = _manifest([0.100, 0.120, 0.080], [0.060, 0.070, 0.050])
    (p,) = producers(m).values()
    # THEN the batches came ((100 + 120) + 50 - 60) / 2 = 105 µs apart (from the first fetch's end to the
    # last's); the consumer is the median of step − wait
    assert p.period_ms == pytest.approx(0.105) and p.waited_steps == 3
    assert p.consumer_ms == pytest.approx(0.040) and p.fetch_ms is None
    # a loader that never made a step wait: its throughput is unknown
    (kept,) = producers(_manifest([0.100] * 3, [0.001] * 3)).values()
    assert kept.period_ms is None and kept.fetch_ms == pytest.approx(0.001)


def test_one_slow_step_does_not_set_the_pools_rate():
    # GIVEN a 2-worker pool that makes every step wait 60 of its 100 ms, and a first step whose batch
    # came at 60 ms but which then ran 940 ms more (the model's lazy initialisation: no loader's time)
    m = _manifest([1000.0] + [100.0] * 19, [60.0] * 20, workers=2)
    (p,) = producers(m).values()
    # THEN the rate is the typical window's: 100 ms per batch over windows of 4 steps (2 per worker);
    # the whole stretch from the first fetch's end to the last's says (1000 + 18 × 100) / 19 = 147 ms
    assert p.period_ms == pytest.approx(100.0)
    assert p.consumer_ms == pytest.approx(40.0)


def test_a_ready_batchs_fetch_on_a_short_step_is_not_a_wait():
    # GIVEN the H200 dataloader_train steps (py3.10-1): ~4 ms steps whose fetches take 0.21-0.45 ms,
    # a ready batch's own cost (unpickled from the worker's queue), 11 % of the 4 ms step at most
    (p,) = producers(_manifest([4.2, 4.0, 4.3, 4.1, 4.4], [0.32, 0.45, 0.29, 0.29, 0.21])).values()
    # THEN no fetch waited beyond the cheapest fetch's 0.21 ms by 10 % of its step: the loader kept up
    assert p.waited_steps == 0 and p.period_ms is None
    # a real stall (2.0 ms beyond the 0.21) waits, but one stall among steps that kept up is no rate
    (one,) = producers(_manifest([4.2, 6.0, 4.3, 4.1, 4.4], [0.32, 2.21, 0.29, 0.29, 0.21])).values()
    assert one.waited_steps == 1 and one.period_ms is None
    # a pool that paces every step: each fetch waits ~60 of 100 µs, so the cheapest (58) is no ready batch's
    # cost (it is ≥ 10 % of a step) and every step waited
    (bound,) = producers(_manifest([0.100, 0.102, 0.098], [0.060, 0.061, 0.058])).values()
    assert bound.waited_steps == 3 and bound.period_ms == pytest.approx(0.100, rel=0.03)


def test_worker_counts_scale_the_pool_up_to_the_hosts_cpus():
    p = Producer(0, 2, 80.0, 80.0, None, 10.0, 10.0, 4, 4, cpus=6)
    assert predict(p, workers=4).predicted_period_ms == pytest.approx(40.0)
    capped = predict(p, workers=16)  # 5 workers at most beside the training process
    assert capped.predicted_period_ms == pytest.approx(32.0) and "capped at 5" in capped.note
    serial = predict(p, workers=0)  # the two workers' work in the training process: 160 ms per batch
    assert serial.predicted_period_ms is None and serial.serial_ms == pytest.approx(160.0)
    assert serial.step_ms(10.0) == pytest.approx(170.0)
    assert predict(p, dataloader=0.5).step_ms(10.0) == pytest.approx(40.0)


def test_a_loader_bound_capture_is_predicted_from_its_producer(tmp_path):
    # GIVEN a trace whose steps take 40 µs with a ready batch, unprofiled steps of 100 µs that wait 62
    rp = _replayer(tmp_path, LOADER_BOUND)
    base = _unprofiled(rp)
    # THEN the unchanged unprofiled prediction is the producer's pace, as measured
    assert base.observed_step_ms == pytest.approx(0.100)
    assert base.replayed_step_ms == pytest.approx(0.100, rel=0.01)
    (lp,) = base.loader
    assert lp["period_ms"] == pytest.approx(0.100) and lp["paces_step"]
    assert 0 < lp["fetch_ms"] <= 0.002  # the trace's ready fetch, less the profiler's cost
    # WHEN the loader is removed: the consumer alone (the unprofiled step less its wait)
    assert _unprofiled(rp, set=["dataloader=0"]).predicted_step_ms == pytest.approx(0.038, rel=0.01)
    # WHEN twice the workers: a batch every 50 µs still paces the 40 µs consumer; four times: it does not
    assert _unprofiled(rp, loader_workers=6).predicted_step_ms == pytest.approx(0.050, rel=0.01)
    four = _unprofiled(rp, loader_workers=12)
    assert four.predicted_step_ms == pytest.approx(0.040, rel=0.02) and not four.loader[0]["paces_step"]
    # WHEN loading moves into the training process: three workers' time per batch, serial
    assert _unprofiled(rp, loader_workers=0).predicted_step_ms == pytest.approx(0.338, rel=0.01)
    # AND the profiled prediction is the trace's replay, untouched by the producer
    result, _ = whatif(rp.capture, WhatIfOptions(loader_workers=6), replayer=rp, attribute=False)
    assert result.devices[0].predicted_step_ms == pytest.approx(0.040)


def test_the_analysis_saving_of_the_loader_uses_the_producer(tmp_path):
    rp = _replayer(tmp_path, LOADER_BOUND)
    s = cause_savings(rp)
    ((key, saved),) = s.per_device.items()
    assert saved["unprofiled"]["dataloader"] == pytest.approx(0.100 - 0.038, rel=0.02)
    assert saved["profiled"]["dataloader"] == pytest.approx(0.002, rel=0.02)


def test_a_loader_that_kept_up_cannot_tell_what_more_workers_would_do(tmp_path):
    rp = _replayer(tmp_path, _manifest([0.040] * 4, [0.002] * 4))
    u = _unprofiled(rp, loader_workers=8)
    assert u.predicted_step_ms == pytest.approx(u.replayed_step_ms)
    assert "kept up in every timed step" in u.loader[0]["note"]


def test_loader_workers_must_not_be_negative():
    from tracekit.whatif.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="--loader-workers -1: give a worker count"):
        WhatIfOptions(loader_workers=-1)


LOADER_CAPTURES = Path(__file__).resolve().parent.parent / "docs" / "results" / "loader"


def test_a_real_loader_bound_capture_is_named_and_its_loader_removed_as_measured():
    # GIVEN the H200 ResNet-50 capture fed by 3 workers (default schedule: the trace shows part of the
    # stall) and the same model on a batch kept on the GPU (docs/results/whatif.md, "The input pipeline")
    from statistics import fmean

    from tracekit.api import analyze, load

    a = LOADER_CAPTURES / "resnet_w3.parquet"
    report = analyze(a).report
    # THEN the analysis names the loader as the main cause of the unprofiled step
    assert report.advice[0].kind == "dataloader_workers" and report.advice[0].basis == "unprofiled"
    assert report.input_pipeline.unprofiled_wait_share > 0.5
    # AND the unprofiled prediction of --set dataloader=0 is within 30 % of the measured batch-on-GPU step
    cap = load(a)
    u = _unprofiled(Replayer.of(cap), set=["dataloader=0"])
    measured = fmean(load(LOADER_CAPTURES / "resnet_gpu.parquet").manifest["unprofiled_step_ms"])
    assert abs(u.predicted_step_ms / measured - 1) < 0.30, (u.predicted_step_ms, measured)
