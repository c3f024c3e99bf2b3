"""Training machinery the workloads share: the second article's tuning knobs, and causes made on purpose.

AMP (autocast + GradScaler on CUDA; bf16 autocast without a scaler on CPU), gradient accumulation,
activation checkpointing (`checkpoint_sequential`), DDP (one process per device, `no_sync` between
accumulated micro-batches) and a deliberately slow rank; TF32 matmuls, and extra interpreter work before
every layer (`host_spin_us`), so that a user can make a what-if counterfactual for real; and how the step
runs (eager, one CUDA graph, torch.compile: workloads/_modes.py).
Stdlib + torch, torch imported inside functions.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Optional, Sequence

from tracekit.capture.knobs import Knob, KnobError
from tracekit.capture.workload import Context
from workloads._modes import MODE_KNOBS, GraphedStep, autocast_cache, check_modes, compiled, make_capturable

TRAIN_KNOBS = (
    Knob("amp", False, "automatic mixed precision: autocast (+ GradScaler for float16)"),
    Knob(
        "amp_dtype",
        "auto",
        "autocast dtype; auto = float16 on CUDA, bfloat16 on CPU",
        choices=("auto", "float16", "bfloat16"),
    ),
    Knob("grad_accum", 1, "micro-batches accumulated per step (one optimizer step per step)", minimum=1),
    Knob("checkpoint", 0, "activation checkpointing: checkpoint_sequential segments (0 = off)"),
    Knob("nproc", 1, "DDP processes, one per device (gloo on CPU, nccl on CUDA); 1 = no DDP", minimum=1),
    Knob("slow_rank", -1, "DDP: this rank sleeps slow_ms at the start of every step (-1 = none)", minimum=-1),
    Knob("slow_ms", 0.0, "DDP: how long the slow rank sleeps per step, ms"),
    Knob(
        "parallel",
        "ddp",
        "with nproc > 1: ddp (DistributedDataParallel) or fsdp (FSDP2 fully_shard on each Linear, then the "
        "whole model)",
        choices=("ddp", "fsdp"),
    ),
    Knob(
        "bucket_cap_mb",
        0.0,
        "DDP: the gradient bucket size, MB (DistributedDataParallel's bucket_cap_mb); 0 = torch's default "
        "(25 MB after a first bucket of 1 MB: giving 25 explicitly drops that first small bucket)",
    ),
    Knob(
        "ddp_comm",
        "allreduce",
        "DDP: allreduce (the gradient all-reduce), or none (a comm hook that hands each bucket back "
        "unreduced: the same step with no communication, the A of an A/B)",
        choices=("allreduce", "none"),
    ),
    Knob(
        "tf32",
        False,
        "CUDA: TF32 matmuls and convolutions (allow_tf32, float32 matmul precision 'high'); false = full "
        "fp32; no effect on CPU",
    ),
    Knob(
        "host_spin_us",
        0.0,
        "extra pure-Python work before every layer of the layer stack, µs (a loop calibrated at start; "
        "the iterations land in the manifest's extra.host_spin; with cuda_graphs it runs at capture only)",
    ),
) + MODE_KNOBS


# The slow rank's sleep is a record_function region of this name, so a what-if can remove it by name
# (`tracekit whatif --ops '^tracekit.slow_rank$=0'`): the straggler made fast.
SLOW_REGION = "tracekit.slow_rank"


def maybe_slow(ctx: Context) -> None:
    """The slow rank sleeps on the host, so its peers wait for it inside the gradient all-reduce."""
    if ctx.rank == ctx.knobs.get("slow_rank", -1) and ctx.knobs.get("slow_ms", 0.0) > 0:
        import torch

        with torch.profiler.record_function(SLOW_REGION):
            time.sleep(ctx.knobs["slow_ms"] / 1e3)


# No annotations: DDP refuses a comm hook whose `bucket` is annotated as anything but dist.GradBucket (and
# under `from __future__ import annotations` every annotation is a string).
def _unreduced(state, bucket):  # type: ignore[no-untyped-def]
    """A DDP comm hook that communicates nothing: the bucket's local gradients, as they are."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def distribute(ctx: Context, module: Any) -> Any:
    """The module under DDP (`bucket_cap_mb`, `ddp_comm`) or FSDP2 (`parallel=fsdp`: each Linear, then the
    whole module, sharded over the ranks)."""
    knobs = ctx.knobs
    if knobs.get("parallel", "ddp") == "fsdp":
        import torch
        from torch.distributed.device_mesh import init_device_mesh

        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            raise KnobError(
                f"--set parallel=fsdp needs torch >= 2.6 (FSDP2's fully_shard); this is {torch.__version__}"
            ) from None
        mesh = init_device_mesh(ctx.device, (ctx.world_size,))
        for sub in module.modules():
            if isinstance(sub, torch.nn.Linear):
                fully_shard(sub, mesh=mesh)
        return fully_shard(module, mesh=mesh)
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.local_rank] if ctx.device == "cuda" else None
    cap = float(knobs.get("bucket_cap_mb", 0.0))
    ddp = DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=cap if cap > 0 else None)
    if knobs.get("ddp_comm", "allreduce") == "none":
        ddp.register_comm_hook(None, _unreduced)
    return ddp


def spin(iterations: int) -> int:
    """Pure interpreter work: `iterations` turns of an integer loop, no call out of the interpreter."""
    acc = 0
    for i in range(iterations):
        acc = (acc + i) & 0xFFFF
    return acc


# Calibration: one trial lasts at least this long (the clock's resolution and a call's cost vanish in it);
# the fastest of this many trials sets the rate. The fastest, not the median: on the H200 machines' shared
# vCPUs the same loop ran at ~46 or ~90 ns per iteration, switching within a run (seen in the traces'
# gaps; the cause was not established), and the median picked either, so two runs of one setting got 2×
# different loops. The fastest gives every run the same work; the trace shows what that work took.
SPIN_TRIAL_S = 0.002
SPIN_TRIALS = 25


def calibrate_spin(target_us: float) -> Dict[str, Any]:
    """How many `spin` iterations take about `target_us` µs in this interpreter, and what they measured.

    The clock is read around whole calls only. The rate is the fastest of SPIN_TRIALS trials of at least
    SPIN_TRIAL_S each (after one untimed call: Python 3.11+ specialises the loop's bytecode on first runs);
    then `check_us` is the mean of calls of the chosen size, timed together, as a cross-check (longer when
    the CPU is shared).
    """
    if target_us < 0:
        raise KnobError(f"--set host_spin_us={target_us}: must not be negative")
    if target_us == 0:
        return {"target_us": 0.0, "iterations": 0}
    n = 1000
    spin(n)
    while True:
        t0 = time.perf_counter()
        spin(n)
        took = time.perf_counter() - t0
        if took >= SPIN_TRIAL_S:
            break
        n *= 2
    trials = []
    for _ in range(SPIN_TRIALS):
        t0 = time.perf_counter()
        spin(n)
        trials.append((time.perf_counter() - t0) / n)
    per_iter_s = min(trials)
    iterations = max(1, round(target_us * 1e-6 / per_iter_s))
    calls = max(1, int(SPIN_TRIAL_S * 1e6 / target_us))
    t0 = time.perf_counter()
    for _ in range(calls):
        spin(iterations)
    check_us = (time.perf_counter() - t0) / calls * 1e6
    return {
        "target_us": float(target_us),
        "iterations": iterations,
        "ns_per_iteration": round(per_iter_s * 1e9, 4),
        "check_us": round(check_us, 3),
    }


def set_tf32(ctx: Context) -> Dict[str, Any]:
    """Apply the `tf32` knob on CUDA (both ways, so the run does not depend on torch's defaults or on the
    environment); report what torch then says. On CPU nothing is set and nothing reported."""
    import torch

    if ctx.device != "cuda":
        return {}
    on = bool(ctx.knobs.get("tf32", False))
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")
    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def layered(
    layers: list, checkpoint_segments: int = 0, sync_every_layer: bool = False, spin_iterations: int = 0
) -> Any:
    """An nn.Module running `layers` in order; optionally checkpointed, reading each output on the host,
    or spinning the interpreter `spin_iterations` loop turns before each layer."""
    import torch

    if spin_iterations > 0 and checkpoint_segments > 0:
        raise KnobError(
            "--set host_spin_us works layer by layer and checkpoint_sequential runs the layers itself; "
            "set checkpoint=0 or host_spin_us=0"
        )

    class Layered(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seq = torch.nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            if checkpoint_segments > 0 and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint_sequential

                segments = min(checkpoint_segments, len(self.seq))
                try:
                    return checkpoint_sequential(self.seq, segments, x, use_reentrant=False)
                except TypeError:  # torch < 1.11 has no use_reentrant
                    return checkpoint_sequential(self.seq, segments, x)
            if sync_every_layer or spin_iterations > 0:
                for layer in self.seq:
                    if spin_iterations > 0:
                        spin(spin_iterations)
                    x = layer(x)
                    if sync_every_layer:
                        x.sum().item()  # a device→host read: the host waits for the device every layer
                return x
            return self.seq(x)

    return Layered()


def _grad_scaler(device: str) -> Any:
    import torch

    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device)
    return torch.cuda.amp.GradScaler()  # torch < 2.3


class Trainer:
    """One training step of a module: micro-batches, AMP, DDP, optimizer (or the article's zero_grad only),
    run eagerly, as one CUDA graph (`cuda_graphs`) or through torch.compile (`compile`)."""

    def __init__(
        self,
        ctx: Context,
        module: Any,
        optimizer: Optional[Callable[[Any], Any]] = None,
        graph_refuses: Optional[Dict[str, bool]] = None,
    ) -> None:
        """`graph_refuses`: the workload's own settings a CUDA graph cannot capture, by name, and whether
        each is on (heavy_mlp's sync_every_layer)."""
        import torch

        self.ctx = ctx
        knobs = ctx.knobs
        self.accum = max(1, int(knobs.get("grad_accum", 1)))
        self.amp = bool(knobs.get("amp", False))
        dtype = knobs.get("amp_dtype", "auto")
        if dtype == "auto":
            dtype = "float16" if ctx.device == "cuda" else "bfloat16"
        self.amp_dtype = getattr(torch, dtype)
        use_scaler = self.amp and ctx.device == "cuda" and dtype == "float16"
        refused = {
            "amp with float16 (GradScaler's inf check is a sync; use amp_dtype=bfloat16)": use_scaler,
            "DDP (nproc > 1)": ctx.distributed,
            "activation checkpointing (checkpoint > 0)": int(knobs.get("checkpoint", 0)) > 0,
            **(graph_refuses or {}),
        }
        check_modes(ctx.device, knobs, refused)
        self.module = module.to(ctx.torch_device)
        self.model = self.module
        self.fsdp = ctx.distributed and knobs.get("parallel", "ddp") == "fsdp"
        if ctx.distributed:
            self.model = distribute(ctx, self.module)
        self.model = compiled(self.model, knobs)
        self.optimizer = optimizer(self.module.parameters()) if optimizer is not None else None
        self.graphed = GraphedStep() if knobs.get("cuda_graphs") else None
        if self.graphed is not None:
            make_capturable(self.optimizer)
        self.scaler = _grad_scaler("cuda") if use_scaler else None
        tf32 = set_tf32(ctx)
        # What the manifest's `extra` records about this run (see `manifest_extra`).
        self.extra: Dict[str, Any] = {"tf32": tf32} if tf32 else {}

    def autocast(self) -> Any:
        import torch

        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(
            device_type=self.ctx.device, dtype=self.amp_dtype, **autocast_cache(self.graphed is not None)
        )

    def step(self, loss_of: Callable[..., Any], next_batch: Callable[[], Sequence[Any]] = tuple) -> Any:
        """`next_batch()` gives one micro-batch's inputs (device tensors), `loss_of(model, *batch)` runs its
        forward and returns its loss; this does the rest and returns the last micro-batch's loss (under
        cuda_graphs the graph's static loss tensor: read it after the step)."""
        maybe_slow(self.ctx)
        batches = [tuple(next_batch()) for _ in range(self.accum)]
        if self.graphed is None:
            return self._eager(loss_of, batches)
        return self.graphed.run(batches, lambda static: self._eager(loss_of, static))

    def prepare(self, loss_of: Callable[..., Any], next_batch: Callable[[], Sequence[Any]] = tuple) -> None:
        """Under cuda_graphs, capture the step now (at build, before any step is timed or profiled; its
        warm-up steps train on real batches) and note it in `extra`; else nothing."""
        if self.graphed is None:
            return
        batches = [tuple(next_batch()) for _ in range(self.accum)]
        self.graphed.capture(batches, lambda static: self._eager(loss_of, static))
        self.extra["cuda_graph"] = self.graphed.extra

    def _no_sync(self, last: bool) -> Any:
        """Between accumulated micro-batches, no gradient communication: DDP's `no_sync()`, FSDP2's
        `set_requires_gradient_sync(False)` (reduce-scatter on the last micro-batch only)."""
        if not self.ctx.distributed:
            return contextlib.nullcontext()
        if self.fsdp:
            self.model.set_requires_gradient_sync(last)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last else self.model.no_sync()

    def _eager(self, loss_of: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Any:
        """One step over the given micro-batches, one launch per kernel (also what a graph captures)."""
        # under a graph the gradients must be None when the capture starts (torch's recipe): its backward
        # then writes them (no accumulate, no zeroing kernel: the same kernels as eager in torch >= 2.0)
        zero = {} if self.graphed is None else {"set_to_none": True}
        loss = None
        for k, batch in enumerate(batches):
            last = k == len(batches) - 1
            no_sync = self._no_sync(last)
            with no_sync:
                with self.autocast():
                    loss = loss_of(self.model, *batch)
                if len(batches) > 1:
                    loss = loss / len(batches)
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.optimizer is not None:
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(**zero)
        else:
            self.module.zero_grad(**zero)
        return loss
