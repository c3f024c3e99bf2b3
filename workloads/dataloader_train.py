"""The first article's input-pipeline benchmark, as published.

A 10,000×512 random dataset whose `__getitem__` returns `x*2-1` and one of 10 labels, DataLoader batch 128,
shuffle, num_workers=4, pin_memory; MLP 512→1024→1024→10, CrossEntropy, Adam lr 1e-4, `loss.item()`
printed every 20 batches. The article reports 534.8 (Python 3.9) vs 606.1 (3.11) samples/s.
One step is one optimizer step (`grad_accum` batches); when the epoch ends the next one starts
(`DistributedSampler.set_epoch` under DDP). `sample_sleep_ms` makes `__getitem__` slow on purpose.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterator

from tracekit.capture.knobs import Knob, KnobError
from tracekit.capture.workload import Context
from workloads._train import TRAIN_KNOBS, Trainer, calibrate_spin, layered

NAME = "dataloader_train"
SUMMARY = "10k×512 random dataset (x*2-1), DataLoader batch 128, 4 workers, pin_memory; MLP, Adam"
KNOBS = (
    Knob("dataset_size", 10000, "samples in the dataset", cpu=1024),
    Knob("features", 512, "sample width", cpu=128),
    Knob("classes", 10, "label classes"),
    Knob("hidden", 1024, "hidden width", cpu=256),
    Knob("batch_size", 128, "samples per batch", cpu=32),
    Knob("lr", 1e-4, "Adam learning rate"),
    Knob("shuffle", True, "shuffle every epoch"),
    Knob("num_workers", 4, "DataLoader worker processes (0 = load in the training process)", cpu=2),
    Knob("pin_memory", True, "page-locked host batches, copied with non_blocking=True", cpu=False),
    Knob("prefetch_factor", 2, "batches each worker loads ahead (only with num_workers > 0)"),
    Knob("persistent_workers", False, "keep workers alive between epochs (only with num_workers > 0)"),
    Knob("sample_sleep_ms", 0.0, "sleep in every __getitem__, ms (a slow input pipeline on purpose)"),
    Knob("log_every", 20, "print loss.item() every N batches, as the article does (0 = never)"),
) + TRAIN_KNOBS


class RandomDataset:
    """Map-style dataset (any object with __len__/__getitem__ works with DataLoader; module level so that
    spawn-started workers can unpickle it)."""

    def __init__(self, size: int, features: int, classes: int, seed: int, sleep_ms: float) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.data = torch.randn(size, features, generator=gen)
        self.labels = torch.randint(0, classes, (size,), generator=gen)
        self.sleep_s = sleep_ms / 1e3

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)
        return self.data[i] * 2 - 1, self.labels[i]


class DataLoaderTrain:
    def __init__(self, ctx: Context) -> None:
        import torch

        k = ctx.knobs
        self.ctx = ctx
        ds = RandomDataset(k["dataset_size"], k["features"], k["classes"], k["seed"], k["sample_sleep_ms"])
        self.sampler = None
        if ctx.distributed:
            from torch.utils.data.distributed import DistributedSampler

            self.sampler = DistributedSampler(
                ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=k["shuffle"], seed=k["seed"]
            )
        extra = {}
        if k["num_workers"] > 0:
            extra = {"prefetch_factor": k["prefetch_factor"], "persistent_workers": k["persistent_workers"]}
        self.pin = bool(k["pin_memory"]) and ctx.device == "cuda"
        self.loader = torch.utils.data.DataLoader(
            ds,
            batch_size=k["batch_size"],
            shuffle=k["shuffle"] and self.sampler is None,
            sampler=self.sampler,
            num_workers=k["num_workers"],
            pin_memory=self.pin,
            drop_last=True,
            **extra,
        )
        if len(self.loader) == 0:
            raise KnobError(
                f"--set dataset_size={k['dataset_size']} holds no full batch of batch_size={k['batch_size']}"
                + (f" per rank ({ctx.world_size} ranks)" if ctx.distributed else "")
                + "; raise dataset_size or lower batch_size"
            )
        nn = torch.nn
        spin = calibrate_spin(k["host_spin_us"])
        module = layered(
            [
                nn.Linear(k["features"], k["hidden"]),
                nn.ReLU(),
                nn.Linear(k["hidden"], k["hidden"]),
                nn.ReLU(),
                nn.Linear(k["hidden"], k["classes"]),
            ],
            k["checkpoint"],
            spin_iterations=spin["iterations"],
        )
        self.trainer = Trainer(ctx, module, lambda params: torch.optim.Adam(params, lr=k["lr"]))
        self.criterion = nn.CrossEntropyLoss()
        self.batches = self._batches()
        self.seen = 0
        self.log_due = False
        self.log_every = k["log_every"]
        self.trainer.prepare(self._loss, self._batch)  # cuda_graphs: captured on the first batches
        self.samples_per_step = k["batch_size"] * self.trainer.accum
        self.manifest_extra = dict(self.trainer.extra, host_spin=spin)

    def _batches(self) -> Iterator[Any]:
        epoch = 0
        while True:
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            yield from self.loader
            epoch += 1

    def _batch(self) -> Any:
        x, y = next(self.batches)
        self.seen += 1
        self.log_due |= bool(self.log_every) and self.seen % self.log_every == 0
        dev = self.ctx.torch_device
        return x.to(dev, non_blocking=self.pin), y.to(dev, non_blocking=self.pin)

    def _loss(self, model: Any, x: Any, y: Any) -> Any:
        return self.criterion(model(x), y)

    def step(self) -> None:
        loss = self.trainer.step(self._loss, self._batch)
        if self.log_due:  # the step held batch number k * log_every
            self.log_due = False
            value = loss.item()  # a sync every log_every batches, as in the article
            if self.ctx.rank == 0:
                print(f"batch {self.seen}: loss {value:.4f}", file=sys.stdout, flush=True)


def build(ctx: Context) -> DataLoaderTrain:
    return DataLoaderTrain(ctx)
