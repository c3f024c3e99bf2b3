"""What tracekit's watching costs a script it adopts (tracekit.capture.adopt, tracekit.capture.workers):
each hook timed against the bare call in the same process, alternating, and a small training loop with
a 2-worker DataLoader run with and without the hooks, alternating rounds.

    .venv/bin/python benchmarks/adopt_overhead.py [--rounds 7] [--calls 20000] [--steps 60]

Per call (ns: the least of the rounds' figures, each the least mean of chunks of 500 calls): `next()` on a
DataLoader iterator (the fetch hook: two clock reads, one record), `prof.step()` in a wait step (the step
hook: two clock and two CPU-clock reads), a worker's batch (the fetch wrapper: two clocks, two CPU
clocks, two schedstat reads, one write). The
loop: the median step of each round (host clock), hooked over bare; its spread is the machine's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracekit.capture import workers  # noqa: E402
from tracekit.capture.adopt import Adopter  # noqa: E402

CHUNK = 500  # calls timed together; a call's cost is the least chunk's mean (preemption falls on some)


def _least(call, calls: int) -> float:
    best = float("inf")
    for _ in range(max(calls // CHUNK, 1)):
        t0 = time.perf_counter_ns()
        for _ in range(CHUNK):
            call()
        best = min(best, (time.perf_counter_ns() - t0) / CHUNK)
    return best


def fetches(calls: int) -> float:
    data = torch.utils.data.TensorDataset(torch.arange(float(calls + CHUNK)))
    it = iter(torch.utils.data.DataLoader(data, batch_size=1))
    return _least(lambda: next(it), calls)


def steps(calls: int) -> float:
    sched = torch.profiler.schedule(wait=calls + CHUNK + 10, warmup=1, active=1)
    with torch.profiler.profile(schedule=sched) as prof:
        return _least(prof.step, calls)


def worker_batches(calls: int, hooked: bool) -> float:
    def fetch(self, index):
        return index

    call = workers._timed(fetch) if hooked else fetch
    return _least(lambda: call(None, 0), calls)


def loop(n_steps: int) -> list[float]:
    """A small model fed by 2 workers whose samples cost ~0.3 ms each: step times (ms), host clock."""

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 100_000

        def __getitem__(self, i):
            x = torch.randn(64, 64)
            for _ in range(4):
                x = torch.tanh(x @ x.T / 64)
            return x[0], i % 10

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Data(), batch_size=16, num_workers=2)
    out, last = [], None
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if last is not None and i > 6:  # past the workers' start and their first queued batches
            out.append((now - last) * 1e3)
        last = now
        if i >= n_steps + 6:
            break
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; torch {torch.__version__}; {args.rounds} rounds")
    folder = tempfile.mkdtemp(prefix="tracekit-bench-")
    adopter = Adopter(folder, "cpu")
    results: dict[str, dict[str, list[float]]] = {}
    for r in range(args.rounds):
        for hooked in (False, True) if r % 2 == 0 else (True, False):
            if hooked:
                adopter.install()
                workers.install(folder)
            try:
                for name, fn in (
                    ("fetch", fetches),
                    ("step", steps),
                    ("worker batch", lambda n, h=hooked: worker_batches(n, h)),
                ):
                    results.setdefault(name, {}).setdefault(str(hooked), []).append(fn(args.calls))
                ms = loop(args.steps)
                results.setdefault("loop step (ms)", {}).setdefault(str(hooked), []).append(
                    statistics.median(ms)
                )
            finally:
                if hooked:
                    adopter.uninstall()
                    workers.uninstall()
            adopter.fetches.clear()
            adopter.profilers.clear()
    print(f"{'':22s} {'bare':>12s} {'hooked':>12s} {'added':>12s}")
    for name, r in results.items():
        bare, hooked = min(r["False"]), min(r["True"])
        unit = "" if "ms" in name else " ns"
        print(f"{name:22s} {bare:12.4g} {hooked:12.4g} {hooked - bare:+12.4g}{unit}")
        if "ms" in name:
            rel = [h / b - 1 for h, b in zip(r["True"], r["False"])]
            print(
                f"{'':22s} per round hooked/bare - 1: median {statistics.median(rel):+.1%}, "
                f"range {min(rel):+.1%} to {max(rel):+.1%}"
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
