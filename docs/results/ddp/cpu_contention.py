"""Does communicating slow a CPU rank's compute? Two gloo ranks train heavy_mlp's CPU shape (256 → 512 →
512 → 128, batch 32, one intra-op thread, an SGD step) without DDP and time each phase of the step with
`time.perf_counter`, in three arms captured in interleaved rounds:

    none       forward, backward, optimizer: no communication at all
    barrier    the same, and a dist.barrier() after the backward: the ranks meet, no data moves
    allreduce  the same, and a blocking all_reduce of the gradients (flattened) after the backward

The forward and the optimizer never overlap a collective here, so any change in their time is what the
communication costs the compute around it (the cores and caches it shares), not the transfer.

    python docs/results/ddp/cpu_contention.py            # threads where the scheduler puts them
    python docs/results/ddp/cpu_contention.py --pin      # each rank's threads on one CPU of its own

Prints a Markdown table: per arm the median over rounds of each phase's median (ms), and the phase's
change against `none`. Needs only torch (gloo).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ARMS = ("none", "barrier", "allreduce")
PHASES = ("forward", "backward", "communication", "optimizer", "step")


def _rank(rank: int, args: argparse.Namespace, queue) -> None:  # type: ignore[no-untyped-def]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    torch.set_num_threads(1)
    if args.pin:  # before the process group: gloo's threads inherit the mask
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    lin = torch.nn.Linear
    model = torch.nn.Sequential(lin(256, 512), torch.nn.ReLU(), lin(512, 512), torch.nn.ReLU(), lin(512, 128))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256)
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))

    def step(arm: str) -> tuple[float, ...]:
        t0 = time.perf_counter()
        loss = model(x).sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if arm == "barrier":
            dist.barrier()
        elif arm == "allreduce":
            torch.cat([p.grad.view(-1) for p in model.parameters()], out=flat)
            dist.all_reduce(flat)
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t4 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0

    medians: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    for rnd in range(args.rounds):
        for arm in ARMS if rnd % 2 == 0 else ARMS[::-1]:
            dist.barrier()
            for _ in range(args.warmup):
                step(arm)
            times = [step(arm) for _ in range(args.steps)]
            medians[arm].append([statistics.median(c) * 1e3 for c in zip(*times)])
    if rank == 0:
        queue.put(medians)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pin", action="store_true", help="each rank (and its gloo threads) on one CPU")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=150, help="timed steps per arm and round")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_rank, args=(args, queue), nprocs=2)
    medians = queue.get()
    base = [statistics.median(c) for c in zip(*medians["none"])]
    print(f"pinned: {args.pin}; {args.rounds} rounds x {args.steps} steps per arm; rank 0, ms")
    print("| arm | " + " | ".join(PHASES) + " |")
    print("|---|" + "---:|" * len(PHASES))
    for arm in ARMS:
        med = [statistics.median(c) for c in zip(*medians[arm])]
        cells = [
            f"{m:.3f}"
            if arm == "none" or phase == "communication"
            else f"{m:.3f} ({(m / b - 1) * 100:+.0f} %)"
            for phase, m, b in zip(PHASES, med, base)
        ]
        print(f"| {arm} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
