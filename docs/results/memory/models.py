"""Real models for the memory what-if check (docs/results/memory.md): a torchvision ResNet, a
transformers GPT-2 and a timm ViT, randomly initialised (no network), trained on random batches, with or
without AMP and activation checkpointing. Captured by docs/results/memory/run_gpu.sh as
`tracekit.capture --script`:

    python -m tracekit.capture --script docs/results/memory/models.py -o RUN -- --model resnet50 --batch 64

--model resnet50|resnet18|gpt2|gpt2-tiny|vit_*; --batch N; --amp bf16|fp16 (autocast; fp16 with a GradScaler);
--checkpoint N (ResNet: torch's checkpoint_sequential over its top-level modules in N segments; GPT-2:
transformers' gradient_checkpointing, every block: give any N > 0; a timm ViT (vit_small_patch16_224,
any timm vit_* name): timm's set_grad_checkpointing, every block); --seq L (GPT-2's sequence length);
--size S (ResNet's and ViT's image side, 224); --device cuda|cpu. One step: forward, loss, backward, SGD step
(momentum 0.9), zero_grad.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

import tracekit.capture as tc


def resnet(name: str, checkpoint: int, device: str, size: int) -> tuple:
    import torchvision

    model = getattr(torchvision.models, name)(weights=None, num_classes=1000).to(device)
    # The stem's ReLU not in place, in every run (so the runs compare like for like): checkpoint_sequential
    # can cut right before it, and an in-place op on a checkpointed segment's input breaks its
    # recomputation in backward (torchvision's is in place: the checkpoint 4 run on the H100 failed so).
    # The blocks' own in-place ReLUs act inside a segment, on tensors the segment made.
    model.relu = torch.nn.ReLU(inplace=False)
    # the top-level modules in order, so checkpoint_sequential can cut them (fc needs the flattened pool)
    seq = torch.nn.Sequential(
        model.conv1, model.bn1, model.relu, model.maxpool,
        model.layer1, model.layer2, model.layer3, model.layer4,
        model.avgpool, torch.nn.Flatten(1), model.fc,
    )  # fmt: skip

    def forward(x: torch.Tensor) -> torch.Tensor:
        if checkpoint > 0:
            from torch.utils.checkpoint import checkpoint_sequential

            return checkpoint_sequential(seq, checkpoint, x, use_reentrant=False)
        return seq(x)

    return (seq, *_classifier(forward, device, size))


def _classifier(forward: Any, device: str, size: int) -> tuple:
    """An image classifier's (batch, loss): random size × size images and labels of 1000 classes."""

    def batch(n: int) -> tuple:
        x = torch.randn(n, 3, size, size, device=device)
        y = torch.randint(0, 1000, (n,), device=device)
        return x, y

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(forward(x), y)

    return batch, loss


def gpt2(name: str, checkpoint: int, device: str, seq_len: int) -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel

    sizes = {"gpt2": {}, "gpt2-tiny": {"n_layer": 2, "n_embd": 128, "n_head": 2}}[name]
    config = GPT2Config(n_positions=max(seq_len, 64), **sizes)
    model = GPT2LMHeadModel(config).to(device)
    if checkpoint > 0:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False

    def batch(n: int) -> tuple:
        ids = torch.randint(0, config.vocab_size, (n, seq_len), device=device)
        return (ids,)

    def loss(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss

    return model, batch, loss


def vit(name: str, checkpoint: int, device: str, size: int) -> tuple:
    """A timm Vision Transformer (held out: the memory model was built on the other three families)."""
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=1000, img_size=size).to(device)
    if checkpoint > 0:
        model.set_grad_checkpointing(True)

    return (model, *_classifier(model, device, size))


def main(argv: list) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--amp", choices=("bf16", "fp16"), default=None)
    p.add_argument("--checkpoint", type=int, default=0)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--size", type=int, default=224, help="ResNet's image side")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    if args.model.startswith("resnet"):
        model, batch, loss_of = resnet(args.model, args.checkpoint, args.device, args.size)
    elif args.model.startswith("vit"):
        model, batch, loss_of = vit(args.model, args.checkpoint, args.device, args.size)
    else:
        model, batch, loss_of = gpt2(args.model, args.checkpoint, args.device, args.seq)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[args.amp]
    scaler = torch.amp.GradScaler(args.device) if args.amp == "fp16" else None
    data = batch(args.batch)

    def step() -> None:
        with torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            loss = loss_of(*data)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    with tc.session(samples_per_step=args.batch) as s:
        while not s.done:
            step()
            s.step()
            if not s.active:  # run without tracekit: one step is a smoke test
                break


if __name__ == "__main__":
    main(sys.argv[1:])
