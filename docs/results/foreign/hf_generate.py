"""HF transformers `generate` on a small randomly initialised GPT-2 (from a config: nothing downloaded),
profiled the way inference users do: `with torch.profiler.profile() as prof:` around one `generate`, no
schedule, no `prof.step()`, `prof.export_chrome_trace(...)` after it (no tracekit in the script).

    python hf_generate.py --mode profile --log ./log
    python hf_generate.py --mode truth --out truth.json     # no profiler: ms per generate and per token
    tracekit capture --script hf_generate.py -o runs -- --mode profile --log ./log

Needs transformers; without it the script says so and exits 0 (the CPU smoke run).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from common import time_steps, write_truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "truth"), default="profile")
    p.add_argument("--log", default="./log")
    p.add_argument("--out")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=5, help="--mode truth: timed generate calls")
    args = p.parse_args()
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("hf_generate: skipped, transformers is not installed", flush=True)
        sys.exit(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=8, n_positions=args.prompt + args.tokens)
    model = GPT2LMHeadModel(cfg).to(device).eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=device)
    mask = torch.ones_like(ids)

    def generate():
        with torch.no_grad():
            return model.generate(
                ids, attention_mask=mask, max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                do_sample=False, pad_token_id=0,
            )  # fmt: skip

    if args.mode == "truth":
        doc = time_steps(generate, 2, args.runs, device)
        doc["ms_per_token"] = doc["steady_step_ms"] / args.tokens
        write_truth({"script": "hf_generate.py", **doc, "tokens": args.tokens, "batch": args.batch}, args.out)
        return
    generate()  # warm-up, as users do before they profile
    with torch.profiler.profile(record_shapes=True) as prof:
        generate()
    os.makedirs(args.log, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.log, "generate.pt.trace.json"))
    print(f"hf_generate: one generate of {args.tokens} tokens profiled, trace in {args.log}", flush=True)


if __name__ == "__main__":
    main()
