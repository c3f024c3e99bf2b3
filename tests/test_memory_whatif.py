"""The memory what-if (tracekit.whatif.memory, `tracekit memory`) on tiny synthetic traces with
hand-computed answers (bytes as written; positions are the states after each memory event)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.test_memory import ENGINE, training_step
from tests.tracebuilder import TraceBuilder
from tracekit import api
from tracekit.analysis.advice import AUTOCAST_FP32_RE, BF16_OVER_FP32, BF16_OVER_TF32, TF32_RE
from tracekit.errors import TracekitError
from tracekit.parse.parser import parse_paths
from tracekit.whatif import memory as wm


def capture(tmp_path: Path, t: TraceBuilder, manifest: dict | None = None):
    cap = parse_paths([t.write(tmp_path / "rank0.pt.trace.json")])
    if manifest is not None:
        cap.meta["manifest"] = manifest
    return cap


def predict(tmp_path: Path, t: TraceBuilder, manifest: dict | None = None, **kw):
    result = api.memory(capture(tmp_path, t, manifest), time=False, **kw)
    (d,) = result.prediction.devices
    return d


def test_unchanged_is_the_observed_peak(tmp_path):
    # GIVEN the training step of test_memory (1000 held; A 100 activation, T 50 temporary at its peak)
    t = TraceBuilder()
    training_step(t)
    # WHEN nothing changes but the batch factor 1 / THEN the prediction is the capture
    d = predict(tmp_path, t, batch_scale=1.0, grad_accum=1, fit_gib=1.0)
    assert d.predicted_peak_allocated == d.observed_peak_allocated == 1150


def test_double_batch_doubles_what_grows_with_the_samples(tmp_path):
    # GIVEN the step; WHEN the batch doubles
    t = TraceBuilder()
    training_step(t)
    d = predict(tmp_path, t, batch_scale=2)
    # THEN A and T double at the forward's peak: 1000 + 200 + 100 (the optimizer's temporary U and the
    # gradient and state do not grow)
    assert d.predicted_peak_allocated == 1300 and d.predicted_peak_phase == "forward"
    assert sum(d.predicted_by_category.values()) == 1300
    assert d.predicted_by_category["activations"] == 200 and d.predicted_by_category["temporaries"] == 100
    # reserved: the observed ratio at the peak (the trace builder reserves twice what is allocated)
    assert d.predicted_peak_reserved == 2600


def test_micro_batches_keep_every_gradient_alive(tmp_path):
    # GIVEN the step; WHEN its samples run as 2 micro-batches of half each
    t = TraceBuilder()
    training_step(t)
    d = predict(tmp_path, t, grad_accum=2)
    # THEN the second micro-batch is the peak: at G's allocation, 1000 held + A/2 + the kept gradient 30 +
    # the new one 30 (a temporary until added in)
    assert d.predicted_peak_allocated == 1110 and d.predicted_peak_phase == "backward"
    assert d.predicted_by_category["gradients"] == 30 and d.predicted_by_category["temporaries"] == 30
    assert sum(d.predicted_by_category.values()) == 1110


def checkpointable(t: TraceBuilder) -> None:
    """Four activations of 100 made in the forward, freed in the backward in reverse (no held bytes):

    pos  1 +A1@5  2 +A2@6  3 +A3@7  4 +A4@8 | 5 -A4@40  6 -A3@45  7 -A2@50  8 -A1@55
    """
    t.step(1, 0, 100)
    t.op("aten::linear", 4, 10)
    t.op("autograd::engine::evaluate_function: MmBackward0", 38, 20, tid=ENGINE)
    t.memory_events(
        [(5, 1, 100), (6, 2, 100), (7, 3, 100), (8, 4, 100)]
        + [(40, 4, -100, ENGINE), (45, 3, -100, ENGINE), (50, 2, -100, ENGINE), (55, 1, -100, ENGINE)]
    )


def test_checkpointing_frees_a_segment_in_the_forward_and_recomputes_it(tmp_path):
    # GIVEN 400 bytes of activations, peak 400 at the forward's end
    t = TraceBuilder()
    checkpointable(t)
    # WHEN checkpoint_sequential with 2 segments: the first part (A1, A2; A2 kept as the next one's input)
    d = predict(tmp_path, t, checkpoint=2)
    # THEN A1 lives only until A2 is made, and again from A3's free (the backward done with what came
    # after) to its own: the peak is A2 + A3 + A4 = 300
    assert d.predicted_peak_allocated == 300
    assert d.observed_peak_allocated == 400


def test_the_largest_batch_that_fits(tmp_path):
    # GIVEN the step (reserved twice allocated) and its batch of 64; WHEN 2600 bytes are the budget
    t = TraceBuilder()
    training_step(t)
    manifest = {"knobs": {"batch_size": 64}}
    d = predict(tmp_path, t, manifest, fit_gib=2600 / 2**30)
    # THEN 1300 allocated: (1300 - 1000) / 150 at the forward's peak = 2x the batch
    assert d.fit_batch_scale == pytest.approx(2.0) and d.fit_batch_size == 128
    # and nothing fits when what does not grow with the batch is over the budget already
    assert predict(tmp_path, t, manifest, fit_gib=1000 / 2**30).fit_batch_scale is None


def test_mixed_precision_halves_the_samples_and_adds_weight_copies(tmp_path):
    # GIVEN the step with a record of 200 parameter bytes: A (100) at the peak is the most activation
    t = TraceBuilder()
    training_step(t)
    manifest = {"ranks": [{"rank": 0, "memory": {"model": {"0": {"parameters": 200}}}}]}
    d = predict(tmp_path, t, manifest, amp="bf16")
    # THEN the peak moves to G's allocation in the backward: 1000 held + A/2 (still saved, so the 16-bit
    # weight copies, 200 / 2, are all alive) + G 30 + its first, 16-bit version 15; the forward's is 1175
    assert d.predicted_peak_allocated == 1195 and d.predicted_peak_phase == "backward"
    assert sum(d.predicted_by_category.values()) == 1195
    # and the upper figure keeps float32 what no matrix product made: X (20), made in MmBackward0's
    # engine call with no aten::mm under it, at its allocation: 1000 + 50 + 100 + G 30 + X 20 = 1200
    assert d.predicted_peak_allocated_upper == 1200
    # without mixed precision there is no range
    assert predict(tmp_path, t, manifest, batch_scale=2).predicted_peak_allocated_upper is None


def test_bad_scenarios_are_refused_before_anything_is_read(tmp_path):
    for kw, needle in (
        ({"batch_scale": 0}, "--batch-scale"),
        ({"amp": "fp8"}, "--amp"),
        ({"grad_accum": 0}, "--grad-accum"),
        ({"checkpoint": 2, "checkpoint_modules": "Block"}, "choose one"),
        ({"checkpoint_modules": "("}, "--checkpoint-modules"),
        ({"fit_gib": -1}, "--fit-gib"),
    ):
        with pytest.raises(TracekitError, match=needle):
            api.memory(tmp_path / "nothing.parquet", **kw)


def test_module_checkpointing_needs_module_spans(tmp_path):
    t = TraceBuilder()
    checkpointable(t)
    with pytest.raises(TracekitError, match="with_stack=true"):
        predict(tmp_path, t, checkpoint_modules="Linear")


def test_cli_memory_report_and_prediction(tmp_path, capsys):
    t = TraceBuilder()
    training_step(t)
    path = t.write(tmp_path / "rank0.pt.trace.json")
    code, out, err = run_main(["memory", str(path), "--width", "120"], capsys)
    assert code == 0, err
    assert "device memory at its peak (step 1)" in out and "largest blocks alive at the peak" in out
    code, out, err = run_main(["memory", str(path), "--batch-scale", "2", "--no-time", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prediction"]["devices"][0]["predicted_peak_allocated"] == 1300
    assert doc["memory"][0]["peak"]["peak_allocated"] == 1150


def test_cli_a_trace_without_memory_events_says_how_to_record_them(tmp_path, capsys):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.kernel("k", 0, 100)
    path = t.write(tmp_path / "rank0.pt.trace.json")
    code, out, err = run_main(["memory", str(path)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "profile_memory=true" in err


FIXTURES = Path(__file__).parent.parent / "fixtures" / "cpu_memory"


@pytest.mark.parametrize(
    ("variant", "kw"), [("heavy_mlp_b2", {"batch_scale": 2}), ("heavy_mlp_ga4", {"grad_accum": 4})]
)
def test_real_cpu_captures_predicted_within_ten_percent_of_measured(variant, kw):
    # GIVEN a real capture with memory events, and the same model captured with the change
    base, changed = str(FIXTURES / "heavy_mlp"), str(FIXTURES / variant)
    # WHEN the change is predicted from the baseline alone
    d = api.memory(base, time=False, **kw).prediction.devices[0]
    measured = max(m.peak_allocated for m in api.memory(changed).memory)
    # THEN within 10 % of the changed run's own peak
    assert abs(d.predicted_peak_allocated / measured - 1) < 0.10, (d.predicted_peak_allocated, measured)


def test_real_capture_checkpointing_follows_the_module_calls():
    # GIVEN the baseline with module spans (with_stack): WHEN 2 checkpoint_sequential segments
    d = api.memory(str(FIXTURES / "heavy_mlp"), checkpoint=2, time=False).prediction.devices[0]
    # THEN torch's cut: the Sequential's 11 calls (Linear, ReLU x5, Linear) in chunks of 11 // 2 = 5, the
    # first checkpointed: it makes 2 of the forward's 5 saved ReLU outputs (all of one size)
    assert "checkpointed 40% of the forward's activation bytes" in d.notes
    assert d.predicted_peak_allocated <= d.observed_peak_allocated


H100 = Path(__file__).parent.parent / "fixtures" / "h100_memory"
H100_MEASURED = json.loads((H100 / "measured.json").read_text())["runs"]


def test_real_gpu_baseline_split_end_to_end():
    # GIVEN heavy_mlp on an H100 (batch 2048, 1024 → 4096 → 8 × 4096² → 512, no optimizer: forward,
    # out.sum().backward(), zero_grad(set_to_none)), one profiled step with memory events
    m = json.loads((H100 / "mlp_base" / "manifest.json").read_text())
    k = m["knobs"]
    layers = [(k["in_features"], k["hidden"])] + [(k["hidden"], k["hidden"])] * k["layers"]
    layers.append((k["hidden"], k["out_features"]))
    params = [4 * (i * o + o) for i, o in layers]  # float32 weight and bias of each Linear
    # WHEN its memory is analysed
    (dev,) = api.memory(str(H100 / "mlp_base")).memory
    peak = dev.peak
    cats = peak.by_category
    # THEN the categories sum exactly to the peak, which is the trace's largest allocated total and the
    # allocator's own max_memory_allocated of that step (the capture's reading)
    assert sum(cats.values()) == peak.peak_allocated == dev.trace_max_allocated == dev.allocator_peak
    assert dev.allocator_peak == H100_MEASURED["mlp_base"]["allocated_peak_bytes"]
    # the parameters are the model's, by hand and as the capture recorded them
    assert cats["parameters"] == sum(params) == m["ranks"][0]["memory"]["model"]["0"]["parameters"]
    # the peak is in the first layer's backward: every other layer's gradients are alive, its own not yet
    assert peak.peak_phase == "backward"
    assert cats["gradients"] == sum(params[1:])
    # saved for it: the first layer's ReLU output (batch × hidden float32), nothing else left
    assert cats["activations"] == 4 * k["batch_size"] * k["hidden"]
    assert cats["optimizer_state"] == 0 and not dev.check.unexplained_free_bytes


@pytest.mark.parametrize(
    ("run", "base", "kw"),
    [
        ("mlp_b2", "mlp_base", {"batch_scale": 2}),
        ("mlp_amp", "mlp_base", {"amp": "bf16"}),
        ("mlp_ckpt4", "mlp_base", {"checkpoint": 4}),
        ("resnet_amp", "resnet_base", {"amp": "bf16"}),
        ("gpt2_ckpt", "gpt2_base", {"checkpoint_modules": r"^GPT2Block_"}),
    ],
)
def test_real_gpu_runs_predicted_within_ten_percent_of_the_allocators_peak(run, base, kw):
    # GIVEN a baseline captured on an H100 and the same model run with the change
    # WHEN the change is predicted from the baseline alone
    d = api.memory(str(H100 / base), time=False, **kw).prediction.devices[0]
    # THEN within 10 % of the allocator's max_memory_allocated over the changed run's timed steps
    measured = H100_MEASURED[run]["allocated_peak_bytes"]
    assert abs(d.predicted_peak_allocated / measured - 1) < 0.10, (d.predicted_peak_allocated, measured)


def _pred(**kw) -> wm.MemoryPrediction:
    return wm.MemoryPrediction(0, 0, 100, 120, 100, 120, {}, "forward", **kw)


def test_step_times_are_the_observed_step_times_the_replays_change():
    # GIVEN a capture whose traced step is 60 ms and whose timed steps without the profiler took 30 ms,
    # the unchanged replay 50 (profiled) and 40 (unprofiled), the batch × 2 replay 100 and 80
    s = wm.MemoryOptions(batch_scale=2)
    # WHEN the step times are predicted
    d = wm.with_times(_pred(), s, (60.0, 30.0), (50.0, 40.0), (100.0, 80.0), (0.0, 0.0, 0.0, 0.0))
    # THEN each observed step times the replay's change: 60 × 100/50, 30 × 80/40
    assert d.predicted_step_ms == pytest.approx(120.0) and d.unprofiled_predicted_step_ms == pytest.approx(
        60.0
    )
    assert d.unprofiled_observed_step_ms == 30.0 and not d.notes


def test_micro_batches_and_recomputation_in_the_step_time():
    # GIVEN a replayed micro-batch of 1/4 the batch of 20 ms (2 of them the optimizer's), the unchanged
    # replay 50 ms: 4 micro-batches take 4 × (20 - 2) + 2 = 74 ms of replay, × 100/50 observed
    s = wm.MemoryOptions(grad_accum=4)
    d = wm.with_times(_pred(), s, (100.0, None), (50.0, None), (20.0, None), (0.0, 2.0, 0.0, 0.0))
    assert d.predicted_step_ms == pytest.approx(148.0) and d.unprofiled_predicted_step_ms is None
    # checkpointing half the forward's activations of a 10 ms forward recomputes 5 ms: (50 + 5) / 50
    s = wm.MemoryOptions(checkpoint=2)
    d = wm.with_times(_pred(), s, (100.0, 80.0), (50.0, 40.0), (50.0, 40.0), (10.0, 0.0, 0.5, 0.0))
    assert d.predicted_step_ms == pytest.approx(110.0) and d.unprofiled_predicted_step_ms == pytest.approx(
        90.0
    )


def test_work_launched_before_the_trace_is_said():
    # GIVEN 25 ms of the traced 60 ms step launched before the trace began
    s = wm.MemoryOptions(amp="bf16")
    d = wm.with_times(_pred(), s, (60.0, 34.0), (60.0, 60.0), (30.0, 30.0), (0.0, 0.0, 0.0, 25.0))
    # THEN the prediction says the replay keeps it (and still anchors to the observed steps)
    assert any("launched before the trace" in n for n in d.notes)
    assert d.unprofiled_predicted_step_ms == pytest.approx(17.0)


def test_the_replays_flags_under_each_change():
    fp32 = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4"
    tf32 = "sm90_xmma_gemm_tf32f32_tf32f32_f32_nt_n_tilesize128x128x32"
    # a larger batch: every kernel and the input pipeline's work × 2
    patterns, sets, typed = wm.time_flags(wm.MemoryOptions(batch_scale=2), [fp32, "elementwise_kernel"])
    assert patterns == {".*": 2} and sets == {"dataloader": 2}
    assert typed == "--kernels '.*=2' --set dataloader=2"
    # mixed precision on a GPU: the fp32 GEMMs at the bf16/fp32 peaks' ratio, no TF32 class where no
    # kernel is one (the replay refuses a pattern that matches nothing)
    patterns, sets, _ = wm.time_flags(wm.MemoryOptions(amp="bf16"), [fp32, "elementwise_kernel"])
    assert patterns == {".*": 1, AUTOCAST_FP32_RE: BF16_OVER_FP32} and sets == {}
    patterns, _, _ = wm.time_flags(wm.MemoryOptions(amp="bf16"), [tf32])
    assert patterns == {".*": 1, TF32_RE: BF16_OVER_TF32}
    # on a CPU-only capture the framework ops at AMP_TIME
    patterns, _, typed = wm.time_flags(wm.MemoryOptions(amp="bf16", grad_accum=2), None)
    assert patterns == {".*": 0.5 * wm.AMP_TIME} and typed.startswith("--ops")
