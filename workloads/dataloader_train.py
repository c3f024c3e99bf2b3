"""The first article's input-pipeline benchmark, as published.

A 10,000×512 random dataset whose `__getitem__` returns `x*2-1` and one of 10 labels, DataLoader batch 128,
shuffle, num_workers=4, pin_memory; MLP 512→1024→1024→10, CrossEntropy, Adam lr 1e-4, `loss.item()`
printed every 20 batches. The article reports 534.8 (Python 3.9) vs 606.1 (3.11) samples/s.
One step is one optimizer step (`grad_accum` batches); when the epoch ends the next one starts
(`DistributedSampler.set_epoch` under DDP). `sample_sleep_ms` makes `__getitem__` slow on purpose;
`image_size` gives every sample CPU-heavy work made of plain torch ops (an image decoded and augmented,
see `image_work`), so a loader-bound run can be made on any machine; `batch_on_device` is its
counterpart without an input pipeline (one batch fetched once and kept on the device).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Iterator, Optional

from tracekit.capture.knobs import Knob, KnobError
from tracekit.capture.workload import Context
from workloads._train import TRAIN_KNOBS, Trainer, calibrate_spin, layered

NAME = "dataloader_train"
SUMMARY = "10k×512 random dataset (x*2-1), DataLoader batch 128, 4 workers, pin_memory; MLP, Adam"
KNOBS = (
    Knob("dataset_size", 10000, "samples in the dataset", cpu=1024, minimum=1),
    Knob("features", 512, "sample width", cpu=128, minimum=1),
    Knob("classes", 10, "label classes", minimum=1),
    Knob("hidden", 1024, "hidden width", cpu=256, minimum=1),
    Knob("batch_size", 128, "samples per batch", cpu=32, minimum=1),
    Knob("lr", 1e-4, "Adam learning rate"),
    Knob("shuffle", True, "shuffle every epoch"),
    Knob("num_workers", 4, "DataLoader worker processes (0 = load in the training process)", cpu=2),
    Knob("pin_memory", True, "page-locked host batches, copied with non_blocking=True", cpu=False),
    Knob("prefetch_factor", 2, "batches each worker loads ahead (only with num_workers > 0)", minimum=1),
    Knob("persistent_workers", False, "keep workers alive between epochs (only with num_workers > 0)"),
    Knob("sample_sleep_ms", 0.0, "sleep in every __getitem__, ms (a slow input pipeline on purpose)"),
    Knob(
        "image_size",
        0,
        "CPU work in every __getitem__ (plain torch ops): decode a 3×S×S image (inverse DCT of its 8×8 "
        "blocks), random-resized-crop it to 0.7·S, flip, normalize, pool to `features` values; S = this "
        "(a multiple of 8, ≥ 16; 0 = off)",
    ),
    Knob(
        "batch_on_device",
        False,
        "fetch one batch once and keep it on the device: the step without its input pipeline",
    ),
    Knob("log_every", 20, "print loss.item() every N batches, as the article does (0 = never)"),
) + TRAIN_KNOBS


def idct_matrix(n: int = 8) -> Any:
    """The orthonormal DCT-II matrix C (n×n): a block's pixels are Cᵀ · coefficients · C."""
    import torch

    k = torch.arange(n, dtype=torch.float32)
    c = torch.cos(math.pi * (2 * k[None, :] + 1) * k[:, None] / (2 * n)) * math.sqrt(2.0 / n)
    c[0] /= math.sqrt(2.0)
    return c


def image_work(index: int, size: int, features: int, seed: int, basis: Any) -> Any:
    """A sample's decode-like and augment-like CPU work, in plain torch ops (no torchvision).

    Decode: quantised DCT coefficients of a 3×S×S image (from a generator seeded by the index, as a
    JPEG's entropy decoding gives them), dequantised and inverse-transformed block by block (Cᵀ·B·C on
    every 8×8 block), level-shifted and clamped to 0..255. Augment: a random crop of 50-100 % of the side
    resized to 0.7·S (bilinear), a random horizontal flip, normalization; then pooled to `features`
    values (what the model takes). Its cost grows with S²; in a DataLoader worker torch runs it on one
    thread."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    blocks = size // 8
    coef = torch.randint(-16, 17, (3, blocks, blocks, 8, 8), generator=gen).float()
    quant = 1.0 + torch.arange(64, dtype=torch.float32).reshape(8, 8) / 4
    pixels = basis.t() @ (coef * quant) @ basis
    img = pixels.permute(0, 1, 3, 2, 4).reshape(3, size, size).add(128.0).clamp(0.0, 255.0)
    r = torch.rand(4, generator=gen)
    side = max(8, int(size * (0.5 + 0.5 * float(r[0]))))
    y0, x0 = int((size - side) * float(r[1])), int((size - side) * float(r[2]))
    crop = max(8, size * 7 // 10)
    patch = img[:, y0 : y0 + side, x0 : x0 + side].unsqueeze(0)
    out = F.interpolate(patch, size=(crop, crop), mode="bilinear", align_corners=False)[0]
    if float(r[3]) < 0.5:
        out = out.flip(-1)
    out = out.div(255.0).sub(0.45).div(0.226)
    return F.adaptive_avg_pool1d(out.reshape(1, 1, -1), features).reshape(features)


class RandomDataset:
    """Map-style dataset (any object with __len__/__getitem__ works with DataLoader; module level so that
    spawn-started workers can unpickle it). With `image_size` > 0 a sample is `image_work`'s output."""

    def __init__(
        self, size: int, features: int, classes: int, seed: int, sleep_ms: float, image_size: int = 0
    ) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.data = torch.randn(size, features, generator=gen)
        self.labels = torch.randint(0, classes, (size,), generator=gen)
        self.sleep_s = sleep_ms / 1e3
        self.features, self.seed = features, seed
        if image_size and (image_size < 16 or image_size % 8):
            raise KnobError(f"--set image_size={image_size}: use a multiple of 8, at least 16 (0 = off)")
        self.image_size = image_size
        self.basis: Optional[Any] = idct_matrix() if image_size else None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)
        if self.image_size:
            x = image_work(i, self.image_size, self.features, self.seed, self.basis)
            return x, self.labels[i]
        return self.data[i] * 2 - 1, self.labels[i]


class DataLoaderTrain:
    def __init__(self, ctx: Context) -> None:
        import torch

        k = ctx.knobs
        self.ctx = ctx
        ds = RandomDataset(
            k["dataset_size"], k["features"], k["classes"], k["seed"], k["sample_sleep_ms"], k["image_size"]
        )
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
        self.on_device: Optional[Any] = None
        if k["batch_on_device"]:
            x, y = next(iter(self.loader))
            self.on_device = (x.to(ctx.torch_device), y.to(ctx.torch_device))
        # the fetches are timed into the capture's steps (none with the batch kept on the device)
        self.batches = self._batches() if self.on_device else ctx.batches(self._batches(), self.loader)
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
        if self.on_device is not None:  # batch_on_device: no input pipeline in the step
            self.seen += 1
            self.log_due |= bool(self.log_every) and self.seen % self.log_every == 0
            return self.on_device
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
