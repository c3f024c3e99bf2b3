"""A user's script: a transformers GPT-2 (randomly initialised from its config, no download) trained in
bf16 with AdamW on random tokens already on the GPU.

    tracekit capture --script benchmarks/scripts/gpt2_bf16.py -o runs -- --layers 6 --batch 8 --seq 512
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tracekit.capture import session

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=6)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
args = p.parse_args()

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
cfg = GPT2Config(n_layer=args.layers, n_positions=args.seq)
model = GPT2LMHeadModel(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)

with session(samples_per_step=args.batch) as s:
    while not s.done:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s.step()
        if not s.active:  # plain `python gpt2_bf16.py`: a few steps, then stop
            break
