"""The whole-knob scenarios `--channels-last` and `--autocast` (tracekit.whatif.knobs) on tiny synthetic
traces with hand-computed answers (µs), through `tk.whatif` as `tracekit whatif` runs them."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit as tk
from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.whatif.knobs import (
    BF16_BATCHNORM_OVER_CUDNN_NCHW,
    CAST_EVENTS,
    HALF_BYTES,
    TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES,
)
from tracekit.whatif.predict import Replayer
from tracekit.whatif.scenario import WhatIfOptions

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]
FP32_GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_execute"


def predicted_us(w) -> float:
    (d,) = w.result.devices
    return d.predicted_step_ns[0] / 1e3


def replayed_us(w) -> float:
    (d,) = w.result.devices
    return d.replayed_step_ns[0] / 1e3


def host_paced_convolutions() -> TraceBuilder:
    # one 100 µs step whose host launches three kernels from one op, each call 20 / 20 / 10 µs long, the
    # second a layout conversion; every kernel runs 5 µs right after its call: the host is the step
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 100)
    t.op("aten::conv2d", 0, 90)
    for corr, (at, call, name) in enumerate(
        ((10, 20, "conv_a"), (40, 20, "void cudnn::ops::nchwToNhwcKernel<float>"), (70, 10, "conv_b")), 1
    ):
        t.launch(at, call, corr=corr)
        t.kernel(name, at + call, 5, corr=corr)
    return t


def test_channels_last_removes_the_conversions_and_their_launch_calls(tmp_path):
    w = tk.whatif(host_paced_convolutions().write(tmp_path / "t.json"), channels_last=True)
    # THEN the conversion's 20 µs launch call leaves the host: the step ends 20 µs earlier
    assert replayed_us(w) == pytest.approx(100.0)
    assert predicted_us(w) == pytest.approx(80.0)
    # AND the notes say what the prediction leaves out (cuDNN's NHWC batch norm is not in the trace)
    assert any("1 layout conversions" in n and "1 launch calls" in n for n in w.result.notes)
    assert any("batch norm" in n for n in w.result.notes)


def test_channels_last_on_a_trace_without_conversions_changes_nothing(tmp_path):
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 50)
    t.launch(10, 10, corr=1)
    t.kernel("conv_a", 20, 5, corr=1)
    w = tk.whatif(t.write(tmp_path / "t.json"), channels_last=True)
    assert predicted_us(w) == pytest.approx(replayed_us(w))
    assert any("no layout conversion" in n for n in w.result.notes)


def autocast_step() -> TraceBuilder:
    """One 200 µs step on one thread: a one-kernel forward op (aten::add_, 20 µs: the op and its launch,
    2 recorded events), a linear layer (aten::linear > aten::addmm, one fp32 GEMM), the GEMM's backward
    node and a one-kernel backward node (ReluBackward0: 24 µs, 3 events); kernels of 2 µs."""
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 200)
    t.op("aten::add_", 0, 20)
    t.launch(10, 5, corr=1)
    t.kernel("elementwise_add", 15, 2, corr=1)
    t.op("aten::linear", 30, 40)
    t.op("aten::addmm", 32, 30)
    t.launch(40, 5, corr=2)
    t.kernel(FP32_GEMM, 45, 2, corr=2)
    t.op("autograd::engine::evaluate_function: AddmmBackward0", 100, 30)
    t.launch(110, 5, corr=3)
    t.kernel(FP32_GEMM, 115, 2, corr=3)
    t.op("autograd::engine::evaluate_function: ReluBackward0", 140, 24)
    t.op("aten::threshold_backward", 142, 20)
    t.launch(150, 5, corr=4)
    t.kernel("threshold_backward_kernel", 155, 2, corr=4)
    return t


def test_autocast_adds_a_weight_cast_and_a_gradient_cast_priced_from_the_trace(tmp_path):
    w = tk.whatif(autocast_step().write(tmp_path / "t.json"), autocast="bf16")
    # THEN the forward cast: 5 events at aten::add_'s 10 µs per event = 50 µs, at the linear op's start;
    #      the backward cast: ReluBackward0's 24 µs, at AddmmBackward0's start: the host-paced step
    #      grows by 74 µs (the GEMMs, 2 µs each, faster, change no step)
    assert CAST_EVENTS == 5
    assert replayed_us(w) == pytest.approx(200.0)
    assert predicted_us(w) == pytest.approx(274.0)
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "1 forward cast(s) at 50.0 µs and 5 recorded events" in note
    assert "1 backward cast(s) at 24.0 µs and 3 recorded events" in note


def test_the_added_casts_carry_their_profiler_events(tmp_path):
    # GIVEN the same step: the segments where casts are added carry 2 boundaries per added event, so the
    #       unprofiled replay takes the profiler's cost off the casts as off the trace's own work
    rp = Replayer.of(tk.load(autocast_step().write(tmp_path / "t.json")))
    f = rp.check(WhatIfOptions(autocast="bf16"))  # the scenario's factors on this capture
    added = f.cost - rp.graph.cost
    assert sorted(added[added > 0].tolist()) == [2 * 3, 2 * CAST_EVENTS]
    assert f.w is not None and int((f.w - rp.graph.w).sum()) == 74_000
    # AND with a profiler cost of 1 µs per event the casts' 8 events take 8 µs off (and the trace's own
    #     events theirs): the unprofiled prediction is shorter than the profiled one by more than 8 µs
    s = WhatIfOptions(autocast="bf16")
    assert rp.step_ms(s, 0.0, f) - rp.step_ms(s, 1.0, f) > 0.008


def test_autocast_takes_bf16_or_fp16_only(tmp_path, capsys):
    path = autocast_step().write(tmp_path / "t.json")
    code, out, err = run_main(["whatif", str(path), "--autocast", "fp8"], capsys)
    assert code == 2 and "choose one of bf16, fp16" in err and "Traceback" not in err
    code, out, err = run_main(["whatif", str(path), "--autocast", "FP16", "--json"], capsys)
    assert code == 0 and '"autocast": "fp16"' in out


def test_gemm_ops_nested_in_gemm_ops_get_one_cast(tmp_path):
    # GIVEN conv2d > convolution > _convolution > cudnn_convolution, one kernel
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 100)
    t.op("aten::add_", 0, 10)
    t.launch(2, 4, corr=1)
    t.kernel("elementwise_add", 6, 1, corr=1)
    t.op("aten::conv2d", 20, 40)
    t.op("aten::convolution", 21, 38)
    t.op("aten::_convolution", 22, 36)
    t.op("aten::cudnn_convolution", 23, 34)
    t.launch(30, 5, corr=2)
    t.kernel(FP32_GEMM, 35, 2, corr=2)
    rp = Replayer.of(tk.load(t.write(tmp_path / "t.json")))
    f = rp.check(WhatIfOptions(autocast="bf16"))  # the scenario's factors on this capture
    # THEN one forward cast (5 events at aten::add_'s 5 µs per event), no backward one
    assert int((f.w - rp.graph.w).sum()) == 25_000
    assert np.count_nonzero(f.cost - rp.graph.cost) == 1


CUDNN_BN = ("aten::cudnn_batch_norm", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>")
TORCH_BF16_BN = (
    "aten::native_batch_norm",
    "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::BFloat16, float, float,"
    " int>",
)


def adds_then(kernels: list, shapes: bool = True) -> TraceBuilder:
    """A device-bound step: five ops each launch an elementwise add over 2**20 floats (two inputs of that
    size and the output: 3 x 4 MiB moved, 4 µs each: 3145.728 GB/s), then each (op, input dims, kernel,
    µs) of `kernels` launches its kernel; the device runs them back to back from 20 µs."""
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 15)
    n = [16, 64, 32, 32]
    adds = [("aten::add_", [n, n, []], "void at::native::vectorized_elementwise_kernel<4, add<float>>", 4)]
    at = 20.0
    for i, (op, dims, kernel, dur) in enumerate(adds * 5 + kernels):
        ev = t.op(op, 2 * i, 1.5)
        if shapes:
            ev["args"]["Input Dims"] = dims
        t.launch(2 * i + 0.2, 1, corr=100 + i)
        t.kernel(kernel, at, dur, corr=100 + i)
        at += dur
    return t


def nchw_batch_norm_step(shapes: bool = True, bn: tuple[str, str] = CUDNN_BN) -> TraceBuilder:
    """The five adds (`adds_then`), then a convolution op launches a 2 µs layout conversion, and a batch
    norm op (`bn`: cuDNN's, by default; input 16x64x32x32) launches a 20 µs NCHW kernel; the device runs
    them back to back from 20 µs to 62 µs."""
    n = [16, 64, 32, 32]
    return adds_then(
        [
            ("aten::cudnn_convolution", [n, [64, 64, 3, 3]], "void cudnn::ops::nchwToNhwcKernel<float>", 2),
            (bn[0], [n, [64], [64], [64], [64]], bn[1], 20),
        ],
        shapes,
    )


def test_channels_last_times_cudnns_nhwc_batch_norm_at_the_traces_bandwidth(tmp_path):
    w = tk.whatif(nchw_batch_norm_step().write(tmp_path / "t.json"), channels_last=True)
    # THEN the batch norm: 3 passes over 2**20 floats at 3145.728 GB/s = 4 µs instead of 20, and the
    #      conversion's 2 µs go: the device-bound step ends 18 µs earlier
    assert replayed_us(w) == pytest.approx(62.0)
    assert predicted_us(w) == pytest.approx(44.0)
    (note,) = [n for n in w.result.notes if n.startswith("channels_last")]
    assert "(1 ops, 0.020 ms) at its channels_last kernels' time, 0.004 ms" in note and "3146 GB/s" in note


def test_channels_last_times_torchs_own_16_bit_batch_norm_at_its_measured_factor(tmp_path):
    # GIVEN the step with torch's own batch norm on bf16 activations (what autocast runs)
    w = tk.whatif(nchw_batch_norm_step(bn=TORCH_BF16_BN).write(tmp_path / "t.json"), channels_last=True)
    # THEN 3 passes over 2**20 bf16 elements at 3145.728 GB/s (2 µs) x 2.1 = 4.2 µs instead of 20, and the
    #      conversion's 2 µs go: 62 - 15.8 - 2
    assert TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES == 2.1
    assert predicted_us(w) == pytest.approx(44.2)
    (note,) = [n for n in w.result.notes if n.startswith("channels_last")]
    assert "(1 ops, 0.020 ms) at its channels_last kernels' time, 0.004 ms" in note
    assert "torch's own batch norm, which 16-bit inputs run: its channels_last kernels at 2.1x" in note


def test_without_shapes_the_batch_norm_keeps_its_time(tmp_path):
    w = tk.whatif(nchw_batch_norm_step(shapes=False).write(tmp_path / "t.json"), channels_last=True)
    assert predicted_us(w) == pytest.approx(60.0)  # the conversion alone
    assert any("keeps its time" in n and "no input shapes (record_shapes=True)" in n for n in w.result.notes)


def test_autocast_bf16_batch_norm_leaves_cudnn_and_4d_elementwise_kernels_move_half_the_bytes(tmp_path):
    # GIVEN the device-bound step above (no GEMM: no cast, no GEMM factor)
    w = tk.whatif(nchw_batch_norm_step().write(tmp_path / "t.json"), autocast="bf16")
    # THEN the five adds on 16x64x32x32 activations take 2 µs each, not 4; cuDNN's NCHW batch norm
    #      (20 µs) becomes torch's, x 1.3 = 26 µs; the conversion keeps its 2: 20 + 10 + 2 + 26 = 58
    assert BF16_BATCHNORM_OVER_CUDNN_NCHW == 1.3 and HALF_BYTES == 0.5
    assert predicted_us(w) == pytest.approx(58.0)
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "1 cuDNN NCHW batch-norm kernels x 1.3" in note
    assert "5 fp32 elementwise kernels and 0 device-to-device copies on 4-D activations (0.020 ms)" in note


def test_autocast_halves_an_in_place_activations_fp32_copy_only(tmp_path):
    # GIVEN a device-bound step: an in-place SiLU on 16x64x32x32 floats copies them (4 MiB, 4 µs), another
    #       op copies the same shape in 2 MiB (already 16-bit), each its own Memcpy DtoD; a convolution
    #       reads activations of that shape (a convnet's: 16-bit under autocast)
    t = TraceBuilder(device_properties=H100)
    t.step(1, 0, 10)
    n = [16, 64, 32, 32]
    t.op("aten::convolution", 5, 1)["args"]["Input Dims"] = [n, [64, 64, 3, 3]]
    at = 20.0
    for i, nbytes in enumerate((4 << 20, 2 << 20)):
        ev = t.op("aten::silu_", 2 * i, 1.5)
        ev["args"]["Input Dims"] = [n]
        t.launch(2 * i + 0.2, 1, corr=200 + i)
        t.kernel(
            "Memcpy DtoD (Device -> Device)", at, 4, corr=200 + i, cat="gpu_memcpy", extra={"bytes": nbytes}
        )
        at += 4
    w = tk.whatif(t.write(tmp_path / "t.json"), autocast="bf16")
    # THEN the fp32 copy takes 2 µs, the other keeps its 4: the step ends at 20 + 2 + 4
    assert predicted_us(w) == pytest.approx(26.0)
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "0 fp32 elementwise kernels and 1 device-to-device copies on 4-D activations" in note


def test_autocast_fp16_keeps_cudnns_batch_norm(tmp_path):
    w = tk.whatif(nchw_batch_norm_step().write(tmp_path / "t.json"), autocast="fp16")
    assert predicted_us(w) == pytest.approx(52.0)  # 20 + 10 + 2 + 20
    (note,) = [n for n in w.result.notes if n.startswith("autocast fp16")]
    assert "fp16: cuDNN keeps batch norm" in note


def test_autocast_leaves_the_optimizers_and_accumulations_fp32_kernels_alone(tmp_path):
    # GIVEN the same step, its first add inside the optimizer's step and its second an accumulation
    t = nchw_batch_norm_step()
    t.annotation("Optimizer.step#SGD.step", -0.5, 2.2)
    t.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 1.8, 1.8)
    w = tk.whatif(t.write(tmp_path / "t.json"), autocast="bf16")
    # THEN those two keep their 4 µs: 58 + 2 x 2
    assert predicted_us(w) == pytest.approx(62.0)
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "3 fp32 elementwise kernels and 0 device-to-device copies on 4-D activations" in note


def test_autocast_without_shapes_keeps_the_elementwise_kernels(tmp_path):
    w = tk.whatif(nchw_batch_norm_step(shapes=False).write(tmp_path / "t.json"), autocast="bf16")
    assert predicted_us(w) == pytest.approx(68.0)  # 20 + 20 + 2 + 26: batch norm's ratio alone
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "elementwise kernels keep their time (the trace has no input shapes" in note


def _reference_ops(host, mark):
    """The ops' nesting by a stack walk over each thread's events (the plain algorithm _ops vectorises)."""
    from tracekit.analysis.causes import STATE
    from tracekit.data import schema as S
    from tracekit.whatif.knobs import EVALUATE_PREFIX

    cat = host["cat"].to_numpy()
    is_op = cat == S.CAT_CPU_OP
    is_call = np.isin(cat, (S.CAT_RUNTIME, S.CAT_DRIVER))
    state = host["state"].to_numpy()
    names = host["name"].astype(str).to_numpy()
    ts = host["ts"].to_numpy(np.int64)
    end = np.maximum(host["end"].to_numpy(np.int64), ts + 1)
    thread = list(zip(host["rank"].to_numpy(), host["pid"].to_numpy(), host["tid"].to_numpy()))
    pos = np.flatnonzero(is_op)
    index = {int(p): i for i, p in enumerate(pos)}
    out = {k: np.zeros(pos.size, np.int64) for k in ("top", "backward", "in_marked", "launches", "other")}
    out["events"] = np.ones(pos.size, np.int64)
    owner = np.full(len(host), -1, np.int64)
    by_thread: dict = {}
    for p in np.flatnonzero(is_op | is_call).tolist():
        by_thread.setdefault(thread[p], []).append(p)
    for rows in by_thread.values():
        rows.sort(key=lambda p: (ts[p], -end[p]))
        stack: list = []
        for p in rows:
            while stack and end[stack[-1]] <= ts[p]:
                stack.pop()
            for q in stack:
                out["events"][index[q]] += 1
            if is_call[p]:
                if stack:
                    owner[p] = stack[-1]
                for q in stack:
                    out["launches" if state[p] == STATE["launch"] else "other"][index[q]] += 1
                stack.append(p)  # a call is a leaf; kept on the stack only to close as events do
                continue
            i = index[p]
            ops_above = [q for q in stack if is_op[q]]
            out["top"][i] = ops_above[0] if ops_above else p
            out["backward"][i] = names[p].startswith(EVALUATE_PREFIX) or any(
                names[q].startswith(EVALUATE_PREFIX) for q in ops_above
            )
            out["in_marked"][i] = any(bool(mark.search(names[q])) for q in ops_above)
            stack.append(p)
    return out, owner


@pytest.mark.parametrize(
    "path",
    [
        "docs/results/advice/data/runs/r18",
        "docs/results/advice/data/runs/r50_bf16",
        "fixtures/h100/article",
    ],
)
def test_the_vectorised_nesting_is_the_stack_walks(path):
    import re
    from pathlib import Path

    from tracekit.whatif.knobs import AUTOCAST_OPS_RE, _ops

    root = Path(__file__).resolve().parents[1]
    rp = Replayer.of(tk.load(root / path))
    host = rp.frames.host
    got = _ops(rp.graph, host, AUTOCAST_OPS_RE)
    want, owner = _reference_ops(host, re.compile(AUTOCAST_OPS_RE.pattern))
    assert np.array_equal(got.top, want["top"])
    assert np.array_equal(got.backward, want["backward"].astype(bool))
    assert np.array_equal(got.in_marked, want["in_marked"].astype(bool))
    assert np.array_equal(got.launches, want["launches"]) and np.array_equal(got.other_calls, want["other"])
    assert np.array_equal(got.events, want["events"])
    assert np.array_equal(got.owner, owner)


def test_autocast_holds_a_matrix_product_at_moving_its_bytes(tmp_path):
    # GIVEN a device-bound step: five adds over 2**20 floats at 3145.728 GB/s (4 µs each, as above), then a
    #       thin product (aten::mm 65536x16 @ 16x64, 20 µs in fp32) and a square one (256x4096 @ 4096x256,
    #       100 µs), back to back from 20 µs
    t = adds_then(
        [
            ("aten::mm", [[65536, 16], [16, 64]], FP32_GEMM, 20),
            ("aten::mm", [[256, 4096], [4096, 256]], FP32_GEMM, 100),
        ]
    )
    w = tk.whatif(t.write(tmp_path / "t.json"), autocast="bf16")
    # THEN the adds keep their 4 µs (no convolution reads their activations: a transformer's, fp32 under
    #      autocast); the thin product cannot beat moving its operands and result in 16 bits,
    #      2 x (65536x16 + 16x64 + 65536x64) bytes at 3145.728 GB/s = 3.334 µs (the peaks' ratio says
    #      20 x 0.068 = 1.36); the square one moves 4.33 MB (1.38 µs) and takes the peaks' 6.8 µs
    assert predicted_us(w) == pytest.approx(20 + 20 + 10487808 / 3145.728 / 1e3 + 6.8, abs=0.01)
    (note,) = [n for n in w.result.notes if n.startswith("autocast bf16")]
    assert "1 matrix products held at moving their operands in 16 bits at the trace's 3146 GB/s" in note
    assert "(0.001 ms at the peaks' ratio, 0.003 ms)" in note


def test_autocast_halves_only_the_activations_a_convolution_or_batch_norm_reads(tmp_path):
    # GIVEN the device-bound step above with its convolution reading other activations (16x64x16x16):
    #       its adds' 16x64x32x32 activations are no convnet's (Swin's [B, H, W, C] residual stream)
    t = nchw_batch_norm_step()
    for ev in t.events:
        if ev.get("name") == "aten::cudnn_convolution":
            ev["args"]["Input Dims"] = [[16, 64, 16, 16], [64, 64, 3, 3]]
    w = tk.whatif(t.write(tmp_path / "t.json"), autocast="bf16")
    # THEN the batch norm still reads them: its input is a convnet's, so the adds halve: 58 as above
    assert predicted_us(w) == pytest.approx(58.0)
    # AND without the batch norm's shapes nothing reads them: the adds keep their 4 µs (20 + 20 + 2 + 26)
    for ev in t.events:
        if ev.get("name") == CUDNN_BN[0]:
            ev["args"]["Input Dims"] = [[16, 64, 16, 16], [64], [64], [64], [64]]
    w = tk.whatif(t.write(tmp_path / "t2.json"), autocast="bf16")
    assert predicted_us(w) == pytest.approx(68.0)
