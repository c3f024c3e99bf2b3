"""Advice: the knobs people turn, each where the trace shows its evidence, with the exact setting and the
what-if flags that predict what turning it saves.

Every rule is a row of RULES: a function from the report (and the full kernel statistics) to an `Advice`
or None, with its threshold named below in units of the step. A rule gives

- its evidence: figures from the trace, per step, with units;
- `share`: the part of the step that evidence accounts for, of the step named by `basis` (the trace's
  steps, "profiled", or for the loader the capture's timed steps without the profiler, "unprofiled"):
  never above 1, because the figure and the step are of the same steps;
- `knob`: the setting or code change;
- `whatif`: the `tracekit whatif` flags that replay the capture with the knob turned (empty where a trace
  cannot say what the knob does, and `prediction_note` says why). tracekit.whatif.savings replays them and
  fills in `saved_ms`, profiled and unprofiled, then ranks the advice by the unprofiled saving. Where the
  replay leaves out part of what the knob does, the note says which part and in which direction.

Kernel names are matched by the regular expressions below, each one the class of device work a knob acts
on (cuDNN's layout transforms, pageable copies, fp32 and TF32 GEMMs and convolutions).

`advise(report, kernels, strict=False)` fires every rule whose evidence is above zero: what
docs/results/advice/make_table.py uses to compare each rule's prediction with a real change.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from tracekit.analysis.calls import PAGEABLE_RE, CallKind, call_kind
from tracekit.analysis.causes import CAUSE_ROWS, SYNC_OPS
from tracekit.analysis.model import (
    BOUND_CPUS,
    BOUND_TRAINING,
    Advice,
    InputPipeline,
    KernelStat,
    OpStat,
    Report,
    SteadyState,
)

DATALOADER_MIN_FRACTION = 0.20  # dataloader idle ≥ 20 % of step time
SYNC_MIN_FRACTION = 0.10  # sync idle ≥ 10 % of step time
HOST_BOUND_MIN_FRACTION = 0.30  # idle in the host causes a CUDA graph removes ≥ 30 % of step time
# the host causes a CUDA graph replay no longer spends (what the CUDA-graph rule sums)
GRAPHED_AWAY = tuple(c.name for c in CAUSE_ROWS if c.state and not c.graph_keeps)
TINY_KERNEL_MAX_US = 20.0  # "tiny": median kernel time below 20 µs
GRAPHED_MAX_FRACTION = 0.5  # no CUDA-graph advice when half the kernels already run in graph launches
COLLECTIVE_MIN_FRACTION = 0.10  # collective wait ≥ 10 % of step time
EXPOSED_COMM_MIN_FRACTION = 0.05  # communication's exposed transfer ≥ 5 % of step time (median over ranks)
# More workers are predicted at the capture's per-batch time each (throughput linear in the count): an
# upper bound, as workers that share a host's cores, memory and caches make a batch no faster, often
# slower (2 -> 8 workers 4.1x on an H200 host, docs/results/whatif.md; 2 -> 6 on two H100 hosts 2.1x and
# 1.8x, each worker 1.4x and 1.7x as long per batch: docs/results/advice.md)
WORKERS_BOUND_NOTE = (
    "at most: each added worker is taken to make batches as fast as the capture's did; workers sharing the "
    "host's cores and memory make them no faster (1.4-1.7x as long per batch with 6 workers as with 2 on "
    "the H100 hosts of docs/results/advice.md)"
)
DDP_BUCKET_CAP_MB = 25  # DistributedDataParallel's default bucket_cap_mb
DDP_KNOB = (
    f"DistributedDataParallel(model, bucket_cap_mb=<below {DDP_BUCKET_CAP_MB}: a smaller last bucket>, "
    "gradient_as_bucket_view=True); with gradient accumulation `with model.no_sync():` on every "
    "micro-batch but the last; a larger batch per rank"
)
FSDP_KNOB = (
    "FSDP: prefetch the next unit's all-gather (FSDP2: fully_shard(..., reshard_after_forward=False) or "
    "module.set_modules_to_forward_prefetch; FSDP1: forward_prefetch=True, "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE); with gradient accumulation "
    "set_requires_gradient_sync(False) (FSDP1: no_sync()) on every micro-batch but the last; a larger "
    "batch per rank"
)
COMM_KNOB = (
    "overlap the communication with compute: issue it earlier (async_op=True, wait just before its result "
    "is needed) or on its own stream; or communicate less often (larger micro-batches, fewer stages)"
)
ALL_GATHER_RE = re.compile(r"all_?gather", re.IGNORECASE)  # NCCL's AllGather kernels, gloo:all_gather
ALL_REDUCE_RE = re.compile(r"all_?reduce", re.IGNORECASE)
CPU_DISPATCH_MIN_FRACTION = 0.30  # CPU-only: dispatch gaps ≥ 30 % of step time
CAPTURE_MIN_FRACTION = 0.50  # a graph capture ≥ 50 % of a rank's steps: a capture trace, not a loop's
PAGEABLE_MIN_FRACTION = 0.02  # host blocked in pageable copies ≥ 2 % of step time
LAYOUT_MIN_FRACTION = 0.02  # layout conversions ≥ 2 % of step time on the device
PRECISION_MIN_FRACTION = 0.10  # fp32 / TF32 GEMMs and convolutions ≥ 10 % of step time on the device
ZERO_GRAD_MIN_FRACTION = 0.01  # zero_grad's region ≥ 1 % of step time on the host
OPTIMIZER_MIN_FRACTION = 0.05  # a per-parameter optimizer step's region ≥ 5 % of step time on the host

# Device work by class (searched in the activity's name).
LAYOUT_RE = r"nchwToNhwc|nhwcToNchw"  # cuDNN's transposes around an NHWC kernel on NCHW tensors
# cuDNN's batch norm: its NCHW kernels (bn_fw_tr_1C11_*, bn_bw_1C11_*; channels_last runs NHWC ones,
# batchnorm_*_nhwc_*) and all of them (torch runs bf16 batch norm in its own kernels: cuDNN's take no
# bf16 input)
NCHW_BATCHNORM_RE = r"cudnn::bn_(?:fw|bw)\w*1C11"
# torch's own depthwise convolutions on NCHW fp32 tensors (channels_last hands them to cuDNN's kernels)
TORCH_NCHW_DEPTHWISE_RE = r"conv_depthwise2d_"
# torch's own batch norm on NCHW tensors (what it runs for 16-bit inputs, which cuDNN's take not; on
# channels_last tensors its *_channels_last_kernel ones)
TORCH_NCHW_BATCHNORM_RE = r"at::native::batch_norm_(?:collect_statistics|transform_input|backward)_kernel<"
CUDNN_BATCHNORM_RE = r"cudnn::(?:bn_|batchnorm_)"
_LOW = r"f16|half|fp8|e4m3|e5m2|i8|h\d+gemm"  # bf16, fp16, fp8, int8 kernels
_MATH = r"gemm|conv|fprop|grad"
# fp32 math on tensor cores (TF32: cuBLAS/cuDNN's tf32 kernels, CUTLASS's s1688 tensor-op kernels)
TF32_RE = rf"^(?!.*({_LOW}))(?=.*({_MATH})).*(tf32|s1688)"
# fp32 math on the CUDA cores (FFMA: sgemm, SIMT, xmma f32 kernels without tf32)
FP32_RE = rf"^(?!.*({_LOW}|tf32|s1688))(?=.*({_MATH})).*(sgemm|simt|ffma|f32f32|fp32)"
# cuDNN's direct grouped (depthwise) convolutions in fp32 (conv2d_ / dgrad2d_ / wgrad2d_grouped_direct_kernel
# on floats): math on the CUDA cores that bf16 hands to tensor-core kernels (ConvNeXt-T's depthwise wgrad
# 15.5 -> 0.9 ms per step under autocast on an H100, 17x; the fp32 peaks' ratio is 14.8x), and TF32 leaves
# (cuDNN's TF32 is on by default, and they ran): fp32 math for the precision rule, not for the TF32 one.
FP32_DIRECT_RE = r"^(?!.*(half|bfloat16|__nv_bfloat16|__half)).*grouped_direct_kernel"
# what autocast to 16 bits scales by BF16_OVER_FP32
AUTOCAST_FP32_RE = rf"{FP32_RE}|{FP32_DIRECT_RE}"

# Time of the same math in bf16 over its time in TF32 / fp32: the dense tensor-core peaks' ratio (H100 and
# H200 SXM datasheet: bf16 989.4, TF32 494.7, FP32 66.9 TFLOPS; A100: 312, 156, 19.5): the bound for
# compute-bound kernels; memory-bound ones gain less (make_table.py measures it, docs/results/advice.md).
BF16_OVER_TF32 = 0.5
BF16_OVER_FP32 = 0.068
TF32_OVER_FP32 = 0.135  # TF32 494.7 over FP32 66.9 (docs/results/whatif.md's tf32 pair: within 0.07)
# Under bf16 autocast torch runs batch norm in its own kernels (cuDNN's take no bf16 input): on NCHW
# tensors one block per channel reduces it as cuDNN's NCHW kernels do, but with a separate normalising
# pass, and took 1.21-1.36x cuDNN's fp32 NCHW kernels' time on the nine convnet captures of docs/results/
# advice.md (H100: ResNet-18 batch 64 1.35, ResNet-50 batch 32 1.21 and batch 128 1.28, EfficientNet-B0
# batch 128 1.36, DenseNet-121 1.29, MobileNetV2 1.32, ResNeXt-50 1.24, MobileNetV3-L 1.30 and
# RegNetY-800MF 1.30 at batch 64, the last two after the constant was set: docs/results/advice/
# device_model.py); on channels_last tensors 1.00-1.02x cuDNN's NHWC kernels (kept). Under fp16 cuDNN
# keeps batch norm (kept).
BF16_BATCHNORM_OVER_CUDNN_NCHW = 1.3
# torch's own batch norm (what 16-bit inputs run) on channels_last tensors over the passes model of
# tracekit.whatif.knobs (BN_FORWARD_PASSES / BN_BACKWARD_PASSES at the trace's elementwise bandwidth): its
# channels_last kernels took 2.40, 2.31, 1.94 and 1.78x the model's time on the four bf16 convnet captures
# of docs/results/advice.md (ResNet-18, ResNet-50 at batch 32 and 128, EfficientNet-B0; bn_model.py before
# this factor); their median. cuDNN's NHWC kernels, which fp32 runs, are within 8.5-30 % of the model.
TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES = 2.1
# Devices with bf16 tensor cores: compute capability 8.0 and later (Ampere, Ada, Hopper, Blackwell).
BF16_MIN_CAPABILITY = 8.0
_BF16_NAMES = re.compile(
    r"\b(A100|A10|A30|A40|A800|H100|H200|H800|H20|L4|L40|B100|B200|GB200|RTX (30|40|50)\d\d)"
)

ZERO_GRAD_REGION = r"^Optimizer\.zero_grad#"
OPTIMIZER_STEP_REGION = r"^Optimizer\.step#(\w+)\.step"
# the ops of a host read of a device value (.item()), causes.SYNC_OPS, as an --ops pattern
SYNC_OPS_RE = r"^aten::(item|_local_scalar_dense)$"
COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")  # a copy with non_blocking=False syncs its stream


@dataclass(frozen=True)
class Evidence:
    """What the rules read: the report, every kernel name's statistics (the report keeps the top ones
    only), the device-steps they are over, and each step basis."""

    report: Report
    kernels: Sequence[KernelStat]
    device_steps: int  # steps summed over devices (the kernel statistics are over all of them)
    step_ns_total: float  # their total duration
    strict: bool

    @property
    def step_ms(self) -> float:
        return self.step_ns_total / self.device_steps / 1e6 if self.device_steps else 0.0

    def kernel_ms(self, pattern: str) -> tuple[float, float, float, int]:
        """(device ms/step, launch-call ms/step, count/step, names) of the activities whose name matches."""
        rx = re.compile(pattern)
        hit = [k for k in self.kernels if rx.search(k.name)]
        n = max(self.device_steps, 1)
        return (
            sum(k.kernel.total_ns for k in hit) / n / 1e6,
            sum(k.api.total_ns for k in hit) / n / 1e6,
            sum(k.kernel.count for k in hit) / n,
            len(hit),
        )

    def share(self, ms_per_step: float) -> float:
        step = self.step_ms
        return min(ms_per_step / step, 1.0) if step > 0 else 0.0

    def fires(self, share: float, threshold: float) -> bool:
        return share > 0 and (not self.strict or share >= threshold)


def advise(
    report: Report, kernels: Optional[Iterable[KernelStat]] = None, strict: bool = True
) -> list[Advice]:
    """The advice that fires, largest share first (the whatif stage re-ranks it by predicted saving).
    `kernels`: every kernel name's statistics (default: the report's top ones); `strict=False`: every
    rule with any evidence, whatever its threshold."""
    capture = _capture_advice(report)
    if capture is not None:  # the idle time is the capture's (analysis/graph_capture.py): no cause's advice
        return [capture]
    ev = _evidence(report, kernels, strict)
    out: list[Advice] = []
    for rule in RULES:
        out.extend(rule(ev))
    return sorted(out, key=lambda a: -(a.share if a.share is not None else 0.0))


def candidates(report: Report, kernels: Optional[Iterable[KernelStat]] = None) -> list[Advice]:
    """The advice of the CONFIRMED_BY_REPLAY rules that did not fire at their threshold but have evidence:
    advice only where the replay confirms it (tracekit.whatif.savings keeps those whose predicted saving
    is at least CONFIRM_MIN_SAVED of the step, and drops the rest)."""
    if _capture_advice(report) is not None:
        return []
    strict, loose = _evidence(report, kernels, True), _evidence(report, kernels, False)
    return [a for rule in CONFIRMED_BY_REPLAY if not rule(strict) for a in rule(loose)]


def _evidence(report: Report, kernels: Optional[Iterable[KernelStat]], strict: bool) -> Evidence:
    ks = tuple(kernels) if kernels is not None else report.kernel_stats
    steps = sum(d.steps for d in report.devices)
    total = float(sum(s.dur_ns for d in report.devices for s in d.samples))
    return Evidence(report, ks, steps, total, strict)


def _fraction(report: Report, causes: tuple[str, ...]) -> float:
    total = sum(s.dur_ns for d in report.devices for s in d.samples)
    idle = sum(s.idle_ns.get(c, 0) for d in report.devices for s in d.samples for c in causes)
    return idle / total if total else 0.0


# -- the input pipeline -----------------------------------------------------------------------------------
def _unprofiled_loader(report: Report, ip: InputPipeline) -> Advice:
    """The loader advice from the unprofiled steps' waits: the workers that keep up with the step
    without its wait (the pool makes one batch per step, so W × step / (step − wait) of them), capped at
    the host's CPUs less one."""
    cfg = ip.loader or {}
    workers = cfg.get("num_workers") if cfg.get("dataloader") else None
    setting = (
        f" ({workers} workers, prefetch_factor {cfg.get('prefetch_factor')})" if workers is not None else ""
    )
    evidence = (
        f"without the profiler the steps wait {ip.unprofiled_wait_mean_ms:.3g} ms of "
        f"{ip.unprofiled_step_mean_ms:.3g} ms for their batch ({ip.unprofiled_wait_share:.0%}){setting}"
    )
    if ip.hidden:
        evidence += f"; the profiled window shows {ip.profiled_wait_share:.0%}"
    step, wait = ip.unprofiled_step_mean_ms, ip.unprofiled_wait_mean_ms
    consumer = max(step - wait, 1e-9)
    cpus = ((report.capture.get("host") or {}) if isinstance(report.capture.get("host"), dict) else {}).get(
        "cpu_count"
    )
    note = (
        "persistent_workers and prefetch_factor make no batch faster (the first saves the workers' start "
        "once per epoch, the second hides a burst): neither helps a loader slower than the step"
    )
    if workers == 0:
        n = max(1, math.ceil(wait / consumer - 1e-9))
        msg = "The steps wait for their batch, loaded in the training process: load it in workers."
    elif workers is not None:
        # steady state: the pool makes a batch per step (period = step); to keep up with the consumer
        # it needs workers × step / consumer of them
        n = max(workers + 1, math.ceil(workers * step / consumer - 1e-9))
        msg = "The steps wait for their batch: more DataLoader workers, or a cheaper __getitem__."
    else:
        n = None
        msg = "The steps wait for their batch: more DataLoader workers, or a cheaper __getitem__."
    if n is not None and isinstance(cpus, int) and cpus > 1:
        if n > cpus - 1:
            note += f"; {n} workers wanted, the host has {cpus} CPUs (the trainer keeps one)"
        n = min(n, cpus - 1)
    knob = f"DataLoader(num_workers={n})" if n is not None else "DataLoader(num_workers=...)"
    flags: tuple[str, ...] = ("--loader-workers", str(n)) if n is not None else ("--set", "dataloader=0")
    if n is not None:
        note += f"; {WORKERS_BOUND_NOTE}"
    return Advice(
        "dataloader_workers",
        msg,
        evidence,
        "dataloader",
        ip.unprofiled_wait_share,
        "unprofiled",
        knob=knob,
        whatif=flags,
        prediction_note=note,
        bound=True,
    )


def _capture_advice(report: Report) -> Advice | None:
    """A trace whose steps are mostly a CUDA/HIP graph capture: profile the replay instead."""
    capture = max(report.graph_captures, key=lambda g: g.share_of_steps, default=None)
    if capture is None or capture.share_of_steps < CAPTURE_MIN_FRACTION:
        return None
    return Advice(
        "graph_capture",
        "This trace records a graph capture, not its replay: the device idles while the kernels "
        "are recorded. Profile steps that replay the graph to see where their time goes.",
        f"rank {capture.rank}: {capture.share_of_steps:.0%} of the steps inside {capture.call} … "
        f"EndCapture and the instantiate ({capture.launches} kernel launches recorded, not run)",
        None,
        capture.share_of_steps,
        "profiled",
    )


def _steady_advice(st: SteadyState) -> Advice:
    """The input pipeline, or the CPUs it shares with the trainer, sets the steady-state step
    (tracekit.analysis.loader.steady_state): its share is what it adds to the training step alone, of
    that steady step."""
    consumer = st.consumer_ms or 0.0
    share = min(max((st.step_ms - consumer) / st.step_ms, 0.0), 1.0) if st.step_ms > 0 else 0.0
    per_batch = f"{st.production_ms:.3g} ms per batch ({st.worker_cpu_ms:.3g} ms CPU)"
    at = "at least " if st.bound == BOUND_CPUS else "~"  # the CPUs' floor shares them perfectly
    step = f"without the profiler the loop runs at {at}{st.step_ms:.3g} ms/step"
    alone = f", the training step alone {consumer:.3g} ms ({st.consumer_basis})" if st.consumer_ms else ""
    if st.bound == BOUND_CPUS:
        return Advice(
            "cpu_oversubscription",
            f"The DataLoader's {st.workers} workers and the training process ({st.trainer_threads} threads) "
            f"compete for {st.usable_cpus} CPUs: {step}.",
            f"a step needs {st.batches_per_step * st.worker_cpu_ms:.3g} ms of worker CPU and "
            f"{st.trainer_cpu_ms:.3g} ms of training CPU ({st.trainer_cpu_basis}): "
            f"{st.cpu_floor_ms:.3g} ms on {st.usable_cpus} CPUs; the workers take {per_batch}{alone}",
            "dataloader",
            share,
            "unprofiled",
            knob="cheaper samples, fewer training threads (torch.set_num_threads), or more CPUs",
            prediction_note="how the CPUs are shared between the workers and the trainer's threads is not "
            "in a trace: not predicted",
        )
    need = math.ceil(st.batches_per_step * st.production_ms / consumer - 1e-9) if consumer > 0 else None
    note = (
        "the workers' pace from their own timings (a batch's production time with a CPU of its own); "
        "prefetch_factor hides a burst, never a loader slower than the step"
    )
    if need is not None and st.usable_cpus and need > st.usable_cpus - 1:
        note += f"; {need} workers wanted, the host has {st.usable_cpus} CPUs (the trainer keeps one)"
        need = max(st.usable_cpus - 1, 1)
    if need is not None and need <= st.workers:
        need = None
    if need is not None:
        note += f"; {WORKERS_BOUND_NOTE}"
    return Advice(
        "dataloader_workers",
        f"The input pipeline cannot keep up: {step}. More DataLoader workers, or a cheaper __getitem__.",
        f"{st.workers} workers take {per_batch}: one batch every {st.pool_ms:.3g} ms{alone} "
        f"({st.batches} batches timed in the workers)",
        "dataloader",
        share,
        "unprofiled",
        knob=f"DataLoader(num_workers={need})" if need else "DataLoader(num_workers=...)",
        whatif=("--loader-workers", str(need)) if need else ("--set", "dataloader=0"),
        prediction_note=note,
        bound=True,
    )


def loader_rule(ev: Evidence) -> list[Advice]:
    """The loader stalls: by its workers' own timings where the capture has them (the steady state), else
    by the unprofiled steps' measured waits where the capture timed them (the profiled window can hide a
    stall: tracekit.analysis.loader), else by the trace's dataloader idle."""
    report = ev.report
    ip: Optional[InputPipeline] = report.input_pipeline
    it = report.dataloader
    if ip is not None and ip.steady is not None and ip.steady.bound != BOUND_TRAINING:
        return [_steady_advice(ip.steady)]
    if ip is not None and ev.fires(ip.unprofiled_wait_share, DATALOADER_MIN_FRACTION):
        return [_unprofiled_loader(report, ip)]
    dl = _fraction(report, ("dataloader",))
    if not ev.fires(dl, DATALOADER_MIN_FRACTION):
        return []
    if it is not None and it.multi_worker is False:
        msg = "DataLoader stalls with a single-process iterator: load in DataLoader workers."
        knob = "DataLoader(num_workers=2, pin_memory=True)"
    else:
        msg = "DataLoader stalls: more DataLoader workers, or a cheaper __getitem__."
        knob = "DataLoader(num_workers=...)"
    kind = it.iterator if it and it.iterator else "unknown iterator"
    evidence = f"the device idles while the host fetches the batch ({kind})"
    per_step = [
        s.idle_ns.get("dataloader", 0) / s.dur_ns for d in report.devices for s in d.samples if s.dur_ns
    ]
    typical = float(np.median(per_step)) if per_step else 0.0
    if typical < dl / 2:  # the replay's savings are of the median step: say where the wait is
        evidence += f"; most of it in a few steps (the median step waits {typical:.0%})"
    return [
        Advice(
            "dataloader_workers",
            msg,
            evidence,
            "dataloader",
            dl,
            "profiled",
            knob=knob,
            whatif=("--set", "dataloader=0"),
            prediction_note="the saving if loading took no time at all: how many workers reach it, the "
            "capture's timed fetches tell (tracekit capture)",
            bound=True,
        )
    ]


# -- copies, layout, precision ------------------------------------------------------------------------------
def pageable_rule(ev: Evidence) -> list[Advice]:
    """Host↔device copies from pageable memory: the copy call blocks the host (it waits for the stream,
    then stages the data), so the host cannot run ahead of the device."""
    dev_ms, api_ms, count, _ = ev.kernel_ms(PAGEABLE_RE)
    # torch's copy_ with non_blocking=False syncs its stream after the copy: the device idles there too
    # (the copy calls themselves are sync sources as well, blocking copies: their time is api_ms).
    # The share: the copies' device time or the time they block, whichever is longer
    synced = sum(
        s.idle_ms_per_step
        for s in ev.report.sync_sources
        if s.op in COPY_OPS and call_kind(s.call) not in (CallKind.COPY, CallKind.COPY_ASYNC)
    )
    share = ev.share(max(dev_ms, api_ms + synced))
    if not count or not ev.fires(share, PAGEABLE_MIN_FRACTION):
        return []
    return [
        Advice(
            "pageable_copy",
            "Copies from pageable memory block the host: pin the host buffers and copy without blocking.",
            f"{count:.3g} pageable copies per step, {dev_ms:.3f} ms/step on the device; the host blocked "
            f"{api_ms:.3f} ms/step in their calls, the device idled {synced:.3f} ms/step in the copies' "
            "stream syncs",
            "sync",
            share,
            "profiled",
            knob="DataLoader(..., pin_memory=True) (or tensor.pin_memory()); .to(device, non_blocking=True)",
            whatif=("--pin-memory",),
            prediction_note="each copy takes a pinned copy's time, 1 µs + bytes at 55 GB/s (the pinned "
            "copies of the H200 and H100 hosts): a host whose pinned bandwidth differs moves the device's "
            "share of the saving",
        )
    ]


def layout_rule(ev: Evidence) -> list[Advice]:
    """The device work channels_last changes on NCHW tensors: cuDNN's layout conversions around its
    convolutions, batch norm's NCHW kernels (cuDNN's, torch's own for 16-bit inputs) and torch's own
    NCHW depthwise convolutions; its share is their time together (on EfficientNet-B0 the conversions were
    0.8 % of the step and channels_last saved 41 %: docs/results/advice.md)."""
    dev_ms, _, count, _ = ev.kernel_ms(LAYOUT_RE)
    bn_ms, _, bn_n, _ = ev.kernel_ms(f"{NCHW_BATCHNORM_RE}|{TORCH_NCHW_BATCHNORM_RE}")
    dw_ms, _, dw_n, _ = ev.kernel_ms(TORCH_NCHW_DEPTHWISE_RE)
    share = ev.share(dev_ms + bn_ms + dw_ms)
    if not (count or bn_n or dw_n) or not ev.fires(share, LAYOUT_MIN_FRACTION):
        return []
    evidence = (
        f"{count:.3g} layout conversions (nchwToNhwc / nhwcToNchw) per step, {dev_ms:.3f} ms/step on the "
        "device"
    )
    note = (
        "the conversions' device time and their launch calls go (tracekit.whatif.knobs); pooling and "
        "elementwise kernels keep their time"
    )
    if bn_n:
        evidence += f"; NCHW batch norm (cuDNN's or torch's) {bn_ms:.3f} ms/step"
        note += (
            "; channels_last also moves batch norm from its NCHW kernels to channels_last ones: the replay "
            "times them from the ops' input shapes (record_shapes=True: 3 passes forward, 5 backward at the "
            "trace's elementwise bandwidth; cuDNN's took 8-30 % longer on the H100 pairs of "
            "docs/results/advice.md; torch's own, which 16-bit inputs run, at "
            f"{TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES:g}x that, measured 1.8-2.4x); a trace without "
            "shapes keeps their NCHW time, and on a step the device paces the saving is then likely larger"
        )
    if dw_n:
        evidence += f"; torch's NCHW depthwise convolutions {dw_ms:.3f} ms/step"
        note += (
            "; channels_last also hands torch's NCHW depthwise convolutions (conv_depthwise2d) to cuDNN's "
            "kernels (24.1 -> 2.6 ms per step on EfficientNet-B0): the replay times those as two passes "
            "over their tensors at the trace's elementwise bandwidth (3.4 ms there), from the ops' shapes"
        )
    return [
        Advice(
            "layout",
            "NCHW tensors take slow paths (layout conversions, NCHW batch norm or depthwise kernels): keep "
            "model and input channels_last.",
            evidence,
            None,
            share,
            "profiled",
            knob="model.to(memory_format=torch.channels_last); x = x.to(memory_format=torch.channels_last)",
            whatif=("--channels-last",),
            prediction_note=note,
        )
    ]


def _bf16_device(report: Report) -> Optional[bool]:
    """Whether the device has bf16 tensor cores: its compute capability (manifest), else its name."""
    dev = report.capture.get("device")
    cap = dev.get("capability") if isinstance(dev, dict) else None
    try:
        if cap is not None:
            return float(cap) >= BF16_MIN_CAPABILITY
    except (TypeError, ValueError):
        pass
    names = [d.name for d in report.devices if d.name]
    if isinstance(dev, dict) and dev.get("name"):
        names.append(str(dev["name"]))
    elif isinstance(dev, str):
        names.append(dev)
    if not names:
        return None
    return any(_BF16_NAMES.search(n) for n in names)


def precision_rules(ev: Evidence) -> list[Advice]:
    """fp32 and TF32 GEMMs and convolutions on a GPU with bf16 tensor cores: autocast to bf16; fp32 math
    on the CUDA cores: TF32 first (one line)."""
    report = ev.report
    if not report.devices or _bf16_device(report) is False:
        return []
    tf_ms, _, tf_n, _ = ev.kernel_ms(TF32_RE)
    fp_ms, _, fp_n, _ = ev.kernel_ms(AUTOCAST_FP32_RE)  # with cuDNN's fp32 direct convolutions
    out = []
    share = ev.share(tf_ms + fp_ms)
    if tf_n + fp_n and ev.fires(share, PRECISION_MIN_FRACTION):
        evidence = (
            f"fp32 GEMMs and convolutions {fp_ms:.3f} ms/step ({fp_n:.0f} kernels), TF32 ones "
            f"{tf_ms:.3f} ms/step ({tf_n:.0f} kernels) on the device"
        )
        note = (
            f"GEMM and convolution time x the dense peaks' ratio (bf16/TF32 {BF16_OVER_TF32:g}, bf16/fp32 "
            f"{BF16_OVER_FP32:g}): the bound for compute-bound kernels, a matrix product no faster than "
            "moving its operands in 16 bits (where the trace has shapes); autocast's casts added to the host "
            "(a weight cast per GEMM or convolution op, a gradient cast per backward node, priced as the "
            "trace's own one-kernel ops: tracekit.whatif.knobs); torch's fp32 elementwise kernels on 4-D "
            "activations at half the bytes (where the trace has shapes); the other kernels keep their time"
        )
        bn_ms, _, bn_n, _ = ev.kernel_ms(CUDNN_BATCHNORM_RE)
        if bn_n:
            evidence += f"; cuDNN's batch norm {bn_ms:.3f} ms/step"
            note += (
                "; batch norm leaves cuDNN under bf16 (torch runs it in its own kernels): its NCHW kernels x "
                f"{BF16_BATCHNORM_OVER_CUDNN_NCHW:g} (1.21-1.36x on nine convnets on the H100 pairs of "
                "docs/results/advice.md), its NHWC ones kept (the same time there)"
            )
        hp = _fraction(report, GRAPHED_AWAY)  # the host's own work: what a graph replay no longer spends
        if hp >= HOST_BOUND_MIN_FRACTION:
            evidence += f"; the device idles {hp:.0%} of the step in {', '.join(GRAPHED_AWAY)} time"
            note += (
                "; on a step the host paces, autocast's host work can take the whole saving: the casts are "
                "in the figure"
            )
        out.append(
            Advice(
                "precision",
                "fp32 GEMMs and convolutions on a GPU with bf16 tensor cores: run them in bf16 (autocast).",
                evidence,
                None,
                share,
                "profiled",
                knob="with torch.autocast('cuda', dtype=torch.bfloat16): loss = loss_fn(model(x), y)",
                whatif=("--autocast", "bf16"),
                prediction_note=note,
            )
        )
    fp_ms, _, fp_n, _ = ev.kernel_ms(FP32_RE)  # what TF32 changes: not the direct convolutions
    fshare = ev.share(fp_ms)
    if fp_n and ev.fires(fshare, PRECISION_MIN_FRACTION):
        out.append(
            Advice(
                "tf32",
                "fp32 matmuls run on the CUDA cores: allow TF32 (tensor cores, fp32 range, 10-bit mantissa).",
                f"fp32 GEMMs and convolutions without tensor cores {fp_ms:.3f} ms/step ({fp_n:.0f} kernels) "
                "on the device",
                None,
                fshare,
                "profiled",
                knob="torch.set_float32_matmul_precision('high'); torch.backends.cudnn.allow_tf32 = True",
                whatif=("--kernels", f"{FP32_RE}={TF32_OVER_FP32:g}"),
                prediction_note=f"their time x the dense peaks' ratio TF32/fp32 {TF32_OVER_FP32:g}",
            )
        )
    return out


# -- the host ---------------------------------------------------------------------------------------------
def sync_rule(ev: Evidence) -> list[Advice]:
    report = ev.report
    sy = _fraction(report, ("sync",))
    if not report.sync_sources or not ev.fires(sy, SYNC_MIN_FRACTION):
        return []
    top = report.sync_sources[0]
    where = top.source or top.op or top.call
    if top.function and top.source:
        where = f"{top.source} ({top.function})"
    if top.op in COPY_OPS:
        msg = f"A blocking copy ({top.op}) at {where} waits for the GPU: copy without blocking."
        knob = ".to(device, non_blocking=True) from pinned memory (DataLoader(pin_memory=True))"
        flags: tuple[str, ...] = ("--set", "sync=0")
        note = "every host wait in the steps removed (the calls keep their own overhead)"
    elif top.op in SYNC_OPS:
        msg = (
            f"A host read of a device value (.item()) at {where} drains the GPU queue: remove it or defer it."
        )
        knob = f"remove the .item() at {where}, or read the value every N steps"
        flags = ("--ops", f"{SYNC_OPS_RE}=0")
        note = "every .item() in the steps removed (the trace names ops, not lines)"
    else:
        msg = f"Host synchronisation ({top.call}) at {where} drains the GPU queue: remove it or defer it."
        knob = f"remove the {top.call} at {where}"
        flags = ("--set", "sync=0")
        note = "every host wait in the steps removed (the calls keep their own overhead)"
    return [
        Advice(
            "sync_drain",
            msg,
            f"the device idles in host syncs; top source {top.idle_ms_per_step:.3f} ms/step, {top.gaps} gaps",
            "sync",
            sy,
            "profiled",
            knob=knob,
            whatif=flags,
            prediction_note=note,
        )
    ]


def graphs_rule(ev: Evidence) -> list[Advice]:
    report = ev.report
    hb = _fraction(report, GRAPHED_AWAY)
    ks = [k for k in ev.kernels if k.kernel.count]
    counts = [k.kernel.count for k in ks]
    graphed = sum(k.graph_launched for k in ks)
    if not ks or not ev.fires(hb, HOST_BOUND_MIN_FRACTION) or graphed >= GRAPHED_MAX_FRACTION * sum(counts):
        return []
    med_us = float(np.average([k.kernel.median_ns for k in ks], weights=counts)) / 1e3
    if ev.strict and med_us > TINY_KERNEL_MAX_US:
        return []
    if report.compiled is not None:
        msg = (
            "Compiled, but the host still launches kernel by kernel and cannot keep up: "
            "torch.compile(mode='reduce-overhead') replays the step as CUDA graphs."
        )
        knob = "torch.compile(model, mode='reduce-overhead')"
    else:
        msg = "Many tiny kernels and the host cannot keep up: capture the step as a CUDA graph."
        knob = (
            "torch.cuda.graph() around the whole step (static inputs); torch.compile(mode='reduce-overhead')"
        )
    return [
        Advice(
            "cuda_graphs",
            msg,
            f"the device idles in {', '.join(GRAPHED_AWAY)} time; typical kernel {med_us:.1f} µs",
            "launch",
            hb,
            "profiled",
            knob=knob,
            whatif=("--cuda-graphs",),
            prediction_note="the same kernels launched as one graph per step; torch.compile's fusion is not "
            "predictable from an eager trace (capture it and `tracekit diff`)",
        )
    ]


def _regions(report: Report, pattern: str) -> list[OpStat]:
    rx = re.compile(pattern)
    return [o for o in report.region_stats if rx.search(o.name)]


def _ms_per_step(ops: Iterable[OpStat]) -> float:
    ops = list(ops)
    if not ops:
        return 0.0
    n = max(len(ops[0].steps), 1)
    return sum(sum(o.ns_per_step) for o in ops) / n / 1e6


def _calls_per_step(report: Report, names: tuple[str, ...]) -> float:
    hit = [o for o in report.op_stats if o.name in names]
    return sum(o.calls for o in hit) / max(len(hit[0].steps), 1) if hit else 0.0


def _host_share(ev: Evidence, ms: float) -> float:
    """A host region's time per step over the step (the device's, which lasts at least its host window;
    the host window's on a CPU-only capture)."""
    if ev.device_steps:
        return ev.share(ms)
    steps = [h.dur_ns for h in ev.report.host.steps]
    step = float(np.mean(steps)) / 1e6 if steps else 0.0
    return min(ms / step, 1.0) if step else 0.0


def zero_grad_rule(ev: Evidence) -> list[Advice]:
    """zero_grad(set_to_none=False) fills every gradient with zeros (a kernel per parameter, or a foreach
    kernel) where setting them to None costs nothing."""
    report = ev.report
    regions = _regions(report, ZERO_GRAD_REGION)
    zeros = _calls_per_step(report, ("aten::zero_", "aten::_foreach_zero_"))
    ms = _ms_per_step(regions)
    share = _host_share(ev, ms)
    if not regions or not zeros or not ev.fires(share, ZERO_GRAD_MIN_FRACTION):
        return []
    return [
        Advice(
            "zero_grad",
            "zero_grad fills the gradients with zeros: set them to None instead.",
            f"{regions[0].name} {ms:.3f} ms/step on the host, {zeros:.3g} zero_ calls per step",
            "framework",
            share,
            "profiled",
            knob="optimizer.zero_grad(set_to_none=True)  # torch >= 2.0's default",
            whatif=("--ops", rf"{ZERO_GRAD_REGION}=0"),
            prediction_note="zero_grad's host time and the fills it launches removed; the backward's "
            "accumulation into the zeroed gradients (an add per parameter) stays: a lower bound",
        )
    ]


def optimizer_rule(ev: Evidence) -> list[Advice]:
    """An optimizer step that launches its kernels parameter by parameter (no foreach or fused kernel)."""
    report = ev.report
    regions = _regions(report, OPTIMIZER_STEP_REGION)
    if not regions:
        return []
    if any("_foreach_" in o.name or "_fused_" in o.name for o in report.op_stats):
        return []
    ms = _ms_per_step(regions)
    share = _host_share(ev, ms)
    if not ev.fires(share, OPTIMIZER_MIN_FRACTION):
        return []
    m = re.search(OPTIMIZER_STEP_REGION, regions[0].name)
    name = m.group(1) if m else "Optimizer"
    fused = name in ("Adam", "AdamW", "SGD", "Adagrad")
    knob = f"torch.optim.{name}(..., fused=True)" if fused else f"torch.optim.{name}(..., foreach=True)"
    return [
        Advice(
            "optimizer_loop",
            f"The {name} step launches its kernels parameter by parameter: use its foreach or fused form.",
            f"{regions[0].name} {ms:.3f} ms/step on the host, no foreach or fused kernel",
            "framework",
            share,
            "profiled",
            knob=knob,
            whatif=("--ops", r"^Optimizer\.step#=0"),
            prediction_note="an upper bound: the whole optimizer step removed (its foreach / fused kernels "
            "are not in this trace)",
            bound=True,
        )
    ]


def straggler_rule(ev: Evidence) -> list[Advice]:
    """One advice per straggler rank: the devices whose collective wait is at least
    COLLECTIVE_MIN_FRACTION of their step time, grouped by the rank they wait for."""
    report = ev.report
    waiting: dict[int, list[tuple[float, int, int]]] = {}
    for d in report.devices:
        total = sum(s.dur_ns for s in d.samples)
        wait = sum(s.collective_wait_ns for s in d.samples)
        if total and ev.fires(wait / total, COLLECTIVE_MIN_FRACTION) and d.straggler_rank is not None:
            waiting.setdefault(d.straggler_rank, []).append((wait / total, d.rank, d.device))
    out = []
    note = (
        "not predicted here: what balancing saves depends on what makes the rank slow; "
        "`tracekit whatif --rank-host R=F` replays that rank's host F times as long"
    )
    for straggler, devs in sorted(waiting.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(devs) == 1:
            frac, rank, device = devs[0]
            out.append(
                Advice(
                    "straggler",
                    f"Rank {rank} waits for rank {straggler} in collectives: balance its work "
                    "(data, compute, placement).",
                    f"collective wait on rank {rank} device {device}",
                    None,
                    frac,
                    "profiled",
                    knob=f"find what makes rank {straggler} slower (tracekit analyze --rank {straggler})",
                    prediction_note=note,
                )
            )
            continue
        fracs = [f for f, _, _ in devs]
        top = max(devs)
        ranks = sorted({r for _, r, _ in devs})
        out.append(
            Advice(
                "straggler",
                f"{len(ranks)} ranks ({_ranges(ranks)}) wait for rank {straggler} in collectives: "
                "balance its work (data, compute, placement).",
                f"collective wait median {float(np.median(fracs)):.0%} of step time on {len(devs)} "
                f"devices, max {top[0]:.0%} on rank {top[1]} device {top[2]}",
                None,
                float(np.median(fracs)),
                "profiled",
                knob=f"find what makes rank {straggler} slower (tracekit analyze --rank {straggler})",
                prediction_note=note,
            )
        )
    return out


def exposed_comm_rule(ev: Evidence) -> list[Advice]:
    """Communication that the ranks' compute does not hide (tracekit.analysis.comm): the exposed
    transfer, median over ranks, as a share of each rank's step; its waits for late ranks are the
    straggler rule's. The most exposed bucket is named: DDP's last bucket (the first layers' gradients,
    ready last) cannot overlap the backward."""
    comm = ev.report.communication
    ranks = [r for r in (comm.ranks if comm is not None else ()) if r.steps]
    if len(ranks) < 2:
        return []
    # per rank: its step and exposed transfer, ms per step
    per_rank = [(r.ms_per_step("step_ns"), r.ms_per_step("exposed_transfer_ns")) for r in ranks]
    share = float(np.median([min(e / st, 1.0) if st > 0 else 0.0 for st, e in per_rank]))
    if not ev.fires(share, EXPOSED_COMM_MIN_FRACTION):
        return []
    step = float(np.median([st for st, _ in per_rank]))
    exposed = float(np.median([e for _, e in per_rank]))
    cpu = all(r.device < 0 for r in ranks)
    # parameters gathered each step: a sharded job (FSDP, ZeRO), whose knobs are its prefetching; else
    # gradients all-reduced: DDP's buckets; else (point-to-point, all-to-all) the generic knob
    names = [b.name for r in ranks for b in r.buckets]
    if any(ALL_GATHER_RE.search(n) for n in names):
        knob = FSDP_KNOB
    elif any(ALL_REDUCE_RE.search(n) for n in names):
        knob = DDP_KNOB
    else:
        knob = COMM_KNOB
    evidence = (
        f"communication exposed (in flight while the {'step thread' if cpu else 'device'} computed nothing, "
        f"waits for late ranks left out) {exposed:.3f} ms of a {step:.3f} ms step, median over {len(ranks)} "
        "ranks"
    )
    evidence += _most_exposed_bucket(ranks)
    note = (
        "the saving if the communication took no time (`--comm 0`): at most what hiding it behind "
        "compute saves"
    )
    if cpu:
        note = (
            "the saving if the communication took no time (`--comm 0`); not a bound on a CPU backend: "
            "communicating there also slows the compute around it, which the trace shows as compute "
            "(docs/results/ddp_cpu.md: the communication-free step measured shorter than this replay's)"
        )
    return [
        Advice(
            "exposed_comm",
            "Communication is not hidden behind compute: start it earlier, or communicate less often.",
            evidence,
            None,
            share,
            "profiled",
            knob=knob,
            whatif=("--comm", "0"),
            prediction_note=note,
            bound=not cpu,
        )
    ]


def _most_exposed_bucket(ranks: Sequence[Any]) -> str:
    """The evidence's "; most exposed: ..." of the ranks' buckets ("" where none): the bucket whose exposed
    time beyond its wait for a late rank (at most its transfer) is largest, medians over ranks."""
    by_bucket: dict[tuple[str, int], list] = {}
    for r in ranks:
        for b in r.buckets:
            by_bucket.setdefault((b.name, b.index), []).append(b)
    if not by_bucket:
        return ""
    bare = {
        key: float(np.median([min(max(b.exposed_ms - b.wait_ms, 0.0), b.transfer_ms) for b in bs]))
        for key, bs in by_bucket.items()
    }
    (name, index), bs = max(by_bucket.items(), key=lambda kv: bare[kv[0]])
    elements = [b.elements for b in bs if b.elements]
    return (
        f"; most exposed: {name} #{index} of {len(by_bucket)} per step, {bare[(name, index)]:.3f} ms of its "
        f"{float(np.median([b.transfer_ms for b in bs])):.3f} ms transfer"
        + (f" ({int(np.median(elements)):,} elements)" if elements else "")
    )


def cpu_rule(ev: Evidence) -> list[Advice]:
    report = ev.report
    if report.devices or not report.host.steps:
        return []
    total = sum(h.dur_ns for h in report.host.steps)
    gaps = sum(h.dispatch_gap_ns for h in report.host.steps)
    if not total or not ev.fires(gaps / total, CPU_DISPATCH_MIN_FRACTION):
        return []
    return [
        Advice(
            "interpreter",
            "The Python interpreter between framework calls dominates the step: batch small "
            "operations, or try torch.compile.",
            "host dispatch gaps (Python between framework calls)",
            "interpreter",
            gaps / total,
            "profiled",
            knob="fewer, larger tensor operations per step; torch.compile(model)",
            prediction_note="not predicted: there is no device to replay the step against",
        )
    ]


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] → '0-2, 5, 7-8'."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts)


# The rules, each a function of the evidence (their order only breaks ties of share).
RULES: tuple[Callable[[Evidence], list[Advice]], ...] = (
    loader_rule,
    pageable_rule,
    layout_rule,
    precision_rules,
    sync_rule,
    graphs_rule,
    zero_grad_rule,
    optimizer_rule,
    straggler_rule,
    exposed_comm_rule,
    cpu_rule,
)

# Rules whose evidence undercounts what their knob saves. A host sync drains the device's queue: after
# it returns, the device also idles while the host launches the next work, idle time attributed to
# launch and framework, so the idle in syncs can be a small share of a step the sync costs far more of
# (docs/results/advice.md, the sync pairs: 0.6-1.2 % of the step in syncs, 13-14 % saved). Under its
# threshold such a rule's advice is a candidate (`candidates`) that the replay confirms or drops.
CONFIRMED_BY_REPLAY: tuple[Callable[[Evidence], list[Advice]], ...] = (sync_rule,)
CONFIRM_MIN_SAVED = 0.05  # a candidate is advice where its replay saves ≥ 5 % of the unprofiled step


def command(advice: Advice, capture: Any = "CAPTURE") -> Optional[str]:
    """The `tracekit whatif` command line that reproduces the advice's prediction (None: not predictable)."""
    import shlex

    if not advice.whatif:
        return None
    return " ".join(
        ["tracekit", "whatif", shlex.quote(str(capture)), *(shlex.quote(f) for f in advice.whatif)]
    )


__all__ = ["advise", "candidates", "command", "RULES", "CONFIRMED_BY_REPLAY", "CONFIRM_MIN_SAVED", "Evidence"]
