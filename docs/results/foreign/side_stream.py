"""A side-stream prefetcher (the next batch copied to the GPU on its own CUDA stream from pinned memory
while the current one trains), profiled with the seed recipe's schedule, written the users' way (no
tracekit in the script).

    python side_stream.py --mode profile --log ./log
    python side_stream.py --mode truth --out truth.json
    tracekit capture --script side_stream.py -o runs -- --mode profile --log ./log

On a CPU (the smoke run) the prefetcher has no stream to use and hands the batches on as they come.
"""

from __future__ import annotations

import argparse

import torch
from common import build, time_steps, vision_args, write_truth


class Prefetcher:
    """Iterates `loader`, copying each next batch to `device` on a side stream ahead of its use."""

    def __init__(self, loader, device: torch.device) -> None:
        self.it, self.device = iter(loader), device
        self.stream = torch.cuda.Stream() if device.type == "cuda" else None
        self._load()

    def _load(self) -> None:
        try:
            x, y = next(self.it)
        except StopIteration:
            self.batch = None
            return
        if self.stream is None:
            self.batch = (x, y)
            return
        with torch.cuda.stream(self.stream):
            self.batch = (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))

    def __iter__(self):
        return self

    def __next__(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.batch
        if batch is None:
            raise StopIteration
        if self.stream is not None:
            for t in batch:
                t.record_stream(torch.cuda.current_stream())
        self._load()
        return batch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "truth"), default="profile")
    p.add_argument("--log", default="./log")
    p.add_argument("--out")
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    vision_args(p)
    p.set_defaults(workers=6, pin=True)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, loader = build(args, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train(batch) -> None:
        x, y = batch
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    batches = Prefetcher(loader, device)
    if args.mode == "truth":
        doc = time_steps(lambda: train(next(batches)), args.warmup, args.steps, device)
        write_truth({"script": "side_stream.py", **doc, "workers": args.workers}, args.out)
        return
    with torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.log),
    ) as prof:
        for step, batch in enumerate(batches):
            if step >= 10:
                break
            train(batch)
            prof.step()
    print(f"side_stream: 10 steps profiled, traces in {args.log}", flush=True)


if __name__ == "__main__":
    main()
