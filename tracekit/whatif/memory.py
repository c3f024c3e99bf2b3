"""What if, for device memory (issue 38): the peak and the step time predicted for a larger or smaller
batch, mixed precision, gradient accumulation, activation checkpointing, and the largest batch that fits
in a given memory, from one capture's memory events (tracekit.analysis.memory).

The memory model rescales and reshapes the blocks of the trace and replays their sum over every state
of the device (the state after each memory event, and each profiler cycle's start):

    predicted(state) = held(state) + Σ over live blocks of size × factor + weight copies(state)

`held` is what the trace never saw allocated (the allocator's total minus its live blocks: kept as it
is). A block's factor is 1, except for the categories that grow with the samples of a micro-batch
(`Category.per_sample`: activations, temporaries, inputs/outputs; not what Optimizer.step makes, which
is parameter-sized), which take the batch factor
(`batch_scale`, 1/K for K micro-batches) and, under mixed precision, 1/2 for activations and
temporaries (the batch and the loss stay float32) unless the op that allocated them runs in float32
under autocast (AUTOCAST_FP32). Mixed precision also keeps a 16-bit copy of the
parameters that the forward uses (half their bytes), saved for backward: modelled alive in proportion
to the live activations (all of it at the end of the forward, none once the backward freed them).
Checkpointing N segments (torch's checkpoint_sequential: the last segment is not checkpointed) splits
each forward's activations, in allocation order, into N parts of equal bytes; a checkpointed part's
blocks live in the forward only until the next of its blocks is allocated (its last block, the next
part's input, keeps its lifetime), and again from the moment the backward frees the first of them
(its recomputation) to their own free. Named modules (`checkpoint_modules`, a regex over the trace's
`nn.Module: Name_i` spans: with_stack) checkpoint the activations allocated inside each matching span.

Step times come from the what-if replay (tracekit.whatif.predict): device work (kernels; on a CPU-only
capture the framework ops) scaled by the batch factor; under mixed precision the fp32 and TF32 GEMMs and
convolutions at the tensor cores' bf16 rate (the precision advice's ratios, tracekit.analysis.advice; the
other kernels keep their time), framework ops on a CPU-only capture at AMP_TIME; K micro-batches are K
replays of a 1/K batch, less K-1 optimizer steps; checkpointing adds the forward's compute of the
checkpointed part again. The replay predicts the change: each predicted step is the capture's observed
step (profiled, and the capture's timed steps without the profiler) times the scenario's replayed step
over the unchanged capture's, so where the replay of the unchanged capture is off by a factor, that
cancels. Device work launched before the trace (the previous step's kernels still running when the
profiled one began) does not: the replay keeps it where it was whatever the change, and the prediction
says so (PRELAUNCHED_NOTE). Each figure is a model: docs/results/memory.md holds predicted against
measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.advice import AUTOCAST_FP32_RE, BF16_OVER_FP32, BF16_OVER_TF32, TF32_RE
from tracekit.analysis.memory import (
    ACT,
    BACKWARD,
    FORWARD,
    GRAD,
    IO,
    OPTIMIZER,
    TMP,
    DeviceTimeline,
    event_ops,
    names_matching,
)
from tracekit.analysis.memory_model import CATEGORIES, CATEGORY_NAMES, PHASES
from tracekit.analysis.model import _memory_json, _plain
from tracekit.analysis.steps import launch_times
from tracekit.errors import TracekitError
from tracekit.whatif.memory_options import MemoryOptions

# Ops that autocast runs in float32 whatever their inputs (torch's autocast op lists, CUDA and CPU: the
# losses, norms, softmax, reductions and pointwise math that need the range): what they allocate keeps
# its size under mixed precision.
AUTOCAST_FP32 = re.compile(
    r"^aten::(_?log_softmax|_?softmax|layer_norm|native_layer_norm|group_norm|native_group_norm|norm|"
    r"linalg_vector_norm|mse_loss|l1_loss|smooth_l1_loss|huber_loss|nll_loss\w*|cross_entropy_loss|"
    r"binary_cross_entropy\w*|kl_div|soft_margin_loss|sum|prod|cumsum|cumprod|exp|log|log10|log2|log1p|"
    r"pow|acos|asin|cosh|erfinv|reciprocal|rsqrt|sinh|tan|dist|pdist|cdist|renorm|logsumexp)(\b|$)"
)
# Ops that autocast runs in 16 bits (torch's lower-precision autocast lists: matrix products, convolutions,
# attention, RNN cells; their backward ops; and the cast copies themselves): the one place an output is
# 16-bit whatever its inputs. Any other op's output has the type its inputs promote to, float32 where a
# float32 tensor flows in (a residual stream from float32 embeddings, a norm's or a softmax's output):
# which inputs an op took is not in a Kineto trace, so the peak is also given with those kept float32
# (MemoryPrediction.predicted_peak_allocated_upper).
AUTOCAST_LOW = re.compile(
    r"^aten::(_?convolution\w*|conv\w*|cudnn_convolution\w*|mkldnn_convolution\w*|prelu\w*|addmm|addmv|"
    r"addr|matmul\w*|einsum|mm|mv|linear\w*|addbmm|baddbmm|bmm|chain_matmul|linalg_multi_dot|"
    r"_thnn_fused_(lstm|gru)_cell\w*|(lstm|gru|rnn_tanh|rnn_relu)_cell|_?scaled_dot_product\w*|"
    r"_efficient_attention\w*|_flash_attention\w*|_to_copy|to|_cudnn_rnn\w*)$"
)
# Mixed precision on a CPU-only capture (no kernel names to tell the matrix products by): the framework
# ops at this fraction of their float32 time. A model, checked in docs/results/memory.md.
AMP_TIME = 0.5
# Device work launched before the trace above this share of the step is said (with_times)
PRELAUNCHED_NOTE = 0.05
MODULE_PREFIX = "nn.Module: "


@dataclass(frozen=True)
class MemoryPrediction:
    """One device under a MemoryOptions: the observed and predicted peaks (bytes), the predicted
    allocated bytes by category at the predicted peak, the step times (ms; None where not predicted)."""

    rank: int
    device: int
    observed_peak_allocated: int
    observed_peak_reserved: int
    predicted_peak_allocated: int
    predicted_peak_reserved: Optional[int]  # allocated × the observed reserved/allocated ratio at the peak
    predicted_by_category: Mapping[str, int]
    predicted_peak_phase: str
    # under mixed precision: the peak with only the AUTOCAST_LOW ops' outputs 16-bit (type promotion can
    # keep the rest float32; the trace does not say which): the allocated peak lies between the two
    predicted_peak_allocated_upper: Optional[int] = None
    observed_step_ms: Optional[float] = None
    predicted_step_ms: Optional[float] = None
    unprofiled_observed_step_ms: Optional[float] = None
    unprofiled_predicted_step_ms: Optional[float] = None
    # --fit-gib: the largest batch factor (and micro-batch) whose predicted reserved peak fits
    fit_batch_scale: Optional[float] = None
    fit_batch_size: Optional[int] = None
    batch_size: Optional[int] = None  # the captured micro-batch
    # the unprofiled steps' statistic the step times are of: "median", or "mean" where a producer (the
    # input pipeline) paces the steps (tracekit.whatif.loader: its stalls come in bursts)
    unprofiled_basis: str = "median"
    notes: tuple[str, ...] = ()

    @property
    def change(self) -> float:
        o = self.observed_peak_allocated
        return self.predicted_peak_allocated / o - 1 if o else 0.0


@dataclass(frozen=True)
class MemoryWhatIfResult:
    """`tracekit memory CAPTURE --batch-scale F ...`: the scenario and each device's prediction."""

    capture: Mapping[str, Any]
    scenario: MemoryOptions
    devices: tuple[MemoryPrediction, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "tracekit_memory_whatif": 1,
            "capture": dict(self.capture),
            "scenario": self.scenario.to_json(),
            "devices": [{**_plain(d), "change": d.change} for d in self.devices],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class MemoryResult:
    """`tracekit memory CAPTURE`: each device's memory over the steps (tracekit.analysis.memory), and
    with a scenario, its prediction."""

    capture: Mapping[str, Any]
    memory: tuple[Any, ...]  # tracekit.analysis.memory_model.DeviceMemory
    prediction: Optional[MemoryWhatIfResult] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tracekit_memory": 1,
            "capture": dict(self.capture),
            "memory": [_memory_json(m) for m in self.memory],
            "prediction": None if self.prediction is None else self.prediction.to_json(),
        }


# -- the memory model -----------------------------------------------------------------------------------


@dataclass
class _Series:
    """A device's states on one axis (DeviceTimeline.positions): the held bytes, and per block the
    position interval(s) it is alive in with its size."""

    allocated: np.ndarray  # observed, per position
    reserved: np.ndarray
    held: np.ndarray  # what no live block of the trace explains (kept as it is)
    phase: np.ndarray  # per position (a cycle's start: forward)
    n: int


def _positions(tl: DeviceTimeline) -> tuple[np.ndarray, np.ndarray, int]:
    pos, start = tl.positions()
    return pos, start, int(tl.ts.size + tl.cycle_first.size)


def _live_sum(lo: np.ndarray, hi: np.ndarray, weight: np.ndarray, n: int) -> np.ndarray:
    """Σ weight of the intervals [lo, hi) covering each position 0..n-1."""
    if not len(lo):
        return np.zeros(n)
    d = np.bincount(lo, weights=weight, minlength=n + 1) - np.bincount(hi, weights=weight, minlength=n + 1)
    return np.cumsum(d[:n])


def _series(tl: DeviceTimeline) -> tuple[_Series, np.ndarray, np.ndarray]:
    pos, start, n = _positions(tl)
    allocated = np.zeros(n, np.int64)
    reserved = np.zeros(n, np.int64)
    phase = np.full(n, FORWARD, np.int8)
    allocated[pos], allocated[start] = tl.allocated, tl.baseline
    reserved[pos] = tl.reserved
    reserved[start] = [tl.reserved_at(-1 - c) for c in range(start.size)]
    phase[pos] = tl.phase
    lo, hi = (x.copy() for x in tl.spans())
    tracked = _live_sum(lo, hi, tl.blocks["size"].to_numpy(np.float64), n)
    held = np.maximum(allocated - tracked, 0)
    return _Series(allocated, reserved, held, phase, n), lo, hi


@dataclass
class _Pieces:
    """Intervals [lo, hi) of positions with the bytes alive in them: `fixed` whatever the batch, `per`
    the per-sample bytes at the captured micro-batch (× the batch factor), and their category."""

    lo: np.ndarray
    hi: np.ndarray
    fixed: np.ndarray
    per: np.ndarray
    cat: np.ndarray

    def add(
        self, lo: np.ndarray, hi: np.ndarray, fixed: np.ndarray, per: np.ndarray, cat: np.ndarray
    ) -> None:
        self.lo = np.concatenate([self.lo, lo])
        self.hi = np.concatenate([self.hi, hi])
        self.fixed = np.concatenate([self.fixed, fixed])
        self.per = np.concatenate([self.per, per])
        self.cat = np.concatenate([self.cat, cat])

    def at(self, factor: float, n: int) -> np.ndarray:
        return _live_sum(self.lo, self.hi, self.fixed + factor * self.per, n)


def predict_device(
    tl: DeviceTimeline, threads: Any, frames: Any, scenario: MemoryOptions, manifest: Mapping[str, Any]
) -> MemoryPrediction:
    """The memory prediction of one device (module docstring); step times are added by `with_times`."""
    if not tl.addresses:
        raise TracekitError(
            "the capture's memory events carry no block addresses (parsed by an older tracekit): parse its "
            "trace files again (`tracekit parse`) to predict memory"
        )
    ser, _, _ = _series(tl)
    notes: list[str] = []
    likely = surely = None
    if scenario.amp:
        likely, surely = _autocast_halves(tl, threads)
    pieces, grads = _reshaped(tl, frames, scenario, notes, likely)
    copies = np.zeros(ser.n)
    if scenario.amp:
        copies, note = _weight_copies(tl, ser, pieces, manifest)
        notes.append(note)
    fixed_extra = ser.held + copies
    k, pred, by_cat = _peak(tl, ser, pieces, grads, fixed_extra, scenario.factor, scenario.grad_accum)
    predicted = int(round(pred))
    upper = None
    if scenario.amp:
        wider, _ = _reshaped(tl, frames, scenario, [], surely)
        _, high, _ = _peak(tl, ser, wider, grads, fixed_extra, scenario.factor, scenario.grad_accum)
        upper = max(predicted, int(round(high)))
    obs_k = int(np.argmax(ser.allocated))
    ratio = ser.reserved[obs_k] / ser.allocated[obs_k] if ser.allocated[obs_k] and tl.device >= 0 else None
    # what no block explains named as the analysis names it (the capture's record of the model, the rest
    # unattributed); the 16-bit weight copies unattributed too
    live = np.round(by_cat).astype(np.int64)
    named, _ = tl.split(live, int(live.sum()) + int(round(ser.held[k])))
    by_category = {c: int(named[j]) for j, c in enumerate(CATEGORY_NAMES)}
    by_category["unattributed"] += predicted - sum(by_category.values())  # the copies, and rounding
    batch = _batch_size(manifest)
    fit_scale = fit_batch = None
    if scenario.fit_gib is not None:
        fit_scale = _fit(ser, pieces, fixed_extra, scenario, ratio, tl, grads)
        fit_batch = (
            int(math.floor(fit_scale * batch + 1e-9)) if batch and fit_scale not in (None, math.inf) else None
        )
        if ratio is None:
            notes.append("no reserve known (the host allocator): the fit is of allocated bytes")
    if scenario.amp:
        notes.append(
            "the 16-bit weight copies are counted in `unattributed` at the predicted peak; activations and "
            "temporaries at half their size but where a float32 op (softmax, norms, losses, sums) made them; "
            "up to the upper peak where float32 inputs (a residual stream, a norm's output) carry float32 "
            "through the ops after them: only matrix products, convolutions and attention are surely 16-bit"
        )
    if scenario.grad_accum > 1:
        notes.append(
            f"micro-batches 2-{scenario.grad_accum}: every gradient alive from the start, each new one a "
            "temporary until it is added in"
        )
    return MemoryPrediction(
        rank=tl.rank,
        device=tl.device,
        observed_peak_allocated=int(ser.allocated.max()),
        observed_peak_reserved=int(ser.reserved.max()),
        predicted_peak_allocated=predicted,
        predicted_peak_reserved=None if ratio is None else int(round(predicted * ratio)),
        predicted_peak_allocated_upper=upper,
        predicted_by_category=by_category,
        predicted_peak_phase=PHASES[int(ser.phase[k])],
        fit_batch_scale=fit_scale,
        fit_batch_size=fit_batch,
        batch_size=batch,
        notes=tuple(notes),
    )


def _reshaped(
    tl: DeviceTimeline, frames: Any, scenario: MemoryOptions, notes: list[str], half: Optional[np.ndarray]
) -> tuple[_Pieces, np.ndarray]:
    """The device's blocks as pieces under the scenario (sizes per sample and precision, checkpointed
    lifetimes, the 16-bit first versions of the gradients), and the mask of the blocks that are
    gradients the trace saw made. Under mixed precision the activations and temporaries that `half`
    marks (`_autocast_halves`) are 16-bit."""
    lo, hi = (x.copy() for x in tl.spans())
    b = tl.blocks
    size = b["size"].to_numpy(np.float64)
    cat = b["category"].to_numpy().astype(np.int64)
    per_sample = np.isin(cat, [i for i, c in enumerate(CATEGORIES) if c.per_sample])
    # what Optimizer.step makes is parameter-sized, whatever its category
    per_sample &= tl.phase[np.clip(b["alloc"].to_numpy(), 0, max(tl.ts.size - 1, 0))] != OPTIMIZER
    precision = np.ones(len(b))
    if scenario.amp and half is not None:  # the batch and the loss stay float32: autocast's casts are
        precision = np.where(per_sample & (cat != IO) & half, 0.5, 1.0)  # activations
    pieces = _Pieces(
        lo, hi, np.where(per_sample, 0.0, size), np.where(per_sample, size * precision, 0.0), cat
    )
    if scenario.checkpointed:
        parts = _parts(tl, frames, scenario)
        _checkpoint(pieces, parts)
        notes.append(f"checkpointed {_share(tl, parts):.0%} of the forward's activation bytes")
    grads = (cat == GRAD) & (b["alloc"].to_numpy() >= tl.cycle_first[b["cycle"].to_numpy()])
    if scenario.amp:  # each gradient is made in 16 bits first, then cast to the parameter's float32
        g = np.flatnonzero(grads)
        pieces.add(lo[g], lo[g] + 1, size[g] / 2, np.zeros(g.size), cat[g])
    return pieces, grads


def _peak(
    tl: DeviceTimeline,
    ser: _Series,
    pieces: _Pieces,
    grads: np.ndarray,
    fixed_extra: np.ndarray,
    factor: float,
    accum: int,
) -> tuple[int, float, np.ndarray]:
    """(the position of the predicted peak, the predicted bytes there, the pieces' bytes there by
    category): the first micro-batch's states, or with K > 1 the later ones' where they are higher."""
    pred = fixed_extra + pieces.at(factor, ser.n)
    k = int(np.argmax(pred))
    weights = pieces.fixed + factor * pieces.per
    live = (pieces.lo <= k) & (pieces.hi > k)
    by_cat = np.bincount(pieces.cat[live], weights=weights[live], minlength=len(CATEGORY_NAMES))
    if accum <= 1:
        return k, float(pred[k]), by_cat
    total, kept, made = _later_micro_batches(tl, ser, pieces, grads, factor, split=True)
    later = total + fixed_extra
    if later.max() <= pred[k]:
        return k, float(pred[k]), by_cat
    k = int(np.argmax(later))
    is_grad = np.zeros(len(pieces.lo), bool)
    is_grad[: len(grads)] = grads
    live = (pieces.lo <= k) & (pieces.hi > k) & ~is_grad
    by_cat = np.bincount(pieces.cat[live], weights=weights[live], minlength=len(CATEGORY_NAMES))
    by_cat[GRAD] += kept[k]
    by_cat[TMP] += made[k]
    return k, float(later[k]), by_cat


def _later_micro_batches(
    tl: DeviceTimeline, ser: _Series, pieces: _Pieces, grads: np.ndarray, factor: float, split: bool = False
) -> Any:
    """The states of micro-batches 2..K (gradient accumulation), where the forward and backward run with
    every gradient of the step alive (the first micro-batch made them), and each gradient the backward
    makes is a temporary (added into the kept one, then freed). The optimizer's states are the first's
    (0 here). With `split`: (the total, the kept gradients, the temporaries they add), else the total."""
    g = np.zeros(len(pieces.lo), bool)
    g[: len(grads)] = grads
    kept = _live_sum(pieces.lo[g], pieces.hi[g], pieces.fixed[g], ser.n)
    others = _live_sum(pieces.lo[~g], pieces.hi[~g], (pieces.fixed + factor * pieces.per)[~g], ser.n)
    made = _live_sum(pieces.lo[g], pieces.lo[g] + 1, pieces.fixed[g], ser.n)
    pos, _ = tl.positions()
    window = np.full(ser.n, -1, np.int64)
    window[pos] = tl.window
    # the most gradient bytes alive in each step: its positions are one run of equal window numbers
    inside = np.flatnonzero(window >= 0)
    full = np.zeros(ser.n)
    if inside.size:
        run = np.flatnonzero(np.r_[True, np.diff(window[inside]) != 0])
        most = np.maximum.reduceat(kept[inside], run)
        full[inside] = np.repeat(most, np.diff(np.r_[run, inside.size]))
    on = (window >= 0) & (ser.phase != OPTIMIZER)
    full = np.where(on, full, 0.0)
    total = np.where(on, others + full + made, 0.0)
    return (total, full, np.where(total > 0, made, 0.0)) if split else total


def _autocast_halves(tl: DeviceTimeline, threads: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per block, whether autocast likely makes it 16-bit (made in this trace by no AUTOCAST_FP32 op) and
    whether surely (made by an AUTOCAST_LOW op); innermost or outermost op, each name matched once."""
    b = tl.blocks
    alloc = b["alloc"].to_numpy()
    idx = np.flatnonzero(alloc >= tl.cycle_first[b["cycle"].to_numpy()])
    inner, outer = event_ops(tl, threads, alloc[idx])
    names, codes = np.unique(
        np.array([str(n or "") for n in (*inner, *outer)], dtype=object), return_inverse=True
    )
    fp32 = (
        np.array([bool(AUTOCAST_FP32.match(n)) for n in names], dtype=bool)[codes].reshape(2, -1).any(axis=0)
    )
    low = np.array([bool(AUTOCAST_LOW.match(n)) for n in names], dtype=bool)[codes].reshape(2, -1).any(axis=0)
    likely, surely = np.ones(len(b), bool), np.zeros(len(b), bool)
    likely[idx], surely[idx] = ~fp32, low
    return likely, surely


def _weight_copies(
    tl: DeviceTimeline, ser: _Series, pieces: _Pieces, manifest: Mapping[str, Any]
) -> tuple[np.ndarray, str]:
    """The 16-bit parameter copies autocast keeps for backward, per position: half the parameter bytes
    (the capture's record; else the gradients', which have the parameters' size) times the live
    activations over their most."""
    params = int(tl.recorded.get("parameters", 0))
    source = "the capture's record of the parameters"
    if not params:
        g = pieces.cat == GRAD
        grads = _live_sum(pieces.lo[g], pieces.hi[g], pieces.fixed[g], ser.n)
        params = int(grads.max()) if grads.size else 0
        source = "the gradients' bytes (no record of the parameters)"
    a = pieces.cat == ACT
    act = _live_sum(pieces.lo[a], pieces.hi[a], pieces.per[a], ser.n)
    top = act.max() if act.size else 0.0
    copies = (params / 2) * (act / top) if top > 0 else np.zeros(ser.n)
    return copies, f"16-bit weight copies: {params / 2 / 2**20:.1f} MiB at most, from {source}"


def _forwards(tl: DeviceTimeline) -> list[np.ndarray]:
    """The activation blocks of each forward (those freed in one backward window), in allocation order."""
    b = tl.blocks
    act = np.flatnonzero(b["category"].to_numpy() == ACT)
    if not act.size:
        return []
    free_t = tl.ts[np.clip(b["free"].to_numpy()[act], 0, tl.ts.size - 1)]
    backward = iv.window_of(tl.marks.bw_s, tl.marks.bw_e, free_t)
    alloc = b["alloc"].to_numpy()
    out = []
    for k in np.unique(backward[backward >= 0]):  # one loop per backward
        blocks = act[backward == k]
        out.append(blocks[np.argsort(alloc[blocks], kind="stable")])
    return out


def _parts(tl: DeviceTimeline, frames: Any, scenario: MemoryOptions) -> list[tuple[np.ndarray, np.ndarray]]:
    """The checkpointed parts of each forward, as (the part's activation blocks, those of the same
    forward allocated after it), in allocation order: checkpoint_sequential's N segments of equal bytes
    but the last, or the calls of the named modules."""
    if scenario.checkpoint_modules:
        return _module_parts(tl, frames, scenario.checkpoint_modules)
    segments = scenario.checkpoint
    spans = _module_spans(tl, frames)
    if spans is not None:
        return _sequential_module_parts(tl, spans, segments)
    out = []
    for blocks in _forwards(tl) if segments > 1 else []:  # one loop per forward
        cum = np.cumsum(tl.blocks["size"].to_numpy()[blocks])
        part = np.minimum((cum - 1) * segments // max(int(cum[-1]), 1), segments - 1)
        out += [(blocks[part == p], blocks[part > p]) for p in range(segments - 1) if (part == p).any()]
    return out


def _module_spans(tl: DeviceTimeline, frames: Any) -> Optional[pd.DataFrame]:
    """The rank's module calls (`nn.Module: Name_i` python_function spans, with_stack captures): name,
    ts, end; None without any."""
    host = frames.host
    py = host[(host["rank"] == tl.rank) & (host["cat"] == "python_function")]
    modules = py[names_matching(py["name"], lambda n: n.startswith(MODULE_PREFIX))]
    if not len(modules):
        return None
    out = pd.DataFrame(
        {
            "name": modules["name"].astype(str).str.slice(len(MODULE_PREFIX)).to_numpy(object),
            "ts": modules["ts"].to_numpy(np.int64),
            "end": modules["end"].to_numpy(np.int64),
        }
    )
    return out.sort_values(["ts", "end"], ascending=[True, False]).reset_index(drop=True)


def _sequential_module_parts(
    tl: DeviceTimeline, spans: pd.DataFrame, segments: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """checkpoint_sequential as torch cuts it, where the trace has module calls: in each forward, the
    outermost module call around its first activation, descended while it calls one module only; its
    child calls in order are cut into `segments` chunks of len // segments calls (the last takes the
    rest and is not checkpointed); a chunk's part is the activations allocated from its first call's
    start to its last call's end."""
    if segments < 2:
        return []
    s, e = spans["ts"].to_numpy(np.int64), spans["end"].to_numpy(np.int64)
    alloc = tl.blocks["alloc"].to_numpy()
    out = []
    for blocks in _forwards(tl):  # one loop per forward
        t = tl.ts[alloc[blocks]]
        outer = np.flatnonzero((s <= t[0]) & (e > t[0]))
        if not outer.size:
            continue
        parent = int(outer[0])
        while True:
            kids = _children(s, e, parent)
            if kids.size != 1:
                break
            parent = int(kids[0])
        if kids.size < 2:
            continue
        size = kids.size // segments
        for c in range(segments - 1):  # the chunks checkpoint_sequential checkpoints
            lo, hi = s[kids[c * size]], e[kids[(c + 1) * size - 1]]
            inside = (t >= lo) & (t < hi)
            if inside.any():
                out.append((blocks[inside], blocks[t >= hi]))
    return out


def _children(s: np.ndarray, e: np.ndarray, parent: int) -> np.ndarray:
    """The calls directly inside call `parent` (sorted by start, outermost first)."""
    inside = np.flatnonzero((s >= s[parent]) & (e <= e[parent]) & (np.arange(s.size) != parent))
    if not inside.size:
        return inside
    covered = np.maximum.accumulate(e[inside])
    top = np.r_[True, s[inside][1:] >= covered[:-1]]
    return inside[top]


def _module_parts(tl: DeviceTimeline, frames: Any, pattern: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The activations allocated inside each outermost forward span of a module whose name matches."""
    host = frames.host
    py = host[(host["rank"] == tl.rank) & (host["cat"] == "python_function")]
    modules = py[names_matching(py["name"], lambda n: n.startswith(MODULE_PREFIX))]
    if not len(modules):
        raise TracekitError(
            "--checkpoint-modules needs the trace's module spans (nn.Module: Name_i), which only a capture "
            "with stacks has: `tracekit capture ... --set with_stack=true`; or give --checkpoint N"
        )
    names = modules["name"].astype(str).str.slice(len(MODULE_PREFIX))
    hit = modules[names.str.contains(pattern, regex=True).to_numpy(bool)]
    if not len(hit):
        known = ", ".join(sorted(set(names))[:8])
        raise TracekitError(
            f"--checkpoint-modules {pattern!r} matches no module of the trace; it has e.g. {known}"
        )
    s, e = hit["ts"].to_numpy(np.int64), hit["end"].to_numpy(np.int64)
    top = iv.nesting_depth(s, e) == 0
    order = np.argsort(s[top])
    s, e = s[top][order], e[top][order]
    alloc = tl.blocks["alloc"].to_numpy()
    out = []
    for blocks in _forwards(tl):  # one loop per forward
        k = iv.window_of(s, e, tl.ts[alloc[blocks]])
        for span in np.unique(k[k >= 0]):  # one loop per checkpointed module call
            inside = np.flatnonzero(k == span)
            out.append((blocks[inside], blocks[inside[-1] + 1 :]))
    return out


def _share(tl: DeviceTimeline, parts: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The share of the forwards' activation bytes in the checkpointed parts (what is recomputed)."""
    size = tl.blocks["size"].to_numpy(np.float64)
    total = sum(float(size[f].sum()) for f in _forwards(tl))
    ckpt = sum(float(size[p].sum()) for p, _ in parts)
    return ckpt / total if total else 0.0


def _checkpoint(pieces: _Pieces, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Checkpoint each part: its blocks (but its last, the next part's input) alive in the forward only
    until its next block is allocated, then again from its recomputation, when the backward is done
    with everything the forward made after it (the last free of those blocks; without any, just before
    the first of its own is freed), to their own free."""
    lo, hi = pieces.lo, pieces.hi
    added = []
    for blocks, later in parts:  # one loop per checkpointed part
        if blocks.size < 2:
            continue
        inner, nxt = blocks[:-1], blocks[1:]
        rec = int(hi[later].max()) if later.size else int(hi[inner].min()) - 1
        rec = min(rec, int(hi[inner].min()) - 1)
        added.append((np.full(inner.size, rec), hi[inner].copy(), inner))
        hi[inner] = np.clip(lo[nxt], lo[inner] + 1, np.maximum(rec, lo[inner] + 1))
    for rec_lo, rec_hi, inner in added:
        pieces.add(rec_lo, rec_hi, pieces.fixed[inner], pieces.per[inner], pieces.cat[inner])


def _fit(
    ser: _Series,
    pieces: _Pieces,
    fixed_extra: np.ndarray,
    scenario: MemoryOptions,
    ratio: Optional[float],
    tl: DeviceTimeline,
    grads: np.ndarray,
) -> Optional[float]:
    """The largest batch factor F (× the captured micro-batch, under the scenario's other changes)
    whose predicted reserved peak fits in scenario.fit_gib: predicted = fixed + F × per-sample at every
    state, so F = min over states of (budget - fixed) / per-sample. None: nothing fits (what does not
    grow with the batch is already over); inf: nothing grows with it."""
    budget = (scenario.fit_gib or 0.0) * 2**30 / (ratio or 1.0)
    k = scenario.grad_accum
    fixed = fixed_extra + pieces.at(0.0, ser.n)
    var = _live_sum(pieces.lo, pieces.hi, pieces.per, ser.n) / k
    if k > 1:  # the later micro-batches' states, at their own fixed part
        steps = _later_micro_batches(tl, ser, pieces, grads, 0.0)
        later = steps + fixed_extra
        var_later = np.where(steps > 0, var, 0.0)
        fixed, var = np.concatenate([fixed, later]), np.concatenate([var, var_later])
    if (fixed > budget).any():
        return None
    room = (budget - fixed)[var > 0] / var[var > 0]
    return float(room.min()) if room.size else math.inf


def _batch_size(manifest: Mapping[str, Any]) -> Optional[int]:
    """The captured micro-batch: the workload's batch_size knob, else samples per step / grad_accum."""
    knobs = manifest.get("knobs") or {}
    if isinstance(knobs.get("batch_size"), int):
        return int(knobs["batch_size"])
    spp = manifest.get("samples_per_step")
    if isinstance(spp, int) and spp > 0:
        return spp // max(int(knobs.get("grad_accum", 1) or 1), 1)
    return None


# -- step times -----------------------------------------------------------------------------------------


def phase_ms(frames: Any, tl: DeviceTimeline, phase: int) -> float:
    """The median per step of the compute of one phase: the durations of the device work launched in it
    (a CPU-only capture: the step thread's time in it; work launched before the trace is in none)."""
    steps = tl.steps
    ws, we = steps["ts"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)
    marks = tl.marks
    if frames.has_device:
        dev = frames.device[
            (frames.device["rank"] == tl.rank) & (frames.device["device"] == max(tl.device, 0))
        ]
        t = launch_times(dev, frames.launches)
        dur = (dev["end"] - dev["ts"]).to_numpy(np.float64)
        launched = ~np.isnan(t)  # work launched before the trace is no phase's of these steps
        t, dur = t[launched].astype(np.int64), dur[launched]
    else:
        host = frames.host
        key = steps[["pid", "tid"]].iloc[0] if len(steps) else None
        if key is None:
            return 0.0
        ops = host[(host["rank"] == tl.rank) & (host["pid"] == key["pid"]) & (host["tid"] == key["tid"])]
        ops = ops[ops["cat"] == "cpu_op"]
        s, e = ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
        top = iv.nesting_depth(s, e) == 0
        t, dur = s[top], (e - s)[top].astype(np.float64)
    in_bw = iv.window_of(marks.bw_s, marks.bw_e, t) >= 0
    in_opt = iv.window_of(marks.opt_s, marks.opt_e, t) >= 0
    which = np.where(in_opt, OPTIMIZER, np.where(in_bw, BACKWARD, FORWARD))
    w = iv.window_of(ws, we, t)
    m = (which == phase) & (w >= 0)
    per = np.bincount(w[m], weights=dur[m], minlength=len(ws))
    return float(np.median(per)) / 1e6 if per.size else 0.0


def prelaunched_ms(frames: Any, tl: DeviceTimeline) -> float:
    """The device work launched before the trace began that ran once the steps had (no launch record: the
    step before the profiled ones, still queued), ms per step; the replay keeps it at its observed time
    (tracekit.whatif.graph), whatever the scenario."""
    if not frames.has_device or not len(tl.steps):
        return 0.0
    dev = frames.device[(frames.device["rank"] == tl.rank) & (frames.device["device"] == max(tl.device, 0))]
    orphan = np.isnan(launch_times(dev, frames.launches))
    ts = dev["ts"].to_numpy(np.int64)
    cycles = tl.steps.groupby("cyc")["ts"].min().to_numpy(np.int64)  # each cycle's first step's start
    first = cycles[np.maximum(np.searchsorted(cycles, ts, side="right") - 1, 0)]
    ran = orphan & (ts >= first)
    dur = (dev["end"] - dev["ts"]).to_numpy(np.float64)
    return float(dur[ran].sum()) / 1e6 / len(tl.steps)


def time_scale(scenario: MemoryOptions) -> float:
    """What multiplies the device work of a replayed step (one micro-batch under grad_accum)."""
    return scenario.factor


def time_flags(
    scenario: MemoryOptions, kernels: Optional[Any]
) -> tuple[dict[str, float], dict[str, float], str]:
    """The replay's factors by pattern (`tracekit whatif --kernels`, or `--ops` on a CPU-only capture,
    `kernels` None; several matching patterns multiply) and by cause (`--set`) for one micro-batch under
    the scenario, and the same as flags to type. `kernels`: the device activities' distinct names (a
    class none of them is in is left out: the replay refuses a pattern that matches nothing)."""
    scale = time_scale(scenario)
    patterns = {".*": scale}
    # a batch of F × the samples is also F × the input pipeline's work (each sample loaded)
    sets = {"dataloader": scale} if scale != 1 else {}
    if scenario.amp and kernels is not None:
        for pattern, ratio in ((AUTOCAST_FP32_RE, BF16_OVER_FP32), (TF32_RE, BF16_OVER_TF32)):
            rx = re.compile(pattern)
            if any(rx.search(str(n)) for n in kernels):
                patterns[pattern] = ratio
    elif scenario.amp:
        patterns[".*"] = scale * AMP_TIME
    option = "--kernels" if kernels is not None else "--ops"
    typed = [f"{option} '{p}={f:.6g}'" for p, f in patterns.items()]
    typed += [f"--set {c}={f:.6g}" for c, f in sets.items()]
    return patterns, sets, " ".join(typed)


def time_note(scenario: MemoryOptions, typed: str, has_device: bool, basis: str) -> str:
    """How the step times were predicted (`typed`: the replay's flags, as time_flags gives them)."""
    what = "device work" if has_device else "framework ops"
    return (
        f"step time: the observed step × the replay's change, the capture replayed with its {what} as one "
        f"micro-batch under the change (tracekit whatif {typed})"
        + (f", {scenario.grad_accum} of them and one optimizer step" if scenario.grad_accum > 1 else "")
        + (
            "; GEMMs and convolutions at the bf16/fp32 and bf16/TF32 tensor-core peaks' ratios"
            if scenario.amp and has_device
            else ""
        )
        + ("; unprofiled: the mean step (the input pipeline paces the steps)" if basis == "mean" else "")
    )


def with_times(
    pred: MemoryPrediction,
    scenario: MemoryOptions,
    observed: tuple[Optional[float], Optional[float]],
    base: tuple[Optional[float], Optional[float]],
    replayed: tuple[Optional[float], Optional[float]],
    trace: tuple[float, float, float, float],
    basis: str = "median",
) -> MemoryPrediction:
    """The prediction with its step times, (profiled, unprofiled) each: `observed` the capture's steps,
    `base` the replay of the unchanged capture, `replayed` the replay of one micro-batch under the
    scenario's device-work scale; `trace`: the forward's and the optimizer's device time, the share of
    the forward checkpointed, the device work launched before the trace (ms per step: phase_ms,
    checkpoint_share, prelaunched_ms). A predicted step is the observed one times the scenario's replayed
    step over the unchanged one's (module docstring)."""
    fwd_ms, opt_ms, share, before = trace
    k = scenario.grad_accum
    extra = share * fwd_ms * time_scale(scenario)  # the recomputed forward (checkpointing)

    def step(obs: Optional[float], b: Optional[float], r: Optional[float]) -> Optional[float]:
        if r is None or obs is None or not b:
            return None
        total = k * (r - opt_ms) + opt_ms + k * extra if k > 1 else r + extra
        return obs * total / b

    notes = pred.notes
    if observed[0] and before > PRELAUNCHED_NOTE * observed[0]:
        notes += (
            f"{before:.3g} ms of device work per step ran in the steps but was launched before the trace "
            "began (the previous step's, still queued): the replay keeps it as observed, so a change that "
            "shortens the device work is predicted short of its effect on the step; capture more than one "
            "active step (e.g. --schedule wait=0,warmup=1,active=3,repeat=1)",
        )
    return replace(
        pred,
        observed_step_ms=observed[0],
        unprofiled_observed_step_ms=observed[1],
        predicted_step_ms=step(observed[0], base[0], replayed[0]),
        unprofiled_predicted_step_ms=step(observed[1], base[1], replayed[1]),
        unprofiled_basis=basis,
        notes=notes,
    )


def checkpoint_share(tl: DeviceTimeline, frames: Any, scenario: MemoryOptions) -> float:
    """The share of the forward's activation bytes the scenario checkpoints (what is recomputed)."""
    return _share(tl, _parts(tl, frames, scenario)) if scenario.checkpointed else 0.0
