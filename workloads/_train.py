"""Training machinery the workloads share: the second article's tuning knobs.

AMP (autocast + GradScaler on CUDA; bf16 autocast without a scaler on CPU), gradient accumulation,
activation checkpointing (`checkpoint_sequential`), DDP (one process per device, `no_sync` between
accumulated micro-batches) and a deliberately slow rank. Stdlib + torch, torch imported inside functions.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Optional

from tracekit.capture.knobs import Knob
from tracekit.capture.workload import Context

TRAIN_KNOBS = (
    Knob("amp", False, "automatic mixed precision: autocast (+ GradScaler for float16)"),
    Knob(
        "amp_dtype",
        "auto",
        "autocast dtype; auto = float16 on CUDA, bfloat16 on CPU",
        choices=("auto", "float16", "bfloat16"),
    ),
    Knob("grad_accum", 1, "micro-batches accumulated per step (one optimizer step per step)"),
    Knob("checkpoint", 0, "activation checkpointing: checkpoint_sequential segments (0 = off)"),
    Knob("nproc", 1, "DDP processes, one per device (gloo on CPU, nccl on CUDA); 1 = no DDP"),
    Knob("slow_rank", -1, "DDP: this rank sleeps slow_ms at the start of every step (-1 = none)"),
    Knob("slow_ms", 0.0, "DDP: how long the slow rank sleeps per step, ms"),
)


def maybe_slow(ctx: Context) -> None:
    """The slow rank sleeps on the host, so its peers wait for it inside the gradient all-reduce."""
    if ctx.rank == ctx.knobs.get("slow_rank", -1) and ctx.knobs.get("slow_ms", 0.0) > 0:
        time.sleep(ctx.knobs["slow_ms"] / 1e3)


def layered(layers: list, checkpoint_segments: int = 0, sync_every_layer: bool = False) -> Any:
    """An nn.Module running `layers` in order; optionally checkpointed, or reading each output on the host."""
    import torch

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
            if sync_every_layer:
                for layer in self.seq:
                    x = layer(x)
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
    """One training step of a module: micro-batches, AMP, DDP, optimizer (or the article's zero_grad only)."""

    def __init__(self, ctx: Context, module: Any, optimizer: Optional[Callable[[Any], Any]] = None) -> None:
        import torch

        self.ctx = ctx
        knobs = ctx.knobs
        self.module = module.to(ctx.torch_device)
        self.model = self.module
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [ctx.local_rank] if ctx.device == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=ids)
        self.optimizer = optimizer(self.module.parameters()) if optimizer is not None else None
        self.accum = max(1, int(knobs.get("grad_accum", 1)))
        self.amp = bool(knobs.get("amp", False))
        dtype = knobs.get("amp_dtype", "auto")
        if dtype == "auto":
            dtype = "float16" if ctx.device == "cuda" else "bfloat16"
        self.amp_dtype = getattr(torch, dtype)
        use_scaler = self.amp and ctx.device == "cuda" and dtype == "float16"
        self.scaler = _grad_scaler("cuda") if use_scaler else None

    def autocast(self) -> Any:
        import torch

        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device, dtype=self.amp_dtype)

    def step(self, loss_of: Callable[[Any], Any]) -> None:
        """`loss_of(model)` runs one micro-batch's forward and returns its loss; this does the rest."""
        maybe_slow(self.ctx)
        for k in range(self.accum):
            last = k == self.accum - 1
            no_sync = self.model.no_sync() if self.ctx.distributed and not last else contextlib.nullcontext()
            with no_sync:
                with self.autocast():
                    loss = loss_of(self.model)
                if self.accum > 1:
                    loss = loss / self.accum
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.optimizer is not None:
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad()
        else:
            self.module.zero_grad()
