"""The seed article's recipe, written the way its readers write it: a loader-bound ResNet-18 training loop
inside their own `torch.profiler.profile` (no tracekit in the script).

    python seed_recipe.py --mode profile --log ./log        # the recipe: traces into ./log
    python seed_recipe.py --mode truth --out truth.json     # the same loop, no profiler: its steady state
    tracekit capture --script seed_recipe.py -o runs -- --mode profile --log ./log

With torchvision (the GPU machine): torchvision's ResNet-18 (random weights) on FakeData images through
RandomResizedCrop / flip / ToTensor / Normalize, 2 workers, pageable batches. Without it (a CPU box): a
small CNN of plain torch ops on synthetic images whose decode-like and augment-like work is done in the
workers (`common.CpuImages`), so the run is loader-bound on any machine. `--mode truth` times `--steps`
steps after `--warmup` (past the workers' prefetched batches) with the host clock, one synchronisation at
each end of the window.
"""

from __future__ import annotations

import argparse

import torch
from common import build, time_steps, vision_args, write_truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "truth"), default="profile")
    p.add_argument("--log", default="./log", help="the trace handler's folder (--mode profile)")
    p.add_argument("--out", help="--mode truth: write the steady state here (JSON)")
    p.add_argument("--warmup", type=int, default=8, help="--mode truth: untimed steps first")
    p.add_argument("--steps", type=int, default=30, help="--mode truth: timed steps")
    p.add_argument("--repeat", type=int, default=2, help="the schedule's repeat (the recipe: 2)")
    vision_args(p)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, loader = build(args, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train(batch) -> None:
        x, y = batch[0].to(device), batch[1].to(device)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    if args.mode == "truth":
        it = iter(loader)
        doc = time_steps(lambda: train(next(it)), args.warmup, args.steps, device)
        write_truth(
            {"script": "seed_recipe.py", **doc, "workers": args.workers, "batch": args.batch}, args.out
        )
        return

    # The recipe, as the article writes it.
    steps = (1 + 1 + 3) * args.repeat
    with torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=args.repeat),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.log),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for step, batch in enumerate(loader):
            if step >= steps:
                break
            train(batch)
            prof.step()
    print(f"seed_recipe: {steps} steps profiled, traces in {args.log}", flush=True)


if __name__ == "__main__":
    main()
