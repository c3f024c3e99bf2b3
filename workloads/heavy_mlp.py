"""The first article's compute-bound benchmark, as published.

MLP 1024 → 4096 (8 hidden 4096×4096 layers) → 512 with ReLU, batch 256; each iteration runs the forward,
`output.sum().backward()` and `zero_grad()` (no optimizer step). The article timed 500 iterations with CUDA
events after 10 warm-up iterations: 84.6 ms/iteration on Python 3.9, 76.2 ms on 3.11 (A10).
On CPU the default sizes shrink so a capture takes seconds; every size is a knob. A host-bound shape (the
host issues kernels slower than the GPU runs them: 6.3 ms/step eager on an H200, 0.73 ms as one CUDA
graph): `--set hidden=512 --set layers=24 --set batch_size=64 --set in_features=512 --set out_features=512
--set optimizer=sgd`; `--set cuda_graphs=true` or `--set compile=true` runs the same step graphed or
compiled (workloads/_modes.py).
"""

from __future__ import annotations

from typing import Any

from tracekit.capture.knobs import Knob
from tracekit.capture.workload import Context
from workloads._train import TRAIN_KNOBS, Trainer, calibrate_spin, layered

NAME = "heavy_mlp"
SUMMARY = "MLP 1024→4096 (8×4096²)→512, ReLU, batch 256: forward, output.sum().backward(), zero_grad"
KNOBS = (
    Knob("batch_size", 256, "samples per micro-batch", cpu=32, minimum=1),
    Knob("in_features", 1024, "input width", cpu=256, minimum=1),
    Knob("hidden", 4096, "hidden width", cpu=512, minimum=1),
    Knob("layers", 8, "hidden×hidden layers", cpu=2, minimum=1),
    Knob("out_features", 512, "output width", cpu=128, minimum=1),
    Knob("sync_every_layer", False, "read each layer's output on the host (.item()): one sync per layer"),
    Knob(
        "optimizer",
        "none",
        "optimizer step after backward (the article has none)",
        choices=("none", "sgd", "adam"),
    ),
    Knob("lr", 1e-4, "optimizer learning rate"),
) + TRAIN_KNOBS


class HeavyMLP:
    def __init__(self, ctx: Context) -> None:
        import torch

        k = ctx.knobs
        nn = torch.nn
        layers = [nn.Linear(k["in_features"], k["hidden"]), nn.ReLU()]
        for _ in range(k["layers"]):
            layers += [nn.Linear(k["hidden"], k["hidden"]), nn.ReLU()]
        layers.append(nn.Linear(k["hidden"], k["out_features"]))
        spin = calibrate_spin(k["host_spin_us"])
        module = layered(layers, k["checkpoint"], k["sync_every_layer"], spin["iterations"])
        optimizer = None
        if k["optimizer"] == "sgd":
            optimizer = lambda params: torch.optim.SGD(params, lr=k["lr"])  # noqa: E731
        elif k["optimizer"] == "adam":
            optimizer = lambda params: torch.optim.Adam(params, lr=k["lr"])  # noqa: E731
        refuses = {"sync_every_layer (a .item() per layer)": bool(k["sync_every_layer"])}
        self.trainer = Trainer(ctx, module, optimizer, graph_refuses=refuses)
        self.x = torch.randn(k["batch_size"], k["in_features"], device=ctx.torch_device)
        self.samples_per_step = k["batch_size"] * self.trainer.accum
        self.trainer.prepare(self._loss, self._batch)
        self.manifest_extra = dict(self.trainer.extra, host_spin=spin)

    def _batch(self) -> Any:
        return (self.x,)

    def _loss(self, model: Any, x: Any) -> Any:
        return model(x).sum()

    def step(self) -> None:
        self.trainer.step(self._loss, self._batch)


def build(ctx: Context) -> HeavyMLP:
    return HeavyMLP(ctx)
