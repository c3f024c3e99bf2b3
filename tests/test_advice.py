"""The advice rules (tracekit.analysis.advice) on tiny synthetic traces with hand-computed answers, and
their predicted savings (tracekit.whatif.savings) within the step they are savings of, on real captures.

Each timeline is in µs; `analysis(t)` analyses it as `tracekit analyze` does, with the savings' replay.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit as tk
from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.analysis.advice import (
    AUTOCAST_FP32_RE,
    FP32_RE,
    LAYOUT_RE,
    PAGEABLE_RE,
    PRECISION_MIN_FRACTION,
    SYNC_OPS_RE,
    TF32_RE,
    advise,
    command,
)
from tracekit.analysis.causes import SYNC_OPS
from tracekit.analysis.model import Advice, Report
from tracekit.errors import TracekitError
from tracekit.whatif.predict import Replayer
from tracekit.whatif.savings import predict_advice, scenario_of

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]
V100 = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}]
FP32_GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_execute"
ROOT = Path(__file__).resolve().parents[1]
ARTICLE_H100 = ROOT / "fixtures/h100/article"


def analysis(tmp_path: Path, t: TraceBuilder, name: str = "rank0.pt.trace.json") -> Report:
    return tk.analyze(t.write(tmp_path / name)).report


def one(report: Report, kind: str):
    (a,) = [a for a in report.advice if a.kind == kind]
    return a


def device_bound(t: TraceBuilder, kernels: list[tuple[str, float]], start: float = 10.0) -> float:
    """Launch every kernel in the first µs of the step, then run them back to back from `start` on
    stream 7; returns the end of the last one."""
    ts = start
    for i, (name, dur) in enumerate(kernels):
        t.launch(1 + i, 0.5, corr=100 + i)
        t.kernel(name, ts, dur, corr=100 + i)
        ts += dur
    return ts


# -- the kernel classes -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fp32", "tf32"),
    [
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4",
            True,
            False,
        ),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(...)", True, False),
        ("void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*, float const*)", True, False),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x3_nn_align4>(...)", False, True),
        ("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x32", False, True),
        (
            "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(...)",
            False,
            False,
        ),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", False, False),
        ("volta_h884gemm_64x64_ldg8_nn", False, False),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>", False, False),
        ("Memcpy HtoD (Pageable -> Device)", False, False),
    ],
)
def test_precision_classes(name, fp32, tf32):
    assert bool(re.search(FP32_RE, name)) is fp32 and bool(re.search(TF32_RE, name)) is tf32


@pytest.mark.parametrize(
    ("name", "direct"),
    [
        # the H100 traces' names (ConvNeXt-T's depthwise, ResNeXt-50's grouped convolutions)
        ("void cudnn::cnn::wgrad2d_grouped_direct_kernel<false, true, int, float, float, float>(...)", True),
        (
            "void cudnn::cnn::dgrad2d_grouped_direct_kernel<float, int, float, float, false, true, 4>(...)",
            True,
        ),
        ("void cudnn::cnn::conv2d_grouped_direct_kernel<__nv_bfloat16, float, __nv_bfloat16>(...)", False),
        ("wgrad2d_c1_k1_nhwc", False),
    ],
)
def test_cudnns_fp32_direct_convolutions_are_fp32_math_for_autocast_not_for_tf32(name, direct):
    assert bool(re.search(AUTOCAST_FP32_RE, name)) is direct
    assert not re.search(FP32_RE, name) and not re.search(TF32_RE, name)


def test_pageable_and_layout_names():
    assert re.search(PAGEABLE_RE, "Memcpy HtoD (Pageable -> Device)")
    assert re.search(PAGEABLE_RE, "Memcpy DtoH (Device -> Pageable)")
    assert not re.search(PAGEABLE_RE, "Memcpy HtoD (Pinned -> Device)")
    assert re.search(LAYOUT_RE, "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(...)")


def test_the_item_pattern_is_the_sync_ops():
    # the .item() advice's --ops pattern matches the ops the causes table counts as host reads, no other
    names = {"aten::item", "aten::_local_scalar_dense", "aten::itemsize", "aten::to", "aten::sum"}
    assert {n for n in names if re.search(SYNC_OPS_RE, n)} == set(SYNC_OPS)


# -- rules with hand-computed evidence and predictions ---------------------------------------------------
def test_layout_conversions_on_a_device_bound_step(tmp_path):
    # GIVEN a step whose host launches five kernels at once (host window [0, 20)) and whose device runs
    #       them back to back from 10 µs: conv 30, nchwToNhwc 10, conv 30, nhwcToNchw 10, conv 10 → 100 µs
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    end = device_bound(
        t,
        [
            ("conv_a", 30),
            ("cudnn::ops::nchwToNhwcKernel", 10),
            ("conv_b", 30),
            ("nhwcToNchwKernel", 10),
            ("c", 10),
        ],
    )
    assert end == 100
    r = analysis(tmp_path, t)
    a = one(r, "layout")
    # THEN the evidence: 2 conversions, 20 µs of the 100 µs step (the step ends with its device work)
    assert a.share == pytest.approx(0.2) and a.basis == "profiled"
    assert "2 layout conversions" in a.evidence and "0.020 ms/step" in a.evidence
    assert "channels_last" in a.knob and a.whatif == ("--channels-last",)
    # AND removing them saves their 20 µs: the device was the step
    assert a.saved_ms["profiled"] == pytest.approx(0.020, abs=1e-6)
    assert a.step_ms["profiled"] == pytest.approx(0.100, abs=1e-6)


def test_precision_on_a_tensor_core_gpu_only(tmp_path):
    # GIVEN one fp32 (FFMA) GEMM of 80 µs in a 100 µs device-bound step
    for props, fires in ((H100, True), (V100, False)):
        t = TraceBuilder(device_properties=props)
        t.step(1, 0, 5)
        device_bound(t, [(FP32_GEMM, 80), ("relu", 10)])
        r = analysis(tmp_path, t, f"{props[0]['computeMajor']}.pt.trace.json")
        kinds = [a.kind for a in r.advice]
        # THEN on an H100 the bf16 and TF32 rules fire; on a V100 (no bf16 tensor cores) neither
        assert ("precision" in kinds and "tf32" in kinds) is fires and ("precision" in kinds) is fires
    bf16, tf32 = one(r_h100 := analysis(tmp_path, _fp32_step()), "precision"), one(r_h100, "tf32")
    assert bf16.share == pytest.approx(0.8)
    # AND the prediction: the GEMM takes 80 × 0.068 = 5.44 µs in bf16, 80 × 0.135 = 10.8 µs in TF32
    assert bf16.saved_ms["profiled"] == pytest.approx(0.080 - 0.00544, abs=1e-5)
    assert tf32.saved_ms["profiled"] == pytest.approx(0.080 - 0.0108, abs=1e-5)


def test_precision_on_a_host_paced_step_counts_autocasts_host_work(tmp_path):
    # GIVEN a 100 µs step whose host runs a one-kernel op (aten::add_, 0-10: the op and its launch, 2
    #       recorded events) and then one framework op (aten::linear, 10-100) that launches a 15 µs fp32
    #       GEMM and a 10 µs cuDNN batch norm: the device idles the rest in framework time
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 100)
    t.op("aten::add_", 0, 10)
    t.launch(2, 4, corr=9)
    t.kernel("elementwise_add", 6, 1, corr=9)
    t.op("aten::linear", 10, 90)
    t.launch(11, 1, corr=1)
    t.kernel(FP32_GEMM, 15, 15, corr=1)
    t.launch(31, 1, corr=2)
    t.kernel("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>", 40, 10, corr=2)
    a = one(analysis(tmp_path, t), "precision")
    # THEN the evidence names the batch norm and the host-paced step
    assert a.share == pytest.approx(0.15)
    assert "cuDNN's batch norm 0.010 ms/step" in a.evidence and "idles " in a.evidence
    assert a.whatif == ("--autocast", "bf16") and not a.bound
    assert "batch norm leaves cuDNN" in a.prediction_note and "the host paces" in a.prediction_note
    # AND the replay: the GEMM faster saves nothing on a host-paced step, the weight's cast (5 events at
    #     aten::add_'s 5 µs per event) makes it 25 µs longer
    assert a.saved_ms["profiled"] == pytest.approx(-0.025, abs=1e-6)
    # AND on a device-bound step the GEMM's saving is the figure
    assert one(analysis(tmp_path, _fp32_step(), "d.pt.trace.json"), "precision").saved_ms["profiled"] > 0


def test_the_layout_advice_names_cudnns_nchw_batch_norm(tmp_path):
    # GIVEN a device-bound step: conv 60, nchwToNhwc 10, cuDNN's NCHW batch-norm backward 20, conv 10
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    device_bound(
        t,
        [
            ("conv_a", 60),
            ("cudnn::ops::nchwToNhwcKernel", 10),
            ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>", 20),
            ("conv_b", 10),
        ],
    )
    a = one(analysis(tmp_path, t), "layout")
    # THEN the replay removes the conversion (and its launch call) alone; the batch norm, which
    #      channels_last moves to cuDNN's NHWC kernels, is named as what the prediction leaves out
    assert "NCHW batch norm (cuDNN's or torch's) 0.020 ms/step" in a.evidence
    assert "likely larger" in a.prediction_note
    assert a.saved_ms["profiled"] == pytest.approx(0.010, abs=1e-6)


def test_the_layout_advice_fires_on_nchw_kernels_without_conversions(tmp_path):
    # GIVEN a device-bound 100 µs step without layout conversions: a conv 50, cuDNN's NCHW batch-norm
    #       forward 20, torch's NCHW depthwise convolution 30 (EfficientNet's kind: its conversions were
    #       0.8 % of the step, channels_last saved 41 %)
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    device_bound(
        t,
        [
            ("conv_a", 40),
            ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>", 20),
            ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>", 30),
        ],
    )
    a = one(analysis(tmp_path, t), "layout")
    # THEN the share is the three kinds of NCHW work together: 50 of the 100 µs step
    assert a.share == pytest.approx(0.5)
    assert "0 layout conversions" in a.evidence and "NCHW batch norm (cuDNN's or torch's) 0.020" in a.evidence
    assert "torch's NCHW depthwise convolutions 0.030 ms/step" in a.evidence
    assert "depthwise" in a.prediction_note and a.whatif == ("--channels-last",)


def _fp32_step() -> TraceBuilder:
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 5)
    device_bound(t, [(FP32_GEMM, 80), ("relu", 10)])
    return t


def host_bound_optimizer_step() -> TraceBuilder:
    """A host-bound step [0, 100): forward 0-40, Optimizer.step#SGD.step 40-80 with per-parameter ops (no
    foreach), Optimizer.zero_grad#SGD.zero_grad 80-100 holding two aten::zero_ with a fill each; every
    kernel is 1 µs, run as soon as it is launched."""
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 100)
    corr = iter(range(1, 100))

    def op_with_kernel(name: str, ts: float, dur: float) -> None:
        t.op(name, ts, dur)
        c = next(corr)
        t.launch(ts + 1, 1, corr=c)
        t.kernel(f"{name}_kernel", ts + 3, 1, corr=c)

    op_with_kernel("aten::linear", 0, 40)
    t.annotation("Optimizer.step#SGD.step", 40, 40)
    op_with_kernel("aten::add_", 41, 19)
    op_with_kernel("aten::add_", 60, 19)
    t.annotation("Optimizer.zero_grad#SGD.zero_grad", 80, 20)
    op_with_kernel("aten::zero_", 81, 9)
    op_with_kernel("aten::zero_", 90, 9)
    return t


def test_zero_grad_and_the_optimizer_loop_on_a_host_bound_step(tmp_path):
    t = host_bound_optimizer_step()
    r = analysis(tmp_path, t)
    zg, opt = one(r, "zero_grad"), one(r, "optimizer_loop")
    # THEN zero_grad's region is 20 µs of the 100 µs step, the optimizer's 40 µs
    assert zg.share == pytest.approx(0.2) and opt.share == pytest.approx(0.4)
    assert "2 zero_ calls per step" in zg.evidence and "set_to_none=True" in zg.knob
    assert opt.knob == "torch.optim.SGD(..., fused=True)" and opt.bound
    # AND removing zero_grad's region (its host time and its fills) saves its 20 µs of the host-bound step
    #     but for the launch latency its fills keep (a removed kernel still starts after its launch: the
    #     step then ends ~2 µs after the last host event); the optimizer's bound is its 40 µs, the same way
    assert 0.017 <= zg.saved_ms["profiled"] <= 0.020 + 1e-9
    assert 0.037 <= opt.saved_ms["profiled"] <= 0.040 + 1e-9
    # AND with a foreach op in the step there is no per-parameter advice
    t.op("aten::_foreach_add_", 99, 0.5)
    assert "optimizer_loop" not in [a.kind for a in analysis(tmp_path, t, "b.pt.trace.json").advice]


def test_where_the_profilers_cost_is_not_fixed_a_saving_comes_with_its_spread(tmp_path):
    # GIVEN the host-bound step above, with no unprofiled step time: the default profiler cost is assumed
    r = analysis(tmp_path, host_bound_optimizer_step())
    assert r.savings.profiler_cost_source == "default"
    zg = one(r, "zero_grad")
    # THEN its unprofiled saving is also given at the ends of the measured costs (1.5 and 12.5 µs/event):
    #      the more each of the region's events costs the profiler, the less its unprofiled removal saves
    s = zg.saved_ms
    assert s["unprofiled_min"] < s["unprofiled"] < s["unprofiled_max"] <= zg.step_ms["unprofiled"]
    text = " ".join(tk.analyze(tmp_path / "rank0.pt.trace.json").text().split())  # unwrapped
    assert (
        f"{s['unprofiled_min']:.3f} to {s['unprofiled_max']:.3f} ms at the profiler costs real captures"
        in text
    )
    row = tk.analyze(tmp_path / "rank0.pt.trace.json").advice().set_index("kind").loc["zero_grad"]
    assert row["saved_unprofiled_min_ms"] == pytest.approx(s["unprofiled_min"])
    # AND where a cost is fixed (no spread asked) the saving is one figure
    rp = Replayer.of(tk.load(tmp_path / "rank0.pt.trace.json"), keep_frames=False, keep_host=True)
    (fixed,) = predict_advice(rp, [replace(zg, saved_ms=None, step_ms=None)], 5.3)
    assert set(fixed.saved_ms) == {"profiled", "unprofiled"}


def test_pageable_copies_block_the_host(tmp_path):
    # GIVEN two steps of 100 µs, each: a pageable copy whose call blocks the host 0-30 (the copy 5-28 on
    #       the device), then a launch at 30 of a 60 µs kernel that runs 40-100
    t = TraceBuilder(device_properties=H100)
    for n, base in ((1, 0), (2, 100)):
        t.step(n, base, base + 100)
        t.op("aten::copy_", base, 30)
        t.runtime("cudaMemcpyAsync", base + 1, 28, corr=10 + n)
        t.memcpy(base + 5, 23, corr=10 + n, nbytes=4 << 20)
        t.launch(base + 31, 2, corr=20 + n)
        t.kernel("k", base + 40, 60, corr=20 + n)
    r = analysis(tmp_path, t)
    a = one(r, "pageable_copy")
    # THEN the host blocked 28 µs per 100 µs step in the copies' calls
    assert a.share == pytest.approx(0.28) and "1 pageable copies per step" in a.evidence
    assert a.whatif == ("--pin-memory",) and "pin_memory=True" in a.knob
    # AND the prediction: the calls return at once, so the kernel's launch no longer waits for them:
    #     a saving, never more than the step
    assert 0 < a.saved_ms["profiled"] <= a.step_ms["profiled"]


def test_shares_are_of_their_own_step_and_savings_within_it(tmp_path):
    """The 115 % share: the seed's dataloader_train trace, whose profiled step (3.98 ms) is longer than its
    unprofiled one (2.96 ms), had its profiled host-bound share moved onto the unprofiled step."""
    r = tk.analyze(ROOT / "fixtures/h200/dataloader_train").report
    assert r.advice
    for a in r.advice:
        assert 0.0 <= a.share <= 1.0, a
        for basis in ("profiled", "unprofiled"):
            if a.saved_ms and a.saved_ms.get(basis) is not None:
                assert a.saved_ms[basis] <= a.step_ms[basis], a


def test_the_article_trace_gets_the_precision_rule_with_a_prediction():
    # The seed article's MLP on an H200 (fp32 GEMMs on the CUDA cores): precision and TF32 advice, each
    # with a replayed saving below its step, ranked by the unprofiled saving
    r = tk.analyze(ROOT / "fixtures/h200/heavy_mlp").report
    kinds = [a.kind for a in r.advice]
    assert {"precision", "tf32"} <= set(kinds)
    saved = [a.unprofiled_saved_ms for a in r.advice if a.unprofiled_saved_ms is not None]
    assert saved == sorted(saved, reverse=True) and all(s > 0 for s in saved)
    doc = json.loads(json.dumps(r.to_json()))
    back = Report.from_json(doc)
    assert back.advice == r.advice


@pytest.mark.slow
def test_the_article_recipe_on_an_h100():
    """fixtures/h100/article: the seed article's ResNet-18 behind a 2-worker DataLoader, pageable copies,
    fp32 (TF32 convolutions), profiled the article's way; its unprofiled steps alternated with B's."""
    report = tk.analyze(ARTICLE_H100).report
    kinds = [a.kind for a in report.advice]
    # THEN the loader paces the step: its advice comes first, with a predicted saving within the step
    assert kinds[:3] == ["dataloader_workers", "pageable_copy", "layout"]
    loader, pageable, layout = report.advice[:3]
    assert 0 < loader.saved_ms["unprofiled"] < loader.step_ms["unprofiled"]
    # AND the pageable copies and the layout conversions fire, each with its replayed saving: the copies'
    #     saving profiled, and nothing without the profiler until the loader keeps up (the note says so)
    assert "pageable copies per step" in pageable.evidence
    assert 0 < pageable.saved_ms["profiled"] < pageable.step_ms["profiled"]
    assert pageable.saved_ms["unprofiled"] == pytest.approx(0.0, abs=1e-6)
    assert "paces the step" in pageable.prediction_note
    assert "layout conversions" in layout.evidence and "NCHW batch norm" in layout.evidence
    assert layout.saved_ms is not None and layout.saved_ms["unprofiled"] == pytest.approx(0.0, abs=1e-6)
    # AND the TF32 convolutions are under the precision rule's 10 %: no precision advice at the threshold;
    #     with every rule firing, what it predicts is nothing, the loader being the step
    assert "precision" not in kinds
    (precision,) = [a for a in advise(report, strict=False) if a.kind == "precision"]
    assert 0 < precision.share < PRECISION_MIN_FRACTION and not precision.bound
    rp = Replayer.of(tk.load(ARTICLE_H100), keep_frames=False, keep_host=True)
    (precision,) = predict_advice(rp, [precision], report.savings.profiler_cost_us_per_event)
    assert precision.saved_ms["unprofiled"] == pytest.approx(0.0, abs=1e-6)
    for a in report.advice:
        assert 0.0 <= a.share <= 1.0
        assert all(a.saved_ms[b] <= a.step_ms[b] for b in ("profiled", "unprofiled"))


def test_strict_false_fires_every_rule_with_evidence(tmp_path):
    # GIVEN a layout conversion of 1 µs in a 100 µs step (1 %, under the 2 % threshold)
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    device_bound(t, [("conv", 89), ("nchwToNhwcKernel", 1)])
    r = analysis(tmp_path, t)
    assert "layout" not in [a.kind for a in r.advice]
    assert "layout" in [a.kind for a in advise(r, strict=False)]


def test_the_command_and_the_flags_round_trip():
    a = Advice("k", "m", "e", whatif=("--kernels", "a|b=0", "--pin-memory"))
    assert command(a, "runs/x.parquet") == "tracekit whatif runs/x.parquet --kernels 'a|b=0' --pin-memory"
    s = scenario_of(a.whatif)
    assert dict(s.kernels) == {"a|b": 0.0} and s.pin_memory
    with pytest.raises(TracekitError):
        scenario_of(("--bogus",))


def test_pin_memory_without_pageable_copies_is_one_line(tmp_path, capsys):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(1, 2, corr=1)
    t.kernel("k", 10, 50, corr=1)
    code, _, err = run_main(
        ["whatif", str(t.write(tmp_path / "rank0.pt.trace.json")), "--pin-memory"], capsys
    )
    assert code == 2 and "no copy from pageable memory" in err and len(err.strip().splitlines()) == 1


def test_a_pinned_copy_takes_its_size_at_the_pinned_bandwidth(tmp_path):
    # GIVEN a step: a 55 MB pageable copy that takes 5000 µs on the device (11 GB/s), 2-5002, its call
    #       blocking the host 0-5003; then the launch of a 1000 µs kernel that runs 5010-6010
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 5010)
    t.runtime("cudaMemcpyAsync", 0, 5003, corr=1)
    t.memcpy(2, 5000, corr=1, nbytes=55_000_000)
    t.launch(5004, 1, corr=2)
    t.kernel("k", 5010, 1000, corr=2)
    r = analysis(tmp_path, t)
    a = one(r, "pageable_copy")
    assert a.share == pytest.approx(5003 / 6010)  # the call blocks longer than the copy runs
    # THEN from pinned memory the call returns at once and the copy takes 1 µs + 55e6 B / 55 GB/s =
    #      1001 µs: the kernel follows it on the stream, 3999 µs earlier (give or take the µs of launch
    #      latency the replay keeps)
    assert a.saved_ms["profiled"] == pytest.approx(3.999, abs=0.01)
    assert a.step_ms["profiled"] == pytest.approx(6.010, abs=1e-6)


KINDS = ("conv", "nchwToNhwcKernel", FP32_GEMM, "Memcpy HtoD (Pageable -> Device)")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(1, 40), st.integers(0, 30), st.integers(1, 30)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 3),
)
def test_random_timelines_keep_shares_and_savings_within_their_steps(kernels, steps):
    """Every advice on random steps: a share within 0-1 of its step, savings never above theirs."""
    t = TraceBuilder(device_properties=H100)
    corr = 0
    for n in range(steps):
        base = n * 400
        t.step(n + 1, base, base + 200)
        ts = base + 5
        for name, dur, gap, host in kernels:
            corr += 1
            call = "cudaMemcpyAsync" if name.startswith("Memcpy") else "cudaLaunchKernel"
            t.runtime(call, ts - 3, host if call == "cudaMemcpyAsync" else 2, corr=corr)
            t.kernel(name, ts, dur, corr=corr, cat="gpu_memcpy" if name.startswith("Memcpy") else "kernel")
            ts += dur + gap
    with tempfile.TemporaryDirectory() as tmp:
        r = analysis(Path(tmp), t)
    for a in list(r.advice) + advise(r, strict=False):
        assert 0.0 <= a.share <= 1.0
        for key, saved in (a.saved_ms or {}).items():
            basis = key.split("_")[0]  # unprofiled_min / _max: of the unprofiled step
            if saved is not None:
                assert saved <= a.step_ms[basis] + 1e-9 and a.step_ms[basis] > 0


def test_a_loader_that_paces_the_step_is_named_in_the_other_advice(tmp_path):
    from tests.test_analysis_loader import _loader_bound
    from tracekit.parse.parser import parse_paths

    # GIVEN host-bound 50 µs steps (a 1 µs fetch, then five 5 µs kernels each launched by a 2 µs call after
    #       8 µs of Python) whose unprofiled steps (~100 µs) wait ~80 µs for their batch
    t = TraceBuilder(device_properties=H100)
    for n in range(3):
        base = n * 50
        t.step(n, base, base + 50)
        t.dataloader(base, 1, kind="_MultiProcessingDataLoaderIter")
        for k in range(5):
            c = 10 * n + k + 1
            t.launch(base + 10 * k + 8, 2, corr=c)
            t.kernel(f"k{k}", base + 10 * k + 11, 5, corr=c)
    cap = parse_paths([t.write(tmp_path / "lb.pt.trace.json")])
    cap.meta["manifest"] = {"schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 0}}
    cap.meta["manifest"].update(_loader_bound())
    r = tk.analyze(cap).report
    loader, graphs = one(r, "dataloader_workers"), one(r, "cuda_graphs")
    # THEN the CUDA graph saves host time in the profiled replay, but without the profiler the producer
    #      paces the step: the advice says so, and the loader's own advice ranks first by its saving
    assert graphs.saved_ms["profiled"] > 0
    assert graphs.saved_ms["unprofiled"] < 0.5 * graphs.saved_ms["profiled"]
    assert "the input pipeline paces the step" in graphs.prediction_note
    assert r.advice[0] is loader and loader.saved_ms["unprofiled"] > graphs.saved_ms["unprofiled"]


def test_a_blocking_copy_as_torch_makes_it(tmp_path):
    # GIVEN torch's copy_ with non_blocking=False from pageable memory: in aten::copy_ 0-5010 the
    #       cudaMemcpyAsync 1-3 stages the 55 MB copy (on the device 5-5005), then cudaStreamSynchronize
    #       4-5008 waits for it; then a 1000 µs kernel launched at 5011 runs 5015-6015
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 5015)
    t.op("aten::copy_", 0, 5010)
    t.runtime("cudaMemcpyAsync", 1, 2, corr=1)
    t.memcpy(5, 5000, corr=1, nbytes=55_000_000)
    t.sync(4, 5004, name="cudaStreamSynchronize")
    t.launch(5011, 1, corr=2)
    t.kernel("k", 5015, 1000, corr=2)
    r = analysis(tmp_path, t)
    a = one(r, "pageable_copy")
    # THEN the copy accounts for its 5000 µs of the 6015 µs step (the device idles 10 µs in the sync)
    assert a.share == pytest.approx(5000 / 6015)
    assert "the host blocked 0.002 ms/step in their calls, the device idled 0.010 ms/step" in a.evidence
    # AND pinned and non_blocking, the call and the sync return at once and the copy takes 1001 µs: the
    #     kernel follows it ~4000 µs earlier
    assert a.saved_ms["profiled"] == pytest.approx(4.0, abs=0.02)


def _drained_steps(t: TraceBuilder, fast_us: float, slow_us: float, steps: int = 4) -> None:
    """`steps` steps of a GPU whose queue a per-step `.item()` drains. Each step the host launches 10
    kernels of `fast_us`, then 10 of `slow_us`, one launch every 15 µs (2 µs calls), then reads a value
    (aten::item, its cudaStreamSynchronize until the device is done, back 1 µs after it). After the drain
    the device runs each fast kernel as soon as it is launched, idle between them while the host launches
    the next (launch and interpreter time, not sync); the slow kernels let the host run ahead until the
    sync. Without the .item() the host runs ahead of the fast kernels too."""
    host, gpu, corr = 0.0, 0.0, 0
    for n in range(1, steps + 1):
        start = host
        for dur in [fast_us] * 10 + [slow_us] * 10:
            corr += 1
            t.launch(host + 1, 2, corr=corr)
            gpu = max(gpu, host + 4)
            t.kernel("k_fast" if dur == fast_us else "k_slow", gpu, dur, corr=corr)
            gpu += dur
            host += 15
        t.op("aten::item", host, gpu + 1 - host + 1)
        t.op("aten::_local_scalar_dense", host + 0.5, gpu + 1 - host)
        t.sync(host + 1, gpu - host, name="cudaStreamSynchronize")  # returns 1 µs after the device is done
        host = gpu + 2
        t.step(n, start, host)


def test_a_sync_under_its_threshold_is_advice_where_its_replay_saves_the_step(tmp_path):
    # GIVEN steps of 10 × 5 µs then 10 × 40 µs kernels, a drain at each step's end: the device idles
    # 10 µs between fast kernels (9 gaps: launch/interpreter) and ~5 µs in the sync, of a ~556 µs step
    t = TraceBuilder()
    _drained_steps(t, fast_us=5, slow_us=40)
    r = analysis(tmp_path, t)
    sync_idle = sum(s.idle_ns.get("sync", 0) for d in r.devices for s in d.samples)
    total = sum(s.dur_ns for d in r.devices for s in d.samples)
    assert 0 < sync_idle / total < 0.10  # under the rule's threshold: the strict rule does not fire
    assert not any(a.kind == "sync_drain" for a in advise(r))
    # THEN it is advice all the same: without the .item() the host runs ahead and the device runs the
    # step's 450 µs of kernels back to back: 106 µs (19 %) less than the drained 556 µs step, profiled
    a = one(r, "sync_drain")
    assert a.whatif == ("--ops", f"{SYNC_OPS_RE}=0")
    assert "under the rule's threshold" in a.prediction_note
    assert a.saved_ms["profiled"] == pytest.approx(a.step_ms["profiled"] - 0.450, abs=0.010)
    assert 0.05 * a.step_ms["unprofiled"] <= a.unprofiled_saved_ms <= a.step_ms["unprofiled"]


def test_a_sync_whose_replay_saves_little_is_no_advice(tmp_path):
    # GIVEN the same steps with slow kernels only (the host is ahead throughout but for the first one):
    # the drain costs ~7 µs of a ~830 µs step
    t = TraceBuilder()
    _drained_steps(t, fast_us=40, slow_us=40)
    r = analysis(tmp_path, t)
    # THEN no sync advice: its replay saves under 5 % of the step; nor without the savings' replay
    assert not any(a.kind == "sync_drain" for a in r.advice)
    quick = tk.analyze(t.write(tmp_path / "again.pt.trace.json"), savings=False).report
    assert not any(a.kind == "sync_drain" for a in quick.advice)


# -- communication the compute does not hide ---------------------------------------------------------------
def _comm_report(base: Report, device: int, exposed_ms: float, wait_ms: float, ranks: int = 2) -> Report:
    """`base` with a communication section: each rank 3 steps of 10 ms whose collectives are in flight
    `exposed_ms` while the rank computed nothing, `wait_ms` of it waiting for a late rank; two buckets,
    the second the more exposed."""
    from tracekit.analysis.model import CommBucket, CommRank, CommStep, Communication

    ns = 1_000_000
    steps = tuple(
        CommStep(
            i,
            10 * ns,
            8 * ns,
            3 * ns,
            3 * ns - round(exposed_ms * ns),
            round(exposed_ms * ns),
            round(wait_ms * ns),
        )
        for i in range(3)
    )
    buckets = (
        CommBucket("nccl:all_reduce", 0, 3, 6_553_600, 1.2, 0.0, 0.1),
        CommBucket("nccl:all_reduce", 1, 3, 1_048_576, 0.9, 0.0, 0.8),
    )
    comm = Communication(ranks=tuple(CommRank(r, device, steps, buckets) for r in range(ranks)))
    return replace(base, communication=comm, advice=())


def test_exposed_communication_names_the_knob_and_its_bucket(tmp_path):
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    device_bound(t, [("k", 80)])
    base = analysis(tmp_path, t)
    # GIVEN two GPU ranks, 1.5 ms of each 10 ms step exposed, 0.5 of it waiting for a late rank
    r = _comm_report(base, 0, 1.5, 0.5)
    # THEN the exposed transfer, 1.0 ms, is 10 % of the step: the advice fires, an upper bound
    a = one(replace(r, advice=tuple(advise(r))), "exposed_comm")
    assert a.share == pytest.approx(0.10)
    assert a.whatif == ("--comm", "0") and a.bound
    assert "1.000 ms of a 10.000 ms step, median over 2 ranks" in a.evidence
    bucket = "nccl:all_reduce #1 of 2 per step, 0.800 ms of its 0.900 ms transfer (1,048,576 elements)"
    assert bucket in a.evidence
    assert "bucket_cap_mb" in a.knob and "no_sync" in a.knob and "Communication is not hidden" in a.message
    assert command(a, "x.parquet") == "tracekit whatif x.parquet --comm 0"
    # a waiting rank's exposed time is the straggler rule's: 0.4 ms of transfer (4 %) is under the 5 %
    quiet = _comm_report(base, 0, 1.5, 1.1)
    assert not any(a.kind == "exposed_comm" for a in advise(quiet))
    (low,) = [a for a in advise(quiet, strict=False) if a.kind == "exposed_comm"]
    assert low.share == pytest.approx(0.04)
    # point-to-point transfers (pipeline stages) are no DDP buckets: the generic knob
    p2p = _comm_report(base, 0, 1.5, 0.5)
    ranks = tuple(
        replace(
            r,
            buckets=tuple(
                replace(b, name="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage)") for b in r.buckets
            ),
        )
        for r in p2p.communication.ranks
    )
    p2p = replace(p2p, communication=replace(p2p.communication, ranks=ranks))
    knob = one(replace(p2p, advice=tuple(advise(p2p))), "exposed_comm").knob
    assert "overlap the communication" in knob and "bucket_cap_mb" not in knob
    # one rank communicates with no one
    assert not any(a.kind == "exposed_comm" for a in advise(_comm_report(base, 0, 5.0, 0.0, ranks=1)))


def test_exposed_communication_on_a_cpu_backend_is_no_bound(tmp_path):
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 20)
    device_bound(t, [("k", 80)])
    r = _comm_report(analysis(tmp_path, t), -1, 2.0, 0.0)
    a = one(replace(r, advice=tuple(advise(r))), "exposed_comm")
    assert a.share == pytest.approx(0.20) and not a.bound
    assert "step thread" in a.evidence and "not a bound on a CPU backend" in a.prediction_note


def test_the_cpu_ddp_capture_gets_the_exposed_communication_advice():
    # fixtures/cpu_gloo/ddp: 2 gloo ranks, 1.5 of 7.6 ms per step exposed (DESIGN "Communication")
    r = tk.analyze(ROOT / "fixtures/cpu_gloo/ddp").report
    a = one(r, "exposed_comm")
    assert 0.05 <= a.share <= 1.0 and not a.bound
    assert "gloo:all_reduce" in a.evidence and "bucket_cap_mb" in a.knob
    # a CPU capture's advice is replayed too (its host, as tracekit whatif replays it)
    assert 0 < a.saved_ms["unprofiled"] <= a.step_ms["unprofiled"]
    assert 0 < a.saved_ms["profiled"] <= a.step_ms["profiled"]
    # FSDP gathers its parameters every step: its knobs are prefetching (7.9 % exposed)
    f = one(tk.analyze(ROOT / "fixtures/cpu_gloo/fsdp").report, "exposed_comm")
    assert "prefetch" in f.knob and "bucket_cap_mb" not in f.knob
