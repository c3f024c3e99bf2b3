"""Inference without a schedule: 20 forward passes of ResNet-18 inside `with torch.profiler.profile() as
prof:`, no step markers, the trace exported after the block (no tracekit in the script).

    python inference.py --mode profile --log ./log
    python inference.py --mode truth --out truth.json      # no profiler: ms per forward pass
    tracekit capture --script inference.py -o runs -- --mode profile --log ./log

Without torchvision (the CPU smoke run) the small CNN of common.py stands in.
"""

from __future__ import annotations

import argparse
import os

import torch
from common import has_torchvision, small_cnn, time_steps, write_truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "truth"), default="profile")
    p.add_argument("--log", default="./log")
    p.add_argument("--out")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--passes", type=int, default=20)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if has_torchvision():
        import torchvision

        model, side = torchvision.models.resnet18(), 224
    else:
        model, side = small_cnn(), 40
    model = model.to(device).eval()
    x = torch.randn(args.batch, 3, side, side, device=device)

    def forward():
        with torch.no_grad():
            return model(x)

    if args.mode == "truth":
        doc = time_steps(forward, 5, args.passes, device)
        write_truth({"script": "inference.py", **doc, "batch": args.batch}, args.out)
        return
    for _ in range(5):
        forward()
    with torch.profiler.profile() as prof:
        for _ in range(args.passes):
            forward()
    os.makedirs(args.log, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.log, "inference.pt.trace.json"))
    print(f"inference: {args.passes} forward passes profiled, trace in {args.log}", flush=True)


if __name__ == "__main__":
    main()
