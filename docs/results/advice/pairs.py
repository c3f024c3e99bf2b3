"""A/B pairs for the advice rules (issue 39): each knob a rule names, turned for real, with A and B
alternating in one process, and a trace of each side captured the users' way.

    PYTHONPATH=. python3 docs/results/advice/pairs.py --out OUT            # on one GPU (run_gpu.sh)
    PYTHONPATH=. python3 docs/results/advice/pairs.py --out OUT --smoke    # a quick try on a CPU

Why one process: measured in separate processes a ViT step without its per-step `.item()` looked 10-18 %
faster; alternating in one process the same change saved 2-3 % (issue 39). The host's speed states (CPU
frequency, what else runs) move between processes and minutes by more than many knobs change, so each
group of configurations is built once and timed in rounds: every configuration of the group runs a few
untimed steps, then `--steps` timed ones, the order reversed every other round (A B C | C B A | ...), so a
drift falls on every configuration alike. A pair's measured ratio is B/A per round (the round's median
step, or for the loader its mean: a loader's stalls come in bursts), reported as the median over rounds
with its spread; the step times are CUDA events at the step boundaries (no sync inside a step), as
`tracekit capture` times them.

Then each configuration is captured once the way the seed article profiles its loop (`torch.profiler.
profile(schedule=schedule(wait=1, warmup=1, active=3, repeat=...), on_trace_ready=
tensorboard_trace_handler(...), record_shapes=True, with_stack=True)`) into `runs/<config>/`, beside a
`manifest.json` in `tracekit capture`'s format whose unprofiled steps are that configuration's interleaved
timed steps, so `tracekit parse runs/<config>` gives a capture whose unprofiled step is the one measured
against B. The configurations and pairs are the tables GROUPS, CONFIGS and PAIRS below; `--groups` picks
groups; `--budget-s` starts no group after that many seconds (a time-limited call still writes its
results). Writes `OUT/results.json` (every timed step, every pair's ratios) and `OUT/runs/`; run_gpu.sh
packs the runs into a few tars. Stdlib + torch (+ torchvision where installed: ResNet-18 and FakeData;
without it, the same ResNet-18 and an image pipeline written in plain torch).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from torch import nn

from tracekit.capture.calibrate import calibrate_quietly
from tracekit.capture.environment import environment
from tracekit.capture.loader import Fetches, describe_loader, loader_lists, window_hides_loader


# ---------------------------------------------------------------------------------------------------------
# Sizes: the GPU's, and a smoke test's on a CPU.
@dataclass
class Sizes:
    image: int = 224  # ResNet input side
    batch: int = 64  # ResNet batch (pinned, layout, precision, GPU-bound sync)
    r50_batch: int = 32  # the held-out ResNet-50 group (layout, precision, pinned)
    r50big_batch: int = 128  # ResNet-50 on a device-resident batch, large enough to keep the GPU busy
    vit_batch: int = 64  # the held-out transformers (precision): ViT-S/16 images, GPT-2 sequences
    gpt2_batch: int = 8
    gpt2_tokens: int = 512
    mlp_width: int = 512  # host-bound MLP: many tiny kernels
    mlp_layers: int = 24
    mlp_batch: int = 64
    loader_batch: int = 32  # the article's recipe: ResNet-18 behind a DataLoader
    loader_source: int = 256  # FakeData's image side before RandomResizedCrop
    epoch_steps: int = 20  # the loader group's epoch (a round runs one epoch of each configuration)
    workers: int = 2
    more_workers: int = 6


GPU_SIZES = Sizes()
SMOKE_SIZES = Sizes(
    image=32,
    batch=2,
    mlp_width=32,
    mlp_layers=3,
    mlp_batch=4,
    r50_batch=2,
    r50big_batch=2,
    vit_batch=2,
    gpt2_batch=1,
    gpt2_tokens=16,
    loader_batch=4,
    loader_source=40,
    epoch_steps=6,
    workers=1,
    more_workers=2,
)


# ---------------------------------------------------------------------------------------------------------
# Models and inputs
def resnet18(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-18, else the same network in plain torch (CPU smoke runs without torchvision)."""
    try:
        import torchvision

        return torchvision.models.resnet18(num_classes=num_classes)
    except ImportError:
        pass

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            idt = x if self.down is None else self.down(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + idt)

    layers: List[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def _convnet(arch: str) -> nn.Module:
    """resnet18 / resnet50 (torchvision), `timm:NAME` (a timm model from its configuration) or `tv:NAME`
    (a torchvision model by name)."""
    if arch.startswith("timm:"):
        import timm

        return timm.create_model(arch.split(":", 1)[1], pretrained=False)
    if arch.startswith("tv:"):
        import torchvision

        return torchvision.models.get_model(arch.split(":", 1)[1])
    return resnet50() if arch == "resnet50" else resnet18()


def resnet50() -> nn.Module:
    """torchvision's ResNet-50 (the held-out group: bottleneck blocks, 53 batch norms; no plain-torch
    fallback: without torchvision the group is skipped)."""
    import torchvision

    return torchvision.models.resnet50()


def mlp(s: Sizes) -> nn.Module:
    mods: List[nn.Module] = []
    for _ in range(s.mlp_layers):
        mods += [nn.Linear(s.mlp_width, s.mlp_width), nn.ReLU()]
    mods.append(nn.Linear(s.mlp_width, s.mlp_width))
    return nn.Sequential(*mods)


class PlainImages(torch.utils.data.Dataset):
    """FakeData + RandomResizedCrop/flip/ToTensor/Normalize in plain torch, where torchvision is missing."""

    def __init__(self, n: int, side: int, out: int) -> None:
        self.n, self.side, self.out = n, side, out

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, self.side, self.side), generator=g, dtype=torch.uint8)
        c = int(self.side * (0.5 + 0.5 * torch.rand((), generator=g).item()))
        y0 = int(torch.randint(0, self.side - c + 1, (), generator=g))
        crop = img[:, y0 : y0 + c, y0 : y0 + c].float().unsqueeze(0) / 255.0
        x = nn.functional.interpolate(crop, size=(self.out, self.out), mode="bilinear", align_corners=False)[
            0
        ]
        if torch.rand((), generator=g).item() < 0.5:
            x = x.flip(-1)
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        return (x - mean) / std, i % 1000


def images(n: int, s: Sizes) -> Any:
    """The article's input pipeline: images decoded and augmented in the DataLoader's workers."""
    try:
        import torchvision
        from torchvision import transforms
    except ImportError:
        return PlainImages(n, s.loader_source, s.image)
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(s.image),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    return torchvision.datasets.FakeData(
        size=n, image_size=(3, s.loader_source, s.loader_source), transform=tf
    )


# ---------------------------------------------------------------------------------------------------------
# A workload: one training step, and (for the loader group) the epoch it fetches from.
@dataclass
class Workload:
    step: Callable[[], None]
    samples: int
    loader: Any = None  # the DataLoader, for the loader group
    fetches: Fetches = field(default_factory=Fetches)
    notes: Dict[str, Any] = field(default_factory=dict)
    batches: Optional[Iterator[Any]] = None

    def epoch(self) -> None:
        """Start an epoch: `iter(loader)` (a non-persistent loader starts its workers here)."""
        self.batches = self.fetches.timed(self.loader)

    def next_batch(self) -> Any:
        """The next batch; a new epoch where this one ends (a capture may run past an epoch)."""
        if self.batches is None:
            self.epoch()
        try:
            return next(self.batches)  # type: ignore[arg-type]
        except StopIteration:
            self.epoch()
            return next(self.batches)  # type: ignore[arg-type]


@dataclass
class Ctx:
    dev: torch.device
    s: Sizes
    cuda: bool

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def _train(model: nn.Module, opt: Any, loss_fn: Callable[..., torch.Tensor], set_to_none: bool = True) -> Any:
    def run(x: torch.Tensor, y: Any) -> torch.Tensor:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        return loss

    return run


def build_resnet(
    ctx: Ctx,
    copy: str = "pageable",
    layout: str = "nchw",
    precision: str = "fp32",
    after: str = "",
    arch: str = "resnet18",
    batch: Optional[int] = None,
) -> Workload:
    """ResNet-18 (or `arch` resnet50, at its own batch) on a batch made on the host each step (`copy`:
    pageable `.to()`, pinned + non_blocking, or `device`: kept on the device, no copy), NCHW or
    channels_last, fp32 (torch's defaults: TF32 convolutions, fp32 matmuls) or autocast bf16; `after` the
    step: `item` (loss.item()) or `sync` (torch.cuda.synchronize())."""
    s, dev = ctx.s, ctx.dev
    torch.manual_seed(0)
    fmt = torch.channels_last if layout == "cl" else torch.contiguous_format
    model = _convnet(arch).to(dev).to(memory_format=fmt)
    batch = batch or (s.r50_batch if arch == "resnet50" else s.batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ce = nn.CrossEntropyLoss()
    host = torch.randn(batch, 3, s.image, s.image)
    pinned = copy == "pinned" and ctx.cuda
    if pinned:
        host = host.pin_memory()
    y = torch.randint(0, 1000, (batch,), device=dev)
    on_dev = host.to(dev).contiguous(memory_format=fmt) if copy == "device" else None
    run = _train(model, opt, ce)
    autocast = (
        (lambda: torch.autocast(dev.type, dtype=torch.bfloat16))
        if precision == "bf16"
        else contextlib.nullcontext
    )

    def step() -> None:
        x = on_dev if on_dev is not None else host.to(dev, non_blocking=pinned)
        if layout == "cl" and on_dev is None:
            x = x.contiguous(memory_format=fmt)
        with autocast():
            loss = run(x, y)
        if after == "item":
            loss.item()
        elif after == "sync":
            ctx.sync()

    return Workload(
        step,
        batch,
        notes={
            "arch": arch,
            "pinned": pinned,
            "copy": copy,
            "layout": layout,
            "precision": precision,
            "after": after,
        },
    )


def build_transformer(ctx: Ctx, arch: str = "vit", precision: str = "fp32") -> Workload:
    """The held-out transformers for the precision advice: timm's ViT-S/16 (batch 64, 224 px) or
    transformers' GPT-2 small (batch 8 x 512 tokens, a language-model loss), both initialised from their
    configurations (no download), AdamW, the batch kept on the device; fp32 (torch's defaults) or autocast
    bf16. Needs timm / transformers (the GPU machine has both; without them the group is skipped)."""
    s, dev = ctx.s, ctx.dev
    torch.manual_seed(0)
    if arch == "vit":
        import timm

        model = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev)
        x = torch.randn(s.vit_batch, 3, s.image, s.image, device=dev)
        y = torch.randint(0, 1000, (s.vit_batch,), device=dev)
        ce = nn.CrossEntropyLoss()

        def loss_of() -> torch.Tensor:
            return ce(model(x), y)

        batch = s.vit_batch
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config()).to(dev)
        ids = torch.randint(0, 50257, (s.gpt2_batch, s.gpt2_tokens), device=dev)

        def loss_of() -> torch.Tensor:
            return model(input_ids=ids, labels=ids).loss

        batch = s.gpt2_batch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = (
        (lambda: torch.autocast(dev.type, dtype=torch.bfloat16))
        if precision == "bf16"
        else contextlib.nullcontext
    )

    def step() -> None:
        with autocast():
            loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step, batch, notes={"arch": arch, "precision": precision})


def build_mlp(
    ctx: Ctx, mode: str = "eager", optim: str = "sgd", set_to_none: bool = True, after: str = ""
) -> Workload:
    """The host-bound MLP (many tiny kernels): eager, one CUDA graph per step, or torch.compile's
    reduce-overhead; SGD with momentum or Adam (`adam_loop`: foreach=False, `adam_foreach`, `adam_fused`)."""
    s, dev = ctx.s, ctx.dev
    torch.manual_seed(0)
    model = mlp(s).to(dev)
    if optim == "sgd":
        opt: Any = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    else:
        kind = optim.split("_", 1)[1]
        kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[kind]
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, **kw)
    x = torch.randn(s.mlp_batch, s.mlp_width, device=dev)
    fwd = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model

    def train() -> torch.Tensor:
        loss = fwd(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        return loss

    run: Callable[[], Any] = train
    if mode == "graph":  # torch's whole-network recipe: warm up on a side stream, capture, replay
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = train()
        run = graph.replay
    else:
        static_loss = None

    def step() -> None:
        loss = run()
        if after == "item":
            (loss if loss is not None else static_loss).item()
        elif after == "sync":
            ctx.sync()

    return Workload(
        step, s.mlp_batch, notes={"mode": mode, "optim": optim, "set_to_none": set_to_none, "after": after}
    )


def build_article(
    ctx: Ctx, workers: Optional[int] = None, pin: bool = False, persistent: bool = False, prefetch: int = 2
) -> Workload:
    """The seed article's recipe: ResNet-18 in fp32 behind a DataLoader of images augmented in its
    workers (2 by default), pageable copies; the loop fetches each step's batch itself."""
    s, dev = ctx.s, ctx.dev
    torch.manual_seed(0)
    n = workers if workers is not None else s.workers
    model = resnet18().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = _train(model, opt, nn.CrossEntropyLoss())
    loader = torch.utils.data.DataLoader(
        images(s.loader_batch * s.epoch_steps, s),
        batch_size=s.loader_batch,
        shuffle=True,
        num_workers=n,
        pin_memory=pin and ctx.cuda,
        persistent_workers=persistent and n > 0,
        prefetch_factor=prefetch if n > 0 else None,
        drop_last=True,
    )
    w = Workload(lambda: None, s.loader_batch, loader=loader)
    w.fetches.note(loader, "fetch")

    def step() -> None:
        xb, yb = w.next_batch()
        x, y = xb.to(dev, non_blocking=pin), yb.to(dev, non_blocking=pin)
        run(x, y)

    w.step = step
    w.notes.update(describe_loader(loader))
    return w


# ---------------------------------------------------------------------------------------------------------
# The tables: configurations (one workload each), the groups timed together, and the pairs.
@dataclass(frozen=True)
class Config:
    name: str
    group: str
    what: str
    build: Callable[[Ctx], Workload]
    cuda_only: bool = False  # a CUDA graph, pinned memory: no CPU smoke run
    compiles: bool = False  # torch.compile: skipped with --no-compile


def _xf(arch: str, precision: str = "fp32") -> Callable[[Ctx], Workload]:
    return lambda c: build_transformer(c, arch, precision)


def _effnet(**kw: str) -> Callable[[Ctx], Workload]:
    return lambda c: build_resnet(c, copy="device", arch="timm:efficientnet_b0", batch=c.s.r50big_batch, **kw)


def _tv(arch: str, **kw: str) -> Callable[[Ctx], Workload]:
    return lambda c: build_resnet(c, copy="device", arch=f"tv:{arch}", batch=c.s.r50big_batch // 2, **kw)


def _tvp(arch: str, **kw: str) -> Callable[[Ctx], Workload]:
    """A torchvision model at batch 64 on a host batch copied each step (pageable unless `copy`)."""
    return lambda c: build_resnet(c, arch=f"tv:{arch}", batch=c.s.r50big_batch // 2, **kw)


def _r50big(**kw: str) -> Callable[[Ctx], Workload]:
    return lambda c: build_resnet(c, copy="device", arch="resnet50", batch=c.s.r50big_batch, **kw)


def _r50(**kw: str) -> Callable[[Ctx], Workload]:
    return lambda c: build_resnet(c, arch="resnet50", **kw)


def _tv_family(key: str, group: str, arch: str, label: str, host: bool = False) -> tuple:
    """A held-out torchvision model's configurations at batch 64: fp32 (`key`), bf16 and channels_last,
    on a batch kept on the device, or with `host` on a host batch copied pageable each step (and one
    pinned + non_blocking), in the order pairs.py has always run them."""
    build = _tvp if host else _tv
    where = "a host batch of 64 copied pageable" if host else "batch 64"
    pre = "... pageable, " if host else "... "
    out = [Config(key, group, f"torchvision {label} fp32 (held out), {where}", build(arch))]
    if host:
        out.append(Config(f"{key}_pin", group, "... pinned + non_blocking", build(arch, copy="pinned")))
    out.append(Config(f"{key}_bf16", group, f"{pre}under autocast bf16", build(arch, precision="bf16")))
    out.append(Config(f"{key}_cl", group, f"{pre}channels_last", build(arch, layout="cl")))
    return tuple(out)


def _bf16_family(key: str, arch: str, label: str) -> tuple:
    """A held-out torchvision model under autocast bf16 at batch 64 on the device, NCHW (`key`b) and
    channels_last (`key`b_cl): channels_last where batch norm runs torch's own kernels (the 16-bit
    inputs'), whose factor (advice.TORCH_CHANNELS_LAST_BATCHNORM_OVER_PASSES) was set on other models."""
    return (
        Config(
            f"{key}b",
            "bf16cl",
            f"torchvision {label} under autocast bf16 (held out), batch 64",
            _tv(arch, precision="bf16"),
        ),
        Config(
            f"{key}b_cl", "bf16cl", "... channels_last and bf16", _tv(arch, layout="cl", precision="bf16")
        ),
    )


CONFIGS = (
    Config("r18", "resnet", "ResNet-18 fp32 NCHW, batch copied pageable each step", build_resnet),
    Config(
        "r18_pinned",
        "resnet",
        "... batch pinned, copied non_blocking",
        lambda c: build_resnet(c, copy="pinned"),
        cuda_only=True,
    ),
    Config("r18_cl", "resnet", "... model and batch channels_last", lambda c: build_resnet(c, layout="cl")),
    Config("r18_bf16", "resnet", "... under autocast bf16", lambda c: build_resnet(c, precision="bf16")),
    Config(
        "r18_cl_bf16",
        "resnet",
        "... channels_last and bf16",
        lambda c: build_resnet(c, layout="cl", precision="bf16"),
    ),
    Config("r50", "r50", "ResNet-50 fp32 NCHW (held out), batch copied pageable each step", _r50()),
    Config("r50_pinned", "r50", "... batch pinned, copied non_blocking", _r50(copy="pinned"), cuda_only=True),
    Config("r50_cl", "r50", "... model and batch channels_last", _r50(layout="cl")),
    Config("r50_bf16", "r50", "... under autocast bf16", _r50(precision="bf16")),
    Config("r50_cl_bf16", "r50", "... channels_last and bf16", _r50(layout="cl", precision="bf16")),
    Config("r50big", "r50big", "ResNet-50 fp32, batch 128 kept on the device (GPU-bound)", _r50big()),
    Config("r50big_bf16", "r50big", "... under autocast bf16", _r50big(precision="bf16")),
    Config("r50big_cl", "r50big", "... model and batch channels_last", _r50big(layout="cl")),
    Config("r50big_cl_bf16", "r50big", "... channels_last and bf16", _r50big(layout="cl", precision="bf16")),
    *_tv_family("dense", "tvnets", "densenet121", "DenseNet-121"),
    *_tv_family("mnv2", "tvnets", "mobilenet_v2", "MobileNetV2"),
    *_tv_family("mnv3p", "hostpaced", "mobilenet_v3_large", "MobileNetV3-L", host=True),
    *_tv_family("regp", "hostpaced", "regnet_y_800mf", "RegNetY-800MF", host=True),
    *_tv_family("cnx", "tvnets2", "convnext_tiny", "ConvNeXt-T"),
    *_tv_family("rnx", "tvnets2", "resnext50_32x4d", "ResNeXt-50 (32x4d)"),
    *_tv_family("shf", "hostpaced2", "shufflenet_v2_x1_0", "ShuffleNetV2 x1.0", host=True),
    *_tv_family("vgg", "hostpaced2", "vgg11_bn", "VGG-11 (batch norm)", host=True),
    *_tv_family("sqz", "tvnets3", "squeezenet1_1", "SqueezeNet 1.1 (no batch norm)"),
    *_tv_family("swin", "tvnets3", "swin_t", "Swin-T"),
    *_tv_family("maxv", "tvnets4", "maxvit_t", "MaxViT-T"),
    *_tv_family("wrn", "tvnets4", "wide_resnet50_2", "Wide ResNet-50-2", host=True),
    *_tv_family("vitb", "tvnets5", "vit_b_16", "ViT-B/16"),
    *_tv_family("effv2", "tvnets5", "efficientnet_v2_s", "EfficientNetV2-S"),
    *_tv_family("r152", "tvnets5", "resnet152", "ResNet-152", host=True),
    *_tv_family("vitb32", "tvnets6", "vit_b_32", "ViT-B/32"),
    *_tv_family("cnxs", "tvnets6", "convnext_small", "ConvNeXt-S"),
    *_bf16_family("dense", "densenet121", "DenseNet-121"),
    *_bf16_family("mnv2", "mobilenet_v2", "MobileNetV2"),
    *_bf16_family("reg", "regnet_y_800mf", "RegNetY-800MF"),
    *_bf16_family("rnx", "resnext50_32x4d", "ResNeXt-50 (32x4d)"),
    Config("effnet", "effnet", "timm EfficientNet-B0 fp32 (held out), batch 128 on the device", _effnet()),
    Config("effnet_bf16", "effnet", "... under autocast bf16", _effnet(precision="bf16")),
    Config("effnet_cl", "effnet", "... model and batch channels_last", _effnet(layout="cl")),
    Config("effnet_cl_bf16", "effnet", "... channels_last and bf16", _effnet(layout="cl", precision="bf16")),
    Config("vit", "xfmr", "timm ViT-S/16 fp32 (held out), batch on the device, AdamW", _xf("vit")),
    Config("vit_bf16", "xfmr", "... under autocast bf16", _xf("vit", "bf16")),
    Config("gpt2", "xfmr", "transformers GPT-2 small fp32 (held out), 8 x 512 tokens, AdamW", _xf("gpt2")),
    Config("gpt2_bf16", "xfmr", "... under autocast bf16", _xf("gpt2", "bf16")),
    Config(
        "r18dev",
        "sync",
        "ResNet-18 fp32 on a batch kept on the device (GPU-bound)",
        lambda c: build_resnet(c, copy="device"),
    ),
    Config(
        "r18dev_item",
        "sync",
        "... loss.item() after each step",
        lambda c: build_resnet(c, copy="device", after="item"),
    ),
    Config(
        "r18dev_sync",
        "sync",
        "... torch.cuda.synchronize() after each step",
        lambda c: build_resnet(c, copy="device", after="sync"),
    ),
    Config("mlps", "sync", "host-bound MLP (SGD), eager", build_mlp),
    Config("mlps_item", "sync", "... loss.item() after each step", lambda c: build_mlp(c, after="item")),
    Config(
        "mlps_sync",
        "sync",
        "... torch.cuda.synchronize() after each step",
        lambda c: build_mlp(c, after="sync"),
    ),
    Config("mlp", "host", "host-bound MLP, 24 layers of 512, batch 64, SGD momentum, eager", build_mlp),
    Config(
        "mlp_graph",
        "host",
        "... the whole step as one CUDA graph",
        lambda c: build_mlp(c, mode="graph"),
        cuda_only=True,
    ),
    Config(
        "mlp_compile",
        "host",
        "... the model through torch.compile(mode='reduce-overhead')",
        lambda c: build_mlp(c, mode="compile"),
        cuda_only=True,
        compiles=True,
    ),
    Config("mlp_zero", "host", "... zero_grad(set_to_none=False)", lambda c: build_mlp(c, set_to_none=False)),
    Config(
        "adam_loop",
        "host",
        "... Adam(foreach=False): per-parameter kernels",
        lambda c: build_mlp(c, optim="adam_loop"),
    ),
    Config("adam_foreach", "host", "... Adam(foreach=True)", lambda c: build_mlp(c, optim="adam_foreach")),
    Config("adam_fused", "host", "... Adam(fused=True)", lambda c: build_mlp(c, optim="adam_fused")),
    Config(
        "article",
        "loader",
        "the article's recipe: ResNet-18 fp32, DataLoader 2 workers, pageable",
        build_article,
    ),
    Config("article_w6", "loader", "... 6 workers", lambda c: build_article(c, workers=c.s.more_workers)),
    Config(
        "article_persist",
        "loader",
        "... persistent_workers=True",
        lambda c: build_article(c, persistent=True),
    ),
    Config("article_pf4", "loader", "... prefetch_factor=4", lambda c: build_article(c, prefetch=4)),
    Config(
        "article_pin",
        "loader",
        "... pin_memory=True and non_blocking copies",
        lambda c: build_article(c, pin=True),
        cuda_only=True,
    ),
)
# The loader's rounds are an epoch each and vary by ±12 % (B/A quartiles of the first H100 run's six):
# 16 of them put the median's noise near the 1 ms the advice target allows on a 90 ms step.
LOADER_ROUNDS = 16
GROUPS = (
    "resnet",
    "r50",
    "r50big",
    "effnet",
    "tvnets",
    "tvnets2",
    "hostpaced",
    "bf16cl",
    "hostpaced2",
    "tvnets3",
    "tvnets4",
    "tvnets5",
    "tvnets6",
    "xfmr",
    "sync",
    "host",
    "loader",
)

# (pair, A, B, the advice rule it checks, the knob). The rule ids are tracekit.analysis.advice's.
PAIRS = (
    ("pinned", "r18", "r18_pinned", "pageable_copy", "pin_memory=True + non_blocking=True"),
    ("layout", "r18", "r18_cl", "layout", "channels_last"),
    ("precision", "r18", "r18_bf16", "precision", "autocast(bfloat16)"),
    ("layout_precision", "r18", "r18_cl_bf16", "precision", "channels_last + autocast(bfloat16)"),
    ("pinned_r50", "r50", "r50_pinned", "pageable_copy", "pin_memory=True + non_blocking=True"),
    ("layout_r50", "r50", "r50_cl", "layout", "channels_last"),
    ("precision_r50", "r50", "r50_bf16", "precision", "autocast(bfloat16)"),
    ("layout_precision_r50", "r50", "r50_cl_bf16", "precision", "channels_last + autocast(bfloat16)"),
    ("precision_cl_r50", "r50_cl", "r50_cl_bf16", "precision", "autocast(bfloat16), both channels_last"),
    ("layout_bf16_r50", "r50_bf16", "r50_cl_bf16", "layout", "channels_last, both under autocast(bfloat16)"),
    ("precision_r50big", "r50big", "r50big_bf16", "precision", "autocast(bfloat16)"),
    ("layout_r50big", "r50big", "r50big_cl", "layout", "channels_last"),
    (
        "layout_precision_r50big",
        "r50big",
        "r50big_cl_bf16",
        "precision",
        "channels_last + autocast(bfloat16)",
    ),
    ("layout_bf16_r50big", "r50big_bf16", "r50big_cl_bf16", "layout", "channels_last, both under autocast"),
    ("precision_effnet", "effnet", "effnet_bf16", "precision", "autocast(bfloat16)"),
    ("layout_effnet", "effnet", "effnet_cl", "layout", "channels_last"),
    (
        "layout_precision_effnet",
        "effnet",
        "effnet_cl_bf16",
        "precision",
        "channels_last + autocast(bfloat16)",
    ),
    ("layout_bf16_effnet", "effnet_bf16", "effnet_cl_bf16", "layout", "channels_last, both under autocast"),
    ("precision_dense", "dense", "dense_bf16", "precision", "autocast(bfloat16)"),
    ("layout_dense", "dense", "dense_cl", "layout", "channels_last"),
    ("precision_mnv2", "mnv2", "mnv2_bf16", "precision", "autocast(bfloat16)"),
    ("layout_mnv2", "mnv2", "mnv2_cl", "layout", "channels_last"),
    ("pinned_mnv3", "mnv3p", "mnv3p_pin", "pageable_copy", "pin_memory=True + non_blocking=True"),
    ("precision_mnv3p", "mnv3p", "mnv3p_bf16", "precision", "autocast(bfloat16)"),
    ("layout_mnv3p", "mnv3p", "mnv3p_cl", "layout", "channels_last"),
    ("pinned_reg", "regp", "regp_pin", "pageable_copy", "pin_memory=True + non_blocking=True"),
    ("precision_regp", "regp", "regp_bf16", "precision", "autocast(bfloat16)"),
    ("layout_regp", "regp", "regp_cl", "layout", "channels_last"),
    ("precision_cnx", "cnx", "cnx_bf16", "precision", "autocast(bfloat16)"),
    ("layout_cnx", "cnx", "cnx_cl", "layout", "channels_last"),
    ("precision_rnx", "rnx", "rnx_bf16", "precision", "autocast(bfloat16)"),
    ("layout_rnx", "rnx", "rnx_cl", "layout", "channels_last"),
    *(
        pair
        for k in ("shf", "vgg", "wrn", "r152")
        for pair in (
            (f"pinned_{k}", k, f"{k}_pin", "pageable_copy", "pin_memory=True + non_blocking=True"),
            (f"precision_{k}", k, f"{k}_bf16", "precision", "autocast(bfloat16)"),
            (f"layout_{k}", k, f"{k}_cl", "layout", "channels_last"),
        )
    ),
    *(
        pair
        for k in ("sqz", "swin", "maxv", "vitb", "effv2", "vitb32", "cnxs")
        for pair in (
            (f"precision_{k}", k, f"{k}_bf16", "precision", "autocast(bfloat16)"),
            (f"layout_{k}", k, f"{k}_cl", "layout", "channels_last"),
        )
    ),
    *(
        (f"layout_bf16_{k}", f"{k}b", f"{k}b_cl", "layout", "channels_last, both under autocast")
        for k in ("dense", "mnv2", "reg", "rnx")
    ),
    ("precision_vit", "vit", "vit_bf16", "precision", "autocast(bfloat16)"),
    ("precision_gpt2", "gpt2", "gpt2_bf16", "precision", "autocast(bfloat16)"),
    ("item_gpu", "r18dev_item", "r18dev", "sync_drain", "remove the per-step loss.item()"),
    ("sync_gpu", "r18dev_sync", "r18dev", "sync_drain", "remove the per-step torch.cuda.synchronize()"),
    ("item_host", "mlps_item", "mlps", "sync_drain", "remove the per-step loss.item()"),
    ("sync_host", "mlps_sync", "mlps", "sync_drain", "remove the per-step torch.cuda.synchronize()"),
    ("graphs", "mlp", "mlp_graph", "cuda_graphs", "the step as one CUDA graph"),
    ("compile", "mlp", "mlp_compile", "cuda_graphs", "torch.compile(mode='reduce-overhead')"),
    ("set_to_none", "mlp_zero", "mlp", "zero_grad", "zero_grad(set_to_none=True)"),
    ("foreach", "adam_loop", "adam_foreach", "optimizer_loop", "Adam(foreach=True)"),
    ("fused", "adam_loop", "adam_fused", "optimizer_loop", "Adam(fused=True)"),
    ("workers", "article", "article_w6", "dataloader_workers", "num_workers 2 -> 6"),
    ("persistent", "article", "article_persist", "dataloader_workers", "persistent_workers=True"),
    ("prefetch", "article", "article_pf4", "dataloader_workers", "prefetch_factor 2 -> 4"),
    ("pinned_loader", "article", "article_pin", "pageable_copy", "pin_memory=True + non_blocking=True"),
)


# ---------------------------------------------------------------------------------------------------------
# Timing
@dataclass
class Timed:
    step_ms: List[float] = field(default_factory=list)  # CUDA events at step boundaries (host clock on CPU)
    host_step_ms: List[float] = field(default_factory=list)
    loader: List[Dict[str, Any]] = field(default_factory=list)  # per step: wait, fetches, end of last fetch
    rounds: List[List[float]] = field(default_factory=list)  # the step times of each round
    # the machine-speed calibration (tracekit.capture.calibrate) at the start of each round: the host's
    # speed during the timed steps, beside the capture's own before and after
    calibrations: List[Dict[str, Any]] = field(default_factory=list)


def timed_steps(ctx: Ctx, w: Workload, n: int, t: Timed) -> None:
    """n steps, each timed at its boundaries (CUDA events recorded on the stream, no sync between)."""
    evs: List[Any] = []
    host: List[float] = []
    recs: List[Dict[str, Any]] = []
    last = time.perf_counter_ns()
    if ctx.cuda:
        evs.append(torch.cuda.Event(enable_timing=True))
        evs[-1].record()
    w.fetches.take(last)
    for _ in range(n):
        w.step()
        now = time.perf_counter_ns()
        if ctx.cuda:
            evs.append(torch.cuda.Event(enable_timing=True))
            evs[-1].record()
        host.append((now - last) / 1e6)
        recs.append(w.fetches.take(last))
        last = now
    ctx.sync()
    step = [a.elapsed_time(b) for a, b in zip(evs, evs[1:])] if ctx.cuda else host
    t.step_ms += step
    t.host_step_ms += host
    t.rounds.append(step)
    if w.loader is not None:
        t.loader += recs


def run_round(ctx: Ctx, w: Workload, args: argparse.Namespace, t: Timed) -> None:
    """One configuration's turn in a round: the loader group one whole epoch (its start included: a
    non-persistent loader starts its workers there, the first batches are not ready), the others a few
    untimed steps, then the timed ones."""
    ctx.sync()
    if w.loader is not None:
        w.epoch()
        timed_steps(ctx, w, len(w.loader), t)
        return
    for _ in range(args.warm):
        w.step()
    ctx.sync()
    timed_steps(ctx, w, args.steps, t)


def capture(
    ctx: Ctx, name: str, w: Workload, runs: str, t: Timed, cfg: Config, folder: Optional[str] = None
) -> Dict[str, Any]:
    """Profile the configuration as the seed article does, then write the manifest beside its trace
    (in runs/<folder>, default its name)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    out = os.path.join(runs, folder or name)
    os.makedirs(out, exist_ok=True)
    repeat = 2 if name == "article" else 1  # the article's own schedule for its own recipe
    sched = {"wait": 1, "warmup": 1, "active": 3, "repeat": repeat, "skip_first": 0}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    host: List[float] = []
    recs: List[Dict[str, Any]] = []
    ctx.sync()
    before = calibrate_quietly(ctx.dev.type)
    if w.loader is not None:
        w.epoch()
    else:
        for _ in range(2):
            w.step()
        ctx.sync()
    with profile(
        activities=acts,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=repeat),
        on_trace_ready=tensorboard_trace_handler(out, worker_name="rank0", use_gzip=True),
        record_shapes=True,
        with_stack=True,
        profile_memory=name == "article",
    ) as prof:
        last = time.perf_counter_ns()
        w.fetches.take(last)
        for _ in range(5 * repeat):
            w.step()
            prof.step()
            now = time.perf_counter_ns()
            host.append((now - last) / 1e6)
            recs.append(w.fetches.take(last))
            last = now
    ctx.sync()
    after = calibrate_quietly(ctx.dev.type)
    traces = sorted(f for f in os.listdir(out) if f.endswith(".pt.trace.json.gz"))
    phases = (["wait", "warmup"] + ["active"] * 3) * repeat
    loader_doc = None
    if w.loader is not None:
        loader_doc = dict(describe_loader(w.loader), marked_by="fetch", unprofiled_warmup_steps=0)
        loader_doc["window_hides_stall"] = window_hides_loader(sched, loader_doc)
    un: Dict[str, Any] = {
        "step_ms": [round(x, 4) for x in t.step_ms],
        "clock": "cuda_event" if ctx.cuda else "host",
        "host_step_ms": [round(x, 4) for x in t.host_step_ms],
        "samples": [w.samples] * len(t.step_ms),
    }
    if w.loader is not None:
        un.update(loader_lists(t.loader))
    rec = {
        "rank": 0,
        "worker": "rank0",
        "status": "ok",
        "error": None,
        "unprofiled": un,
        "profiled": {
            "profiler_step": list(range(len(host))),
            "host_step_ms": [round(x, 4) for x in host],
            "samples": [w.samples] * len(host),
            "phases": phases,
            **(loader_lists(recs) if w.loader is not None else {}),
        },
        "traces": traces,
        "extra": {},
        "loader": loader_doc,
    }
    doc = {
        "manifest_version": 1,
        "workload": name,
        "run": folder or name,
        "script": "docs/results/advice/pairs.py",
        "knobs": dict(w.notes),
        "knobs_set": {},
        "extra": {
            "what": cfg.what,
            "interleaved_with": cfg.group,
            "note": "unprofiled steps: this configuration's steps of the interleaved rounds",
        },
        # the capture's own machine-speed control (tracekit diff reads before and after), and the rounds'
        "calibration": {"before": before, "after": after, "rounds": t.calibrations},
        "schedule": sched,
        "schedule_text": ",".join(f"{k}={v}" for k, v in sched.items()),
        "device_kind": ctx.dev.type,
        "world_size": 1,
        "status": "ok",
        "error": None,
        "samples_per_step": w.samples,
        "global_samples_per_step": w.samples,
        "unprofiled_step_ms": un["step_ms"],
        "unprofiled_loader_wait_ms": un.get("loader_wait_ms"),
        "loader": loader_doc,
        "peak_memory_bytes": None,
        "ranks": [rec],
    }
    doc.update(environment(ctx.dev.type))
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True, default=str)
    return {
        "dir": f"runs/{name}",
        "traces": traces,
        "profiled_host_step_ms": host,
        "trace_bytes": [os.path.getsize(os.path.join(out, f)) for f in traces],
    }


def summary(xs: List[float]) -> Dict[str, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return {
        "median": statistics.median(xs),
        "mean": statistics.fmean(xs),
        "q1": q[0],
        "q3": q[2],
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
    }


def pair_results(timed: Dict[str, Timed], loader_group: set) -> List[Dict[str, Any]]:
    """B/A per round (the round's median step; the loader's mean), and over rounds."""
    out = []
    for name, a, b, rule, knob in PAIRS:
        row: Dict[str, Any] = {"pair": name, "A": a, "B": b, "rule": rule, "knob": knob}
        if a not in timed or b not in timed:
            row["error"] = "not measured: " + ", ".join(c for c in (a, b) if c not in timed)
            out.append(row)
            continue
        stat = statistics.fmean if a in loader_group else statistics.median
        ra = [stat(r) for r in timed[a].rounds]
        rb = [stat(r) for r in timed[b].rounds]
        ratios = [y / x for x, y in zip(ra, rb) if x > 0]
        row.update(
            statistic="mean" if a in loader_group else "median",
            A_ms=summary(ra),
            B_ms=summary(rb),
            ratio_per_round=ratios,
            ratio=summary(ratios) if ratios else None,
            # the measured change in ms per step: A's step less B's (a saving when positive)
            saved_ms=statistics.median(x - y for x, y in zip(ra, rb)),
        )
        out.append(row)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json and runs/")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and few rounds (a try on a CPU)")
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)}")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"rounds per group (default 15; loader {LOADER_ROUNDS}; smoke 2)",
    )
    p.add_argument("--steps", type=int, default=None, help="timed steps per configuration and round (8)")
    p.add_argument(
        "--captures",
        type=int,
        default=1,
        help="captures of each configuration after its rounds, taking turns (runs/<config>-cap<k>)",
    )
    p.add_argument("--warm", type=int, default=2, help="untimed steps before each configuration's turn")
    p.add_argument(
        "--budget-s", type=float, default=0, help="start no group after this many seconds (0: none)"
    )
    p.add_argument("--no-compile", action="store_true", help="leave out torch.compile's configuration")
    p.add_argument("--no-capture", action="store_true", help="time only: no traces")
    args = p.parse_args(argv)
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = dev.type == "cuda"
    s = SMOKE_SIZES if args.smoke else GPU_SIZES
    args.steps = args.steps or (3 if args.smoke else 8)
    groups = [g for g in args.groups.split(",") if g]
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        p.error(f"--groups: unknown {', '.join(bad)}; choose from {', '.join(GROUPS)}")
    ctx = Ctx(dev, s, cuda)
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    t0 = time.monotonic()
    try:
        import torchvision

        tv = torchvision.__version__
    except ImportError:
        tv = None
    results: Dict[str, Any] = {
        "results": 1,
        "script": "docs/results/advice/pairs.py",
        "argv": sys.argv[1:],
        "environment": environment(dev.type),
        "torchvision": tv,
        "sizes": s.__dict__,
        "configs": {},
        "skipped": {},
        "groups": {},
    }
    timed: Dict[str, Timed] = {}
    loader_group = {c.name for c in CONFIGS if c.group == "loader"}
    for g in groups:
        if args.budget_s and time.monotonic() - t0 > args.budget_s:
            results["skipped"][g] = f"budget of {args.budget_s:g} s spent"
            print(f"== group {g}: skipped, budget spent", flush=True)
            continue
        gt = time.monotonic()
        rounds = args.rounds or (2 if args.smoke else LOADER_ROUNDS if g == "loader" else 15)
        built: Dict[str, Workload] = {}
        for c in (c for c in CONFIGS if c.group == g):
            if c.cuda_only and not cuda:
                results["skipped"][c.name] = "needs CUDA"
                continue
            if c.compiles and args.no_compile:
                results["skipped"][c.name] = "--no-compile"
                continue
            try:
                tb = time.monotonic()
                w = c.build(ctx)
                if w.loader is None:  # warm-up: lazy init, cuDNN's choice, torch.compile's compile
                    for _ in range(3):
                        w.step()
                ctx.sync()
                built[c.name] = w
                results["configs"][c.name] = {
                    "group": g,
                    "what": c.what,
                    "knobs": w.notes,
                    "build_s": round(time.monotonic() - tb, 2),
                }
                print(f"== {c.name}: built in {time.monotonic() - tb:.1f} s", flush=True)
            except (
                Exception
            ) as e:  # one configuration that cannot run (no bf16, no compiler) is said, not fatal
                results["skipped"][c.name] = f"{type(e).__name__}: {e}"
                print(f"== {c.name}: cannot run: {e}", flush=True)
                traceback.print_exc()
        order = list(built)
        for r in range(rounds):
            cal = calibrate_quietly(dev.type)
            for name in order:
                timed.setdefault(name, Timed()).calibrations.append(cal)
            for name in order if r % 2 == 0 else order[::-1]:
                run_round(ctx, built[name], args, timed.setdefault(name, Timed()))
            print(f"== group {g}: round {r + 1}/{rounds} at {time.monotonic() - t0:.0f} s", flush=True)
        for name in built:
            t = timed[name]
            results["configs"][name]["unprofiled"] = {
                "step_ms": summary(t.step_ms),
                "rounds": t.rounds,
                "host_step_ms": summary(t.host_step_ms),
            }
            if t.loader:
                results["configs"][name]["unprofiled"]["loader_wait_ms"] = summary(
                    [x["wait_ms"] for x in t.loader]
                )
        # each configuration captured once, or `--captures` times taking turns (runs/<config>, then
        # runs/<config>-cap<k>): how far a prediction moves with the host's state while captured
        for k in range(0 if args.no_capture else args.captures):
            for name, w in built.items():
                try:
                    got = capture(
                        ctx,
                        name,
                        w,
                        os.path.join(args.out, "runs"),
                        timed[name],
                        next(c for c in CONFIGS if c.name == name),
                        folder=name if k == 0 else f"{name}-cap{k}",
                    )
                    if k == 0:
                        results["configs"][name]["capture"] = got
                except Exception as e:
                    results["configs"][name][f"capture_error{k or ''}"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
        results["groups"][g] = {"rounds": rounds, "seconds": round(time.monotonic() - gt, 1)}
        built.clear()
        if cuda:
            torch.cuda.empty_cache()
        results["pairs"] = pair_results(timed, loader_group)
        write_json(os.path.join(args.out, "results.json"), results)  # after every group: a cut run keeps it
    results["pairs"] = pair_results(timed, loader_group)
    results["seconds"] = round(time.monotonic() - t0, 1)
    write_json(os.path.join(args.out, "results.json"), results)
    for row in results["pairs"]:
        r = row.get("ratio")
        print(
            f"{row['pair']:<17} {row['A']:>12} -> {row['B']:<16} "
            + (
                f"B/A {r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}] saved {row['saved_ms']:.3f} ms"
                if r
                else row.get("error", "")
            )
        )
    print(f"total {results['seconds']} s")
    return 0


def write_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
