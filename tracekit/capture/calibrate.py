"""A short, fixed calibration run in the target interpreter before and after each capture (stdlib + torch,
Python 3.9): how fast this interpreter and this machine were *while the capture ran*.

Two kinds of figure, kept apart because a Python version changes one and not the other:

- **Interpreter-dependent**: `python_loop` (ns per iteration of a pure-Python loop: the bytecode speed a
  pyperformance-style figure describes), `builtin_call` (ns per call of a two-argument C builtin from a
  Python loop: the bytecode side of calling any C function), `torch_call` (ns per `torch.add(x, y)` on
  16-element CPU tensors from a Python loop: the whole host path of a torch op called from Python —
  bytecode, argument parsing, the dispatcher, the allocator, a tiny kernel) and, on CUDA, `cuda_launch`
  (ns per `x.add_(1)` on a 16-element device tensor, host side: the path to a kernel launch).
- **Machine-speed controls** that no Python version changes: `aten_cpu` (ns per `torch.cumsum` of 16,384
  floats into a preallocated output: C++ work long enough that the call's Python part is a few percent)
  and, on CUDA, `cuda_kernel` (device ns per 512×512 fp32 matmul, timed with CUDA events over a queued
  sequence: the GPU's own speed and clocks).

Each figure is the median (and the minimum) over CALIBRATION_TRIALS trials of at least TRIAL_S each,
after one untimed trial (Python 3.11+ specialises a loop's bytecode on its first runs; torch's first calls
initialise). The whole calibration takes about 0.1-0.3 s. `tracekit diff` reads the controls' drift between
runs, and `tracekit whatif --python-from` / `--python-speedup` read the interpreter figures against them.
"""

from __future__ import annotations

import operator
import statistics
import time
from typing import Any, Callable, Dict, List

CALIBRATION_VERSION = 2  # 2: the CUDA kernel sequence queued behind a spin kernel (see _cuda_kernel)
SLEEP_CYCLES = 1_000_000  # GPU clock cycles, ~0.5 ms on an H200: longer than queuing 20 launches takes
TRIAL_S = 0.002  # one trial lasts at least this long: the clock's resolution vanishes in it
CALIBRATION_TRIALS = 7
MAX_SIZING_S = 0.05  # the doubling that sizes a trial stops here whatever the rate (a very slow machine)

# What each figure measures, for the manifest's readers (one fact, one place).
MEASURES: Dict[str, str] = {
    "python_loop": "ns per iteration of a pure-Python while loop (interpreter)",
    "builtin_call": "ns per call of operator.is_(x, y) from a Python loop (interpreter)",
    "torch_call": "ns per torch.add(x, y) on 16-element CPU tensors from a Python loop (interpreter + torch)",
    "aten_cpu": "ns per torch.cumsum of 16384 floats into a preallocated output (control: C++ work)",
    "cuda_launch": "host ns per x.add_(1) on a 16-element CUDA tensor, Python loop (interpreter + torch)",
    "cuda_kernel": "device ns per 512x512 fp32 matmul, CUDA events over a queued sequence (control: GPU)",
}
CONTROLS = ("aten_cpu", "cuda_kernel")


def _python_loop(n: int) -> None:
    i = 0
    x = 0
    while i < n:
        x += i & 7
        i += 1


def _call_loop(fn: Callable[..., Any], a: Any, b: Any) -> Callable[[int], None]:
    """A loop calling fn(a, b): the shape of a torch op called from Python."""

    def run(n: int) -> None:
        for _ in range(n):
            fn(a, b)

    return run


def _cumsum_loop(torch: Any, big: Any, out: Any) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            torch.cumsum(big, 0, out=out)

    return run


def _add_loop(t: Any) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            t.add_(1.0)

    return run


def _once(run: Callable[[int], None], sync: Callable[[], None], n: int) -> float:
    t0 = time.perf_counter()
    run(n)
    sync()
    return time.perf_counter() - t0


def _timed(run: Callable[[int], None], sync: Callable[[], None]) -> Dict[str, float]:
    """Median and minimum ns per unit of `run(n)` over CALIBRATION_TRIALS trials of >= TRIAL_S."""
    n = 16
    run(n)
    sync()
    while True:  # double n until a trial lasts TRIAL_S (the faster of two tries: a preemption is no rate)
        took = min(_once(run, sync, n), _once(run, sync, n))
        if took >= TRIAL_S or took >= MAX_SIZING_S:
            break
        n *= 2
    per: List[float] = []
    for _ in range(CALIBRATION_TRIALS):
        per.append(_once(run, sync, n) / n * 1e9)
    return {"ns": round(statistics.median(per), 3), "min_ns": round(min(per), 3), "n": n}


def _none() -> None:
    return None


def _cuda_kernel(torch: Any) -> Dict[str, float]:
    """Device ns per matmul: a queued sequence timed with CUDA events (the host waits once per trial).

    The sequence is queued behind `torch.cuda._sleep` (a spin kernel), so that all of it is on the device
    before its start event runs: without it, a host in a slow state launched the matmuls no faster than
    the GPU ran them and the figure followed the host (calibration version 1, on the H200 host)."""
    a = torch.ones(512, 512, device="cuda")
    b = torch.ones(512, 512, device="cuda")
    c = torch.empty(512, 512, device="cuda")
    reps = 20
    sleep = getattr(torch.cuda, "_sleep", None)
    per: List[float] = []
    for trial in range(CALIBRATION_TRIALS + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep is not None:
            sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        end.record()
        end.synchronize()
        if trial:  # the first one warms the kernel and the allocator
            per.append(start.elapsed_time(end) / reps * 1e6)
    return {"ns": round(statistics.median(per), 3), "min_ns": round(min(per), 3), "n": reps}


def calibrate(device: str) -> Dict[str, Any]:
    """Run the calibration in this process; `device` "cuda" adds the launch and kernel figures."""
    import torch

    t0 = time.perf_counter()
    x, y = torch.ones(16), torch.ones(16)
    big, out = torch.ones(16384), torch.empty(16384)
    figures: Dict[str, Dict[str, float]] = {
        "python_loop": _timed(_python_loop, _none),
        "builtin_call": _timed(_call_loop(operator.is_, x, y), _none),
        "torch_call": _timed(_call_loop(torch.add, x, y), _none),
        "aten_cpu": _timed(_cumsum_loop(torch, big, out), _none),
    }
    if device == "cuda":
        figures["cuda_launch"] = _timed(_add_loop(torch.ones(16, device="cuda")), torch.cuda.synchronize)
        figures["cuda_kernel"] = _cuda_kernel(torch)
    return {
        "version": CALIBRATION_VERSION,
        "figures": figures,
        "wall_ms": round((time.perf_counter() - t0) * 1e3, 1),
    }


def calibrate_quietly(device: str) -> Dict[str, Any]:
    """`calibrate`, or {"error": ...} when it cannot run (a device in an error state after a crash)."""
    try:
        return calibrate(device)
    except Exception as exc:  # never lose a capture to its calibration
        return {"version": CALIBRATION_VERSION, "error": f"{type(exc).__name__}: {exc}"}
