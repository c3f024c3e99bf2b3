"""A user's own distributed training script, as torchrun runs it: a small transformer language model
sharded with FSDP2 (`fully_shard` on each block, then the whole model), AdamW, random tokens.

    torchrun --nproc_per_node=2 docs/results/ddp/train_fsdp.py --model torch --steps 20
    tracekit capture --script docs/results/ddp/train_fsdp.py --set nproc=2 -o runs -- --model torch

It initialises its own process group (nccl on CUDA, gloo on the CPU) and marks its steps with
`tracekit.capture.steps` (docs/capture.md, "Your own script"): run without tracekit, that yields every
item unchanged. `--model gpt2` builds transformers' GPT2LMHeadModel from a config (no weights are
downloaded); `--model torch` the same shape from torch.nn alone.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tracekit.capture import steps


def build(kind: str, vocab: int, width: int, layers: int, heads: int, seq: int) -> tuple:
    """(the model, its blocks): the modules each sharded on its own."""
    if kind == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=width, n_layer=layers, n_head=heads)
        model = GPT2LMHeadModel(cfg)
        return model, list(model.transformer.h)

    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, width)
            self.blocks = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True, dropout=0.0)
                for _ in range(layers)
            )
            self.head = torch.nn.Linear(width, vocab)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    model = LM()
    return model, list(model.blocks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("torch", "gpt2"), default="torch")
    p.add_argument("--steps", type=int, default=20, help="steps when run without tracekit")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    torch.manual_seed(0)
    model, blocks = build(args.model, args.vocab, args.width, args.layers, max(1, args.width // 64), args.seq)
    model.to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for b in blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    for _ in steps(range(args.steps), samples_per_step=args.batch):
        out = model(ids)
        logits = out.logits if hasattr(out, "logits") else out
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), ids.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
