"""Two knobs the replay turns as a whole, with what each does to the host as well as to the device
(`--channels-last`, `--autocast bf16`): the advice's layout and precision rules replay them.

A knob changes device activities (a factor per activity, as --kernels does), the host segments of the
calls and ops it removes (a factor per edge, as --ops does), and for the host work it adds, ns added to the
first host segment of each op it adds work to, with the profiler's recorded events that work would carry
(so that the unprofiled replay takes the profiler's cost off it as off the trace's own work: DESIGN.md
"Unprofiled").

- `--channels-last`: cuDNN's layout conversions around its convolutions on NCHW tensors (nchwToNhwc /
  nhwcToNchw, advice.LAYOUT_RE) go, their launch calls with them. Batch norm moves from its NCHW kernels
  to channels_last ones (cuDNN's NHWC kernels in fp32, torch's own for 16-bit inputs), which an NCHW
  trace does not hold (faster on the H100 pairs of docs/results/advice.md, by a ratio that differed
  between ResNet-18 and ResNet-50): where the trace has the ops' input shapes (record_shapes=True), each
  NCHW batch norm takes what its channels_last kernels would, passes over its input at the bandwidth the
  trace's own elementwise kernels reach (_nhwc_batch_norm), else it keeps its time; torch's own NCHW
  depthwise convolutions (which channels_last hands to cuDNN) the same way, two passes each. Torch's
  pooling and elementwise kernels take their channels_last paths, not in the figure. The result's notes
  say which.
- `--autocast bf16|fp16`: the GEMMs and convolutions in 16 bits (fp32 and TF32 kernels x the dense
  tensor-core peaks' ratios, advice.BF16_OVER_TF32 / BF16_OVER_FP32; cuDNN's fp32 direct grouped
  convolutions count as fp32, advice.AUTOCAST_FP32_RE), and autocast's own host work: each
  GEMM or convolution op that ran fp32 or TF32 kernels (by their names: a GEMM already in 16 bits gets
  no second cast) casts its weight to 16 bits every step (aten::to -> _to_copy -> empty_strided +
  copy_, one kernel), and the backward casts its gradient back (a ToCopyBackward0 node, one kernel).
  Neither is in an fp32 trace, so each is priced from the trace's own ops of its kind: the forward cast
  as CAST_EVENTS recorded events at the median ns per event of the top-level forward ops that launch
  exactly one kernel, the backward cast as the median backward node that launches one. Measured on the
  H100 pairs (ResNet-18, ResNet-50, profiled medians, docs/results/advice/host_paths.py): a
  convolution's forward grew by 43 and 55 µs under autocast (its cast and autocast's second dispatch;
  the model: 37 and 59), a backward cast node took 44 and 50 µs (the model: 45 and 43). On the device,
  under bf16 batch norm leaves cuDNN for torch's own kernels (cuDNN's NCHW kernels x
  advice.BF16_BATCHNORM_OVER_CUDNN_NCHW; NHWC ones keep their time), and torch's fp32 elementwise
  kernels and device-to-device copies on 4-D activations (a convolutional network's, from its 16-bit
  convolutions) move half the bytes (HALF_BYTES), where the trace has the ops' shapes. Checked against
  the kernels B ran on 23 pairs of nine batch-norm convnets (docs/results/advice/device_model.py
  --summary): the device's step within −8.1 to +10.2 %, where the peaks' ratio alone gave −12.9 to
  +29.3 % (ConvNeXt-T, without batch norm: +28 %). A matrix product (aten::mm, addmm, bmm, baddbmm with
  its shapes) is never faster than moving its operands and result in 16 bits at that bandwidth
  (_autocast_gemm_floor: a thin product or a batch of small ones is bound by memory, not the peaks).
  Left out, said in the notes: the casts' kernels (a read of each weight and a half-size write), the
  layout conversions' 16-bit tensors, kernels that change algorithm in 16 bits (attention, a TF32
  depthwise wgrad) and so gain more than the peaks' ratio, GEMMs that gain less for another reason
  (a dimension no multiple of 8, GPT-2's 50,257-word head: 0.36-0.54x its fp32 time), and elementwise
  work that stays fp32 (a transformer's residual stream: autocast's layer norm returns fp32).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from tracekit.analysis.advice import (
    AUTOCAST_FP32_RE,
    BF16_BATCHNORM_OVER_CUDNN_NCHW,
    BF16_OVER_FP32,
    BF16_OVER_TF32,
    LAYOUT_RE,
    NCHW_BATCHNORM_RE,
    TF32_RE,
    TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES,
    TORCH_NCHW_BATCHNORM_RE,
    TORCH_NCHW_DEPTHWISE_RE,
)
from tracekit.analysis.causes import STATE
from tracekit.data import schema as S
from tracekit.whatif.loops import HOST_CLASS

# The ops autocast runs in 16 bits and casts a weight for (outermost match on the forward thread), and
# their backward nodes (autograd::engine::evaluate_function: <node>), where the gradient is cast back.
AUTOCAST_OPS_RE = re.compile(r"^aten::(conv\w*|linear|matmul|mm|addmm|bmm|baddbmm|addbmm|einsum)$")
# the ops whose first input is a convolutional network's activation: convolutions and batch norms
CONV_OPS_RE = re.compile(
    r"^aten::(conv[123]d|convolution|_convolution|cudnn_convolution|batch_norm|cudnn_batch_norm"
    r"|native_batch_norm|_batch_norm_impl_index)$"
)
AUTOCAST_BACKWARD_RE = re.compile(
    r"^autograd::engine::evaluate_function: (Convolution|Cudnn\w*Convolution|Addmm|Mm|Bmm|Baddbmm|Addbmm)"
    r"\w*Backward\d*$"
)
EVALUATE_PREFIX = "autograd::engine::evaluate_function: "
EVALUATE_RE = re.compile("^" + re.escape(EVALUATE_PREFIX))
AUTOCAST_DTYPES = ("bf16", "fp16")
# The forward cast's recorded events: aten::to > aten::_to_copy > (aten::empty_strided, aten::copy_ > one
# kernel launch), as the H100 bf16 traces hold it.
CAST_EVENTS = 5
# ... and the activations of a convolutional network (4-D, from the 16-bit convolutions and batch norm)
# are 16-bit: torch's elementwise kernels on them move half the bytes (ResNet-50: the adds, ReLUs and
# clamps took 0.49-0.50x their fp32 time), and so do the copies in-place activations make of them
# (EfficientNet-B0's SiLU, MobileNetV2's ReLU6: 0.49x). Transformers' 3-D activations keep fp32
# wherever an fp32-autocast op (layer_norm, softmax) or an fp32 residual feeds them (GPT-2's elementwise
# kernels: the same time): kept.
HALF_BYTES = 0.5
OPTIMIZER_RE = re.compile(r"^Optimizer\.")
DTOD_RE = re.compile(r"^Memcpy DtoD")
ACCUMULATE_RE = re.compile(r"AccumulateGrad")


@dataclass(frozen=True)
class KnobFactors:
    """What a knob sets: per device activity factors, per edge factors (empty: none), ns and recorded
    event boundaries added per edge (empty: none), and what the result's notes say of it."""

    act: np.ndarray
    edge: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    add_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    add_cost: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    notes: tuple = ()


class _Texts:
    """A text column of the host frame read row by row through its categorical codes (not converted: a
    trace holds millions of host events, the knobs read a few thousand); None where missing."""

    def __init__(self, col: pd.Series) -> None:
        col = col.astype("category")
        self.codes = col.cat.codes.to_numpy()
        self.cats = np.asarray(col.cat.categories, dtype=object)

    def __getitem__(self, i: int) -> Optional[str]:
        c = self.codes[i]
        return self.cats[c] if c >= 0 else None

    def any(self) -> bool:
        return bool((self.codes >= 0).any())


def _per_name(names, fn) -> np.ndarray:
    """Per row of a name column: fn(name), called once per distinct name (nan for a missing name)."""
    cat = names.astype("category")
    cats = cat.cat.categories.astype(str)
    val = np.array([float(fn(c)) for c in cats] + [np.nan], np.float64)
    codes = cat.cat.codes.to_numpy()
    return val[np.where(codes >= 0, codes, len(cats))]


def _names_match(names, rx: re.Pattern) -> np.ndarray:
    """Per row of a name column: whether the pattern searches true (matched once per distinct name;
    False for a missing name)."""
    return _per_name(names, lambda c: rx.search(c) is not None) == 1.0


def layout_factors(g, host) -> KnobFactors:
    """`--channels-last`: the layout conversions' device time and their launch calls' host time go, and
    NCHW batch norm kernels (cuDNN's, torch's) take what their channels_last ones would
    (`_nhwc_batch_norm`)."""
    act = np.ones(len(g.device), np.float64)
    conv = _names_match(g.device["name"].astype(str), re.compile(LAYOUT_RE))
    act[conv] = 0.0
    bn_f, bn_note = _nhwc_batch_norm(g, host)
    act *= bn_f
    edge = np.ones(g.src.size, np.float64)
    calls = g.launch_calls(host, conv)
    edge[(g.ecls == HOST_CLASS) & g.covered(calls)[g.src]] = 0.0
    notes = [
        f"channels_last: {int(conv.sum())} layout conversions (nchwToNhwc / nhwcToNchw) removed with "
        f"{int(calls.sum())} launch calls; {bn_note}; the other kernels keep their time (pooling and "
        "elementwise kernels take their channels_last paths, not in an NCHW trace)"
    ]
    if not conv.any() and (bn_f == 1.0).all():
        notes = [
            "channels_last: the trace has no layout conversion (nchwToNhwc / nhwcToNchw) and no NCHW "
            "batch norm it can time: nothing changes"
        ]
    return KnobFactors(act, edge, notes=tuple(notes))


# cuDNN's NHWC batch norm moves the tensor this many times (reads and writes of its size): the forward
# (training) reads it for the statistics, then reads it and writes the output; the backward reads input
# and gradient for the reductions, then both again and writes the input's gradient.
BN_FORWARD_PASSES = 3
BN_BACKWARD_PASSES = 5
# Elementwise kernels whose op moves at least this many elements time the device's bandwidth (smaller
# ones are latency-bound); at least ELEMENTWISE_MIN of them, else the batch norm keeps its time.
ELEMENTWISE_MIN_ELEMENTS = 1 << 20
ELEMENTWISE_MIN = 5
ELEMENTWISE_RE = re.compile(r"elementwise_kernel")
# the batch-norm ops whose NCHW kernels the model times, and their passes (cuDNN's, and torch's own, which
# runs 16-bit inputs: its channels_last kernels take TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES x these)
BN_PASSES = {
    "aten::cudnn_batch_norm": BN_FORWARD_PASSES,
    "aten::cudnn_batch_norm_backward": BN_BACKWARD_PASSES,
    "aten::native_batch_norm": BN_FORWARD_PASSES,
    "aten::native_batch_norm_backward": BN_BACKWARD_PASSES,
}


@functools.lru_cache(maxsize=4096)
def _shapes(text: Optional[str]) -> Optional[list]:
    """An op's input shapes (args.Input Dims, JSON text) as a list of lists of ints; None if unreadable."""
    if not isinstance(text, str):
        return None
    try:
        dims = json.loads(text)
    except ValueError:
        return None
    if not isinstance(dims, list) or not dims or not all(isinstance(d, list) for d in dims):
        return None
    return dims


def _input_dims(host) -> Optional[_Texts]:
    """The host frame's `input_dims` (args.Input Dims) for reading row by row; None where the trace has
    no shapes (record_shapes=False, or a capture parsed before the column)."""
    if "input_dims" not in host:
        return None
    dims = _Texts(host["input_dims"])
    return dims if dims.any() else None


class _HostReads:
    """The host frame's text columns the autocast terms read row by row, each converted once, when first
    read (a trace holds millions of host events; a term with nothing to time reads neither)."""

    def __init__(self, host: pd.DataFrame) -> None:
        self.host = host

    @functools.cached_property
    def dims(self) -> Optional[_Texts]:
        return _input_dims(self.host)

    @functools.cached_property
    def names(self) -> _Texts:
        return _Texts(self.host["name"])


def _numel(shape: list) -> int:
    n = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return 0
        n *= d
    return n


def _element_bytes(kernel: str) -> int:
    """The element size a kernel's name says (its template's dtype): 2 for half / bf16, 8 for double,
    else 4 (float)."""
    if re.search(r"BFloat16|bfloat16|Half\b|__half|\bhalf\b|<half", kernel):
        return 2
    if re.search(r"\bdouble\b", kernel):
        return 8
    return 4


def _nhwc_batch_norm(g, host) -> tuple[np.ndarray, str]:
    """(per device activity factor, what the note says) for the NCHW kernels channels_last replaces:
    torch's own NCHW depthwise convolutions (conv_depthwise2d_*: channels_last runs cuDNN's), each at two
    passes over its tensors (the forward: input and output; the backward's: gradient and input) at the
    trace's elementwise bandwidth (EfficientNet-B0: 3.37 ms per step against cuDNN's 2.55, from 21.4), and
    NCHW batch norm (cuDNN's kernels, and torch's own, which run 16-bit inputs):
    each op's NCHW kernels take, together, BN_FORWARD_PASSES (backward: BN_BACKWARD_PASSES) passes over
    its input tensor at the bandwidth the trace's own large elementwise kernels reach, where the op's
    input shapes are in the trace (record_shapes=True); else they keep their time, and the note says so.
    Checked on the H100 traces of docs/results/advice (docs/results/advice/bn_model.py, per profiled
    step): cuDNN's NHWC kernels took 8.5-21 % longer than the model on ResNet-18, ResNet-50 (batch 32 and
    128), ResNeXt-50, RegNetY, MobileNetV3, EfficientNet-B0 and DenseNet-121 (1.50 ms predicted against
    1.77 on ResNet-18), 30 % on MobileNetV2; torch's own channels_last kernels (bf16) 1.8-2.4x the passes'
    time (0.73 against 1.75 on ResNet-18): theirs is the passes' time x
    TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES."""
    f = np.ones(len(g.device), np.float64)
    names = g.device["name"].astype(str)
    bn = _names_match(names, re.compile(f"{NCHW_BATCHNORM_RE}|{TORCH_NCHW_BATCHNORM_RE}"))
    dw = _names_match(names, re.compile(TORCH_NCHW_DEPTHWISE_RE))
    if not bn.any() and not dw.any():
        return f, "no NCHW batch norm or depthwise convolution"
    ops = _ops(g, host, re.compile(r"$^"))
    op_of = _launching_ops(g, host, ops)
    opname = _Texts(host["name"])  # read at a few rows (the batch norms')
    dims = _input_dims(host)
    dur = (g.device["end"] - g.device["ts"]).to_numpy(np.float64)
    elem = _per_name(g.device["name"], _element_bytes)
    if dims is None:
        return f, _BN_KEPT + "the trace has no input shapes (record_shapes=True)"
    timed = _elementwise_gbps(ops, op_of, dims, elem, dur, names, len(host))
    if timed is None:
        return f, _BN_KEPT + "too few large elementwise kernels to time the device's bandwidth"
    gbps, n_ew = timed
    dw_note = _depthwise(f, dw, op_of, dims, elem, dur, names, gbps)
    # each batch-norm op: its NCHW kernels together take its passes over its input at that bandwidth
    by_op: dict = {}
    for k in np.flatnonzero(bn & (op_of >= 0)).tolist():
        by_op.setdefault(int(op_of[k]), []).append(k)
    done = 0
    before = after = 0.0
    for op, ks in by_op.items():
        passes = BN_PASSES.get(str(opname[op]))
        sh = _shapes(dims[op])
        total = float(dur[ks].sum())
        if passes is None or not sh or total <= 0:
            continue
        want = passes * _numel(sh[0]) * elem[ks[0]] / gbps
        if str(opname[op]).startswith("aten::native_batch_norm"):  # torch's own kernels
            want *= TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES
        f[ks] = min(want / total, 1.0)  # never slower than the NCHW kernels it replaces
        done += 1
        before += total
        after += min(want, total)
    if not done:
        kept = _BN_KEPT + "no batch-norm op with its input shapes launched them" if bn.any() else ""
        return f, "; ".join(x for x in (dw_note, kept) if x)
    torch_bn = any(str(opname[op]).startswith("aten::native_batch_norm") for op in by_op)
    return f, (dw_note + "; " if dw_note else "") + (
        f"NCHW batch norm ({done} ops, {before / 1e6:.3f} ms) at its channels_last kernels' time, "
        f"{after / 1e6:.3f} ms: {BN_FORWARD_PASSES} passes forward and {BN_BACKWARD_PASSES} backward over "
        f"each input at the {gbps:.0f} GB/s the trace's {n_ew} large elementwise kernels reach"
        + (
            f" (torch's own batch norm, which 16-bit inputs run: its channels_last kernels at "
            f"{TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES:g}x that, measured 1.8-2.4x on the H100 pairs)"
            if torch_bn
            else ""
        )
    )


def _elementwise_gbps(ops, op_of, dims, elem, dur, names, n_host: int) -> Optional[tuple[float, int]]:
    """(GB/s, how many kernels) the trace's large elementwise kernels reach, each its op's one kernel (an
    op that launches several, batch norm's stats update, moves other tensors than its input): bytes of
    its inputs of the first input's size and its output, over their time; None with too few."""
    single = np.zeros(n_host, bool)
    single[ops.pos[ops.launches == 1]] = True
    moved, took, n_ew = 0.0, 0.0, 0
    for k in np.flatnonzero(_names_match(names, ELEMENTWISE_RE) & (op_of >= 0)).tolist():
        if not single[op_of[k]]:
            continue
        sh = _shapes(dims[op_of[k]])
        if not sh or dur[k] <= 0:
            continue
        n = _numel(sh[0])
        if n < ELEMENTWISE_MIN_ELEMENTS:
            continue
        same = sum(1 for x in sh if x == sh[0])  # the inputs of its size; the output one more pass
        moved += (same + 1) * n * elem[k]
        took += dur[k]
        n_ew += 1
    if n_ew < ELEMENTWISE_MIN or took <= 0:
        return None
    return moved / took, n_ew  # bytes per ns = GB/s


_BN_KEPT = "NCHW batch norm keeps its time (its channels_last kernels were faster on the H100 pairs): "


def _depthwise(f, dw, op_of, dims, elem, dur, names, gbps: float) -> str:
    """Set the factors of torch's NCHW depthwise convolution kernels (`dw`) to what two passes over their
    tensors take at `gbps`: the forward's input and output (as large as the input: stride 1), the
    backward's (convolution_backward: gradient, input) gradient and input. Returns what the note says."""
    before = after = 0.0
    n = 0
    for k in np.flatnonzero(dw & (op_of >= 0)).tolist():
        sh = _shapes(dims[op_of[k]])
        if not sh or dur[k] <= 0:
            continue
        if "forward" in names.iloc[k]:
            moved = 2 * _numel(sh[0]) * elem[k]
        elif len(sh) > 1:
            moved = (_numel(sh[0]) + _numel(sh[1])) * elem[k]
        else:
            continue
        want = moved / gbps
        f[k] = min(want / dur[k], 1.0)
        before += dur[k]
        after += min(want, dur[k])
        n += 1
    if not n:
        return "torch's NCHW depthwise convolutions keep their time (no shapes)" if dw.any() else ""
    return (
        f"torch's NCHW depthwise convolutions ({n} kernels, {before / 1e6:.3f} ms) at cuDNN's channels_last "
        f"kernels' time, {after / 1e6:.3f} ms: two passes over their tensors at {gbps:.0f} GB/s"
    )


@dataclass(frozen=True)
class _Ops:
    """The framework ops (cpu_op) of the host frame, with their nesting: per op its position in `host`,
    its outermost enclosing op's position (itself at the top), whether it lies in a backward node, whether
    an op whose name `mark` searches encloses it, and the launch and other runtime calls and the recorded
    events inside it (itself included)."""

    pos: np.ndarray
    top: np.ndarray
    backward: np.ndarray
    in_marked: np.ndarray
    launches: np.ndarray
    other_calls: np.ndarray
    events: np.ndarray
    owner: np.ndarray  # per host row: a runtime call's innermost enclosing op (its host row), else -1

    def at(self, rows: np.ndarray) -> np.ndarray:
        """Per host row: its index among the ops (`pos` is in host order), -1 for a row that is no op."""
        rows = np.asarray(rows, np.int64)
        if not self.pos.size:
            return np.full(rows.shape, -1, np.int64)
        i = np.minimum(np.searchsorted(self.pos, rows), self.pos.size - 1)
        return np.where(self.pos[i] == rows, i, -1)


def _ops(g, host, mark: re.Pattern) -> _Ops:
    """The ops' nesting, per host thread, without a Python loop over events (a GB trace holds millions):
    the thread's ops and runtime calls sorted by (start, -end), a zero-length one given 1 ns; an event's
    depth is how many before it are still open (its index less the ends at or before its start), its
    parent the last event before it one level up, and the events inside it the block that starts
    before its end."""
    cat = host["cat"].to_numpy()
    is_op = cat == S.CAT_CPU_OP
    is_call = np.isin(cat, (S.CAT_RUNTIME, S.CAT_DRIVER))
    ts_all = host["ts"].to_numpy(np.int64)
    end_all = np.maximum(host["end"].to_numpy(np.int64), ts_all + 1)
    launch_all = host["state"].to_numpy() == STATE["launch"]
    # each distinct name matched once
    is_eval = _names_match(host["name"], EVALUATE_RE) & is_op
    marked_all = _names_match(host["name"], mark) & is_op
    n_host = len(host)
    parent = np.full(n_host, -1, np.int64)
    top_all = np.arange(n_host, dtype=np.int64)
    bwd_all = is_eval.copy()
    inm_all = np.zeros(n_host, bool)
    events_all = np.ones(n_host, np.int64)
    launches_all = np.zeros(n_host, np.int64)
    other_all = np.zeros(n_host, np.int64)
    rows = np.flatnonzero(is_op | is_call)
    thread = (
        host["rank"].to_numpy(np.int64)[rows] * (1 << 42)
        + host["pid"].to_numpy(np.int64)[rows] * (1 << 21)
        + host["tid"].to_numpy(np.int64)[rows]
    )
    order = np.lexsort((-end_all[rows], ts_all[rows], thread))
    rows, thread = rows[order], thread[order]
    cuts = np.flatnonzero(np.diff(thread)) + 1
    for r in np.split(rows, cuts):
        ts, end = ts_all[r], end_all[r]
        depth = np.arange(r.size) - np.searchsorted(np.sort(end), ts, side="right")
        depth = np.maximum(depth, 0)
        # the events inside each: those that start before its end (the block after it, by nesting)
        last = np.searchsorted(ts, end, side="left")
        lc = np.concatenate(([0], np.cumsum(launch_all[r] & is_call[r])))
        oc = np.concatenate(([0], np.cumsum(~launch_all[r] & is_call[r])))
        idx = np.arange(r.size)
        events_all[r] = np.maximum(last - idx, 1)
        launches_all[r] = lc[last] - lc[idx + 1]
        other_all[r] = oc[last] - oc[idx + 1]
        for d in range(1, int(depth.max(initial=0)) + 1):
            here, up = np.flatnonzero(depth == d), np.flatnonzero(depth == d - 1)
            if not here.size or not up.size:
                continue
            k = np.searchsorted(up, here) - 1
            ok = k >= 0
            p, c = r[up[k[ok]]], r[here[ok]]
            parent[c] = p
            top_all[c] = top_all[p]
            bwd_all[c] |= bwd_all[p]
            inm_all[c] = marked_all[p] | inm_all[p]
    pos = np.flatnonzero(is_op)
    owner = np.where(is_call & (parent >= 0), parent, -1)
    owner[owner >= 0] = np.where(is_op[owner[owner >= 0]], owner[owner >= 0], -1)
    return _Ops(
        pos,
        top_all[pos],
        bwd_all[pos],
        inm_all[pos],
        launches_all[pos],
        other_all[pos],
        events_all[pos],
        owner,
    )


def _launching_ops(g, host, ops: _Ops) -> np.ndarray:
    """Per device activity: the host row of the innermost framework op around its launch call, -1 where
    none (no launch record, or a call outside any op)."""
    call_of_node = np.full(g.obs.size, -1, np.int64)
    calls = np.flatnonzero(host["cat"].isin((S.CAT_RUNTIME, S.CAT_DRIVER)).to_numpy())
    call_of_node[g.host_end_node[calls]] = calls
    launch = g.device["launch_node"].to_numpy(np.int64)
    call = np.where(launch >= 0, call_of_node[np.maximum(launch, 0)], -1)
    return np.where(call >= 0, ops.owner[np.maximum(call, 0)], -1)


def _first_segments(g, starts: np.ndarray) -> np.ndarray:
    """Per host event start node: the host segment (edge) that leaves it, -1 where none does."""
    host_edge = np.flatnonzero(g.ecls == HOST_CLASS)
    first = np.full(g.obs.size, -1, np.int64)
    first[g.src[host_edge[::-1]]] = host_edge[::-1]  # the first such edge of a node wins
    return first[starts]


def _price(
    ops: _Ops, dur: np.ndarray, m: np.ndarray, events: Optional[int] = None
) -> Optional[tuple[float, int, int]]:
    """(ns, recorded events, how many ops it is from) of the work the ops `m` select stand for: their
    median, or with `events`, that many events at their median ns per recorded event; None where none."""
    if not m.any():
        return None
    if events is not None:
        return float(np.median(dur[m] / ops.events[m])) * events, events, int(m.sum())
    return float(np.median(dur[m])), int(round(float(np.median(ops.events[m])))), int(m.sum())


def autocast_factors(g, host, dtype: str) -> KnobFactors:
    """`--autocast bf16|fp16`: GEMM and convolution kernels at the 16-bit peaks' ratio, a weight cast
    added at the start of each GEMM/convolution op and a gradient cast at the start of its backward node."""
    act = np.ones(len(g.device), np.float64)
    names = g.device["name"].astype(str)
    tf32 = _names_match(names, re.compile(TF32_RE))
    fp32 = _names_match(names, re.compile(AUTOCAST_FP32_RE))  # with cuDNN's fp32 direct convolutions
    act[tf32] *= BF16_OVER_TF32
    act[fp32] *= BF16_OVER_FP32
    ops = _ops(g, host, AUTOCAST_OPS_RE)
    ts = host["ts"].to_numpy(np.int64)[ops.pos]
    dur = host["end"].to_numpy(np.int64)[ops.pos] - ts
    gemm = _names_match(host["name"], AUTOCAST_OPS_RE)[ops.pos]
    bwd_node = _names_match(host["name"], AUTOCAST_BACKWARD_RE)[ops.pos]
    evaluate = _names_match(host["name"], EVALUATE_RE)[ops.pos]
    is_top = ops.top == ops.pos
    # the outermost GEMM/convolution op of the forward: no GEMM op around it
    # (conv2d > convolution > _convolution > cudnn_convolution: conv2d alone)
    top_gemm = gemm & ~ops.backward & ~ops.in_marked
    # ... and only where the op's tree ran fp32 or TF32 math: a GEMM already in 16 bits (autocast on, a
    # bf16 model) gets no second cast
    op_of = _launching_ops(g, host, ops)
    i32 = ops.at(op_of[(tf32 | fp32) & (op_of >= 0)])
    in32 = np.isin(ops.top, ops.top[i32[i32 >= 0]])
    top_gemm &= in32
    bwd_node = bwd_node & in32
    device_notes = _autocast_device(act, g, host, ops, op_of, tf32 | fp32, names, dtype)
    one_kernel = (ops.launches == 1) & (ops.other_calls == 0)
    fwd_price = _price(ops, dur, is_top & ~ops.backward & one_kernel & ~gemm, CAST_EVENTS)
    bwd_price = _price(
        ops,
        dur,
        evaluate & one_kernel & ~bwd_node,
    )
    add_ns = np.zeros(g.src.size, np.int64)
    add_cost = np.zeros(g.src.size, np.int32)
    notes = []
    added = {}
    for what, m, price in (("forward", top_gemm, fwd_price), ("backward", bwd_node, bwd_price)):
        if not m.any():
            continue
        if price is None:
            notes.append(
                f"autocast: the {what} casts cannot be priced: the trace has no {what} op that launches one "
                "kernel; they are left out (the prediction is then at most what autocast saves)"
            )
            continue
        ns, ev, n_like = price
        seg = _first_segments(g, g.host_start_node[ops.pos[m]])
        seg = seg[seg >= 0]
        np.add.at(add_ns, seg, int(round(ns)))
        np.add.at(add_cost, seg, 2 * ev)  # each event: a start and an end boundary
        added[what] = (int(seg.size), ns, ev, n_like)
    kinds = ", ".join(
        f"{n} {what} cast(s) at {ns / 1e3:.1f} µs and {ev} recorded events each ("
        + (
            f"{ev} events at the median µs per event of the trace's {k} one-kernel forward ops"
            if what == "forward"
            else f"the median of the trace's {k} one-kernel backward nodes"
        )
        + ")"
        for what, (n, ns, ev, k) in added.items()
    )
    notes.insert(
        0,
        f"autocast {dtype}: {int(tf32.sum())} TF32 and {int(fp32.sum())} fp32 GEMM/convolution kernels x "
        f"{BF16_OVER_TF32:g} and x {BF16_OVER_FP32:g} (the dense peaks' ratios); host work added: "
        + (kinds or "none (no GEMM or convolution op whose kernels the names show as fp32 or TF32)")
        + "".join(f"; {n}" for n in device_notes if n)
        + "; left out: the casts' kernels, the layout conversions' 16-bit tensors, kernels whose algorithm "
        "changes in 16 bits (attention, depthwise convolutions: faster than the peaks' ratio), GEMMs that "
        "gain less than it (a dimension no multiple of 8), elementwise work autocast keeps in fp32 (a "
        "transformer's residual stream)",
    )
    return KnobFactors(act, add_ns=add_ns, add_cost=add_cost, notes=tuple(notes))


def _autocast_device(
    act: np.ndarray, g, host, ops: _Ops, op_of: np.ndarray, gemm32, names, dtype: str
) -> list:
    """autocast's device terms beyond the peaks' ratio, each setting its kernels' factors in `act`: the
    matrix products' floor, batch norm leaving cuDNN, the elementwise kernels on 16-bit activations;
    what each note says. `names`: the device activities' names as text."""
    elem = _per_name(names, _element_bytes)  # each kernel's element size, from its name
    reads = _HostReads(host)
    return [
        _autocast_gemm_floor(act, g, reads, ops, op_of, gemm32, names, elem),
        _autocast_batch_norm(act, names, elem, dtype),
        _autocast_elementwise(act, g, reads, ops, op_of, elem),
    ]


# The matrix products whose operands the trace's input shapes give: (first operand's index, batched)
GEMM_OPERANDS = {
    "aten::mm": (0, False),
    "aten::addmm": (1, False),
    "aten::bmm": (0, True),
    "aten::baddbmm": (1, True),
}


def _gemm_bytes(op: str, shapes: list) -> Optional[int]:
    """Bytes a matrix product moves in 16 bits: both operands read and the result written once (the
    least its kernel can move); None where the shapes are not a product's."""
    first, batched = GEMM_OPERANDS[op]
    try:
        a, b = shapes[first], shapes[first + 1]
        if batched:
            (n, m, k), (n2, k2, p) = a, b
        else:
            n, n2 = 1, 1
            (m, k), (k2, p) = a, b
    except (IndexError, TypeError, ValueError):
        return None
    if k != k2 or n != n2:
        return None
    return 2 * int(n) * (int(m) * int(k) + int(k) * int(p) + int(m) * int(p))


def _autocast_gemm_floor(
    act: np.ndarray, g, reads: _HostReads, ops: _Ops, op_of: np.ndarray, gemm32: np.ndarray, names, elem
) -> str:
    """Each matrix product op's fp32 and TF32 kernels (`gemm32`) no faster, together, than moving its
    operands and result in 16 bits at the bandwidth the trace's large elementwise kernels reach (and
    never slower than they ran): the peaks' ratio is the bound for compute-bound products; one thin in
    a dimension, or a batch of small ones, is bound by memory. On Swin-T (H100, docs/results/advice.md)
    its K=96 products took 0.15-0.19x their fp32 time under bf16 and its window attention's batched
    49x49 products 0.75-0.78x, where the peaks' ratio says 0.068. What the note says ("" where no
    product is held). `names`, `elem`: the device activities' names (text) and element sizes."""
    cand = gemm32 & (op_of >= 0)
    if not cand.any():
        return ""
    dims = reads.dims
    if dims is None:
        return ""
    dur = (g.device["end"] - g.device["ts"]).to_numpy(np.float64)
    timed = _elementwise_gbps(ops, op_of, dims, elem, dur, names, len(reads.host))
    if timed is None:
        return ""
    gbps = timed[0]
    opname = reads.names
    by_op: dict = {}
    for k in np.flatnonzero(cand).tolist():
        by_op.setdefault(int(op_of[k]), []).append(k)
    held, before, after = 0, 0.0, 0.0
    for op, ks in by_op.items():
        name = str(opname[op])
        sh = _shapes(dims[op]) if name in GEMM_OPERANDS else None
        nb = _gemm_bytes(name, sh) if sh else None
        if not nb:
            continue
        was = float(dur[ks].sum())
        now = float((dur[ks] * act[ks]).sum())
        floor = min(nb / gbps, was)
        if now <= 0 or floor <= now:
            continue
        act[ks] *= floor / now
        held += 1
        before += now
        after += floor
    if not held:
        return ""
    return (
        f"{held} matrix products held at moving their operands in 16 bits at the trace's {gbps:.0f} GB/s "
        f"({before / 1e6:.3f} ms at the peaks' ratio, {after / 1e6:.3f} ms)"
    )


def _autocast_batch_norm(act: np.ndarray, names, elem: np.ndarray, dtype: str) -> str:
    """Under bf16, cuDNN's fp32 NCHW batch-norm kernels x BF16_BATCHNORM_OVER_CUDNN_NCHW (torch's own
    kernels take their place); what the note says ("" where the trace has none)."""
    nchw = _names_match(names, re.compile(NCHW_BATCHNORM_RE)) & (elem == 4)
    if not nchw.any():
        return ""
    if dtype != "bf16":
        return f"{dtype}: cuDNN keeps batch norm ({int(nchw.sum())} NCHW kernels keep their time)"
    act[nchw] *= BF16_BATCHNORM_OVER_CUDNN_NCHW
    return (
        f"{int(nchw.sum())} cuDNN NCHW batch-norm kernels x {BF16_BATCHNORM_OVER_CUDNN_NCHW:g} (torch's own "
        "kernels run bf16 batch norm: 1.21-1.36x cuDNN's on nine convnet captures, H100)"
    )


def _autocast_elementwise(
    act: np.ndarray, g, reads: _HostReads, ops: _Ops, op_of: np.ndarray, elem: np.ndarray
) -> str:
    """torch's fp32 elementwise kernels and device-to-device copies (an in-place activation's copy, as
    EfficientNet-B0's SiLU and MobileNetV2's ReLU6 make them) on 4-D activations (an op's first input
    4-D, at least ELEMENTWISE_MIN_ELEMENTS elements, a copy of 4 bytes each; not in an optimizer's step
    or a gradient's accumulation, which move fp32 parameters) x HALF_BYTES; what the note says ("" where
    none)."""
    names = g.device["name"]
    ew = _names_match(names, ELEMENTWISE_RE) & (elem == 4)
    copy = _names_match(names, DTOD_RE)
    cand = (ew | copy) & (op_of >= 0)
    if not cand.any():
        return ""
    host, dims = reads.host, reads.dims
    if dims is None:
        return "elementwise kernels keep their time (the trace has no input shapes: record_shapes=True)"
    hname = reads.names
    # the activations a convolution or a batch norm reads (its op's first input shape): what 16-bit
    # convolutions make 16-bit; a transformer's 4-D tensors (Swin's [B, H, W, C] residual stream, after
    # autocast's fp32 layer norm) stay fp32
    conv_rows = np.flatnonzero(
        _names_match(host["name"], CONV_OPS_RE) & (host["cat"] == S.CAT_CPU_OP).to_numpy()
    )
    conv_inputs = {tuple(sh[0]) for sh in (_shapes(dims[int(r)]) for r in conv_rows) if sh and sh[0]}
    # per graph node: inside the optimizer's step (its record_function span) on the node's thread
    in_optimizer = g.covered(
        (host["cat"].to_numpy() == S.CAT_USER_ANNOTATION) & _names_match(host["name"], OPTIMIZER_RE)
    )
    op_index = ops.at(op_of)  # per device activity: its launching op among the ops
    before = after = 0.0
    n = 0
    dur = (g.device["end"] - g.device["ts"]).to_numpy(np.float64)
    nbytes = g.device["bytes"].to_numpy(np.float64) if "bytes" in g.device else np.full(len(g.device), np.nan)
    n_copies = 0
    for k in np.flatnonzero(cand).tolist():
        op = int(op_of[k])
        sh = _shapes(dims[op])
        if not sh or len(sh[0]) != 4 or _numel(sh[0]) < ELEMENTWISE_MIN_ELEMENTS:
            continue
        if tuple(sh[0]) not in conv_inputs:
            continue
        if copy[k] and nbytes[k] != 4 * _numel(sh[0]):  # a copy of the activation, in fp32
            continue
        i = op_index[k]
        top = hname[int(ops.top[i])] if i >= 0 else None
        if top and ACCUMULATE_RE.search(top):
            continue
        if in_optimizer[g.host_start_node[op]]:
            continue
        act[k] *= HALF_BYTES
        before += dur[k]
        after += dur[k] * HALF_BYTES
        n += 1
        n_copies += int(copy[k])
    if not n:
        return ""
    return (
        f"{n - n_copies} fp32 elementwise kernels and {n_copies} device-to-device copies on 4-D activations "
        f"({before / 1e6:.3f} ms) at half the bytes, {after / 1e6:.3f} ms"
    )


__all__ = ["KnobFactors", "layout_factors", "autocast_factors", "AUTOCAST_DTYPES"]
