"""Many tiny elementwise ops in a Python loop: the host (interpreter, dispatcher, launches) is the bottleneck.

Each step runs `y = y * 1.0001 + 0.1` `n_ops` times on a `size`-element tensor; the device work per op is
far shorter than the time the host needs to issue it, so the GPU idles between kernels.
"""

from __future__ import annotations

from tracekit.capture.knobs import Knob
from tracekit.capture.workload import Context

NAME = "tiny_ops"
SUMMARY = "n_ops tiny elementwise ops in a Python loop per step (launch/interpreter bound)"
KNOBS = (
    Knob("n_ops", 300, "loop iterations per step (two ops each)", cpu=100, minimum=1),
    Knob("size", 16, "tensor elements", minimum=1),
)


class TinyOps:
    samples_per_step = 1

    def __init__(self, ctx: Context) -> None:
        import torch

        self.n_ops = ctx.knobs["n_ops"]
        self.t = torch.randn(ctx.knobs["size"], device=ctx.torch_device)

    def step(self) -> None:
        y = self.t
        for _ in range(self.n_ops):
            y = y * 1.0001 + 0.1
        self.t = y


def build(ctx: Context) -> TinyOps:
    return TinyOps(ctx)
