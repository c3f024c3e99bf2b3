"""Lightning's PyTorchProfiler on the seed recipe's model and loader, written the way its users write it
(`Trainer(profiler=PyTorchProfiler(dirpath=...))`, its default schedule; no tracekit in the script).

    python lightning_profiler.py --mode profile --log ./log
    python lightning_profiler.py --mode truth --out truth.json     # no profiler: the steady state
    tracekit capture --script lightning_profiler.py -o runs -- --mode profile --log ./log

Needs lightning (or pytorch_lightning); without it the script says so and exits 0 (the CPU smoke run).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from common import build, vision_args, write_truth


def lightning():
    try:
        import lightning as L  # noqa: N812

        return L, L.pytorch.profilers.PyTorchProfiler
    except ImportError:
        pass
    try:
        import pytorch_lightning as L  # noqa: N812

        return L, L.profilers.PyTorchProfiler
    except ImportError:
        return None, None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "truth"), default="profile")
    p.add_argument("--log", default="./log")
    p.add_argument("--out")
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=8, help="--mode truth: steps left out of the mean")
    vision_args(p)
    args = p.parse_args()
    L, PyTorchProfiler = lightning()
    if L is None:
        print("lightning_profiler: skipped, lightning is not installed", flush=True)
        sys.exit(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, loader = build(args, torch.device("cpu"))

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.loss = torch.nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return self.loss(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    class Clock(L.Callback):
        """The unprofiled truth: the host time between training-batch ends."""

        def __init__(self) -> None:
            self.ends: list = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.ends.append(time.perf_counter())

    clock = Clock()
    profiler = PyTorchProfiler(dirpath=args.log, filename="perf") if args.mode == "profile" else None
    trainer = L.Trainer(
        max_steps=args.max_steps,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        profiler=profiler,
        callbacks=[clock],
    )
    trainer.fit(Module(), train_dataloaders=loader)
    if args.mode == "truth":
        ends = clock.ends[args.warmup :]
        steps = [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]
        doc = {
            "script": "lightning_profiler.py",
            "steady_step_ms": (ends[-1] - ends[0]) * 1e3 / (len(ends) - 1),
            "median_step_ms": sorted(steps)[len(steps) // 2],
            "step_ms": [round(t, 3) for t in steps],
            "lightning": L.__version__,
            "device": str(device),
        }
        write_truth(doc, args.out)


if __name__ == "__main__":
    main()
