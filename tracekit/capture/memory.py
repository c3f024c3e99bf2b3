"""What a capture records of device memory (issue 38), for tracekit.analysis.memory to explain the trace's
memory events with: the caching allocator's statistics at every step boundary, the model on each device
once the steps are done, and an out-of-memory error as a result (where, and how full the device was)
instead of a crash. Stdlib + torch (imported inside functions), Python 3.9.
"""

from __future__ import annotations

import gc
import os
import re
import traceback
import warnings
from typing import Any, Dict, Iterable, List, Optional, Tuple

# The allocator's figures read at each step boundary: manifest key -> (memory_stats key, which value).
# One `torch.cuda.memory_stats_as_nested_dict()` call gives them all (torch.cuda.max_memory_allocated
# alone flattens the whole dictionary in Python); peaks are reset after the read, so the `_peak` figures
# are the step's own.
ALLOCATOR_STATS: Tuple[Tuple[str, str, str], ...] = (
    ("allocated", "allocated_bytes", "current"),
    ("allocated_peak", "allocated_bytes", "peak"),
    ("reserved", "reserved_bytes", "current"),
    ("reserved_peak", "reserved_bytes", "peak"),
    # reserved in blocks that are split and not in use: memory the allocator holds but cannot hand out
    # whole (its fragmentation)
    ("inactive_split", "inactive_split_bytes", "current"),
)
# Counters since the process began: cudaMalloc retried after freeing the cache, and OOMs raised.
ALLOCATOR_COUNTERS: Tuple[Tuple[str, str], ...] = (
    ("alloc_retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
)
ALLOCATOR_KEYS: Tuple[str, ...] = tuple(k for k, _, _ in ALLOCATOR_STATS) + tuple(
    k for k, _ in ALLOCATOR_COUNTERS
)
# The exit status of `python -m tracekit.capture` when the device ran out of memory (tracekit.capture.cli).
EXIT_OOM = 4
# The CUDA caching allocator hands out blocks in multiples of this many bytes (its kMinBlockSize): what a
# tensor's storage occupies, which is what the trace's memory events count.
CUDA_BLOCK_BYTES = 512


def read_allocator() -> Dict[str, int]:
    """The current CUDA device's allocator figures (ALLOCATOR_KEYS), then its peaks reset."""
    import torch

    stats = torch.cuda.memory_stats_as_nested_dict()
    out = {}
    for key, stat, which in ALLOCATOR_STATS:
        out[key] = int(((stats.get(stat) or {}).get("all") or {}).get(which, 0))
    for key, stat in ALLOCATOR_COUNTERS:
        out[key] = int(stats.get(stat, 0) or 0)
    torch.cuda.reset_peak_memory_stats()
    return out


def columns(rows: Iterable[Optional[Dict[str, int]]]) -> Dict[str, List[Optional[int]]]:
    """Per-step readings as one list per figure (the manifest's form, aligned with the steps)."""
    rows = list(rows)
    return {key: [None if r is None else r.get(key) for r in rows] for key in ALLOCATOR_KEYS}


def device_free() -> Optional[Dict[str, int]]:
    """What the driver says of the current CUDA device: free and total bytes (other processes' use shows
    as total - free - reserved), or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return {"free_bytes": int(free), "total_bytes": int(total)}


def model_state() -> Dict[str, Dict[str, int]]:
    """The bytes of every live model's parameters, gradients and optimizer state, by device ("cpu" or
    the CUDA index), found among the process's objects (nn.Module and torch.optim.Optimizer
    instances: the built-in workloads' and a user's script's alike). A storage shared by several
    tensors counts once; CUDA storages are rounded up to the allocator's block size. Called once, after
    the steps (a walk over every object: not in a timed step)."""
    import torch

    modules, optimizers = [], []
    with warnings.catch_warnings():  # isinstance on a deprecated module-level proxy warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.nn.Module):
                modules.append(obj)
            elif isinstance(obj, torch.optim.Optimizer):
                optimizers.append(obj)
    seen: set = set()
    out: Dict[str, Dict[str, int]] = {}

    def add(kind: str, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type not in ("cpu", "cuda"):
            return
        try:
            storage = t.untyped_storage()
            key = (t.device.type, t.device.index, storage.data_ptr())
            nbytes = int(storage.nbytes())
        except (AttributeError, RuntimeError):  # torch < 2.0, or a tensor without storage
            key = (t.device.type, t.device.index, t.data_ptr())
            nbytes = t.numel() * t.element_size()
        if key in seen or nbytes == 0:
            return
        seen.add(key)
        if t.device.type == "cuda":
            nbytes = -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
        dev = "cpu" if t.device.type == "cpu" else str(t.device.index or 0)
        kinds = out.setdefault(dev, {"parameters": 0, "gradients": 0, "optimizer_state": 0})
        kinds[kind] += nbytes

    params = [p for m in modules for p in m.parameters(recurse=False)]
    params += [p for o in optimizers for g in o.param_groups for p in g.get("params", [])]
    for p in params:
        add("parameters", p)
    for p in params:
        add("gradients", p.grad)
    for o in optimizers:
        for state in o.state.values():
            for value in state.values() if isinstance(state, dict) else ():
                add("optimizer_state", value)
    return out


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is the CUDA caching allocator's out-of-memory error (torch.cuda.OutOfMemoryError
    since torch 1.13; a RuntimeError saying so before)."""
    import torch

    kind = getattr(torch.cuda, "OutOfMemoryError", None)
    if kind is not None and isinstance(exc, kind):
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)


_TRIED = re.compile(r"Tried to allocate ([\d.]+) ([KMGT]?i?B)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def out_of_memory(exc: BaseException, step: str, total_bytes: Optional[int]) -> Dict[str, Any]:
    """What the manifest records of an OOM raised in `step` ("profiled step 3 (active)", ...): where
    (the innermost frame, and the innermost frame of code outside torch), the step's peak so far, the
    device's total, the request that failed, and one line that says it all."""
    import torch

    frames = traceback.extract_tb(exc.__traceback__)
    where = _frame(frames[-1]) if frames else None
    own = [f for f in frames if not _library(f.filename)]
    source = _frame(own[-1]) if own else None
    peak = int(torch.cuda.max_memory_allocated())
    m = _TRIED.search(str(exc))
    tried = int(float(m.group(1)) * _UNITS.get(m.group(2), 1)) if m else None
    line = f"out of memory at {step}"
    if where:
        line += f" in {where}" + (f", called from {source}" if source and source != where else "")
    line += f": peak {peak / 2**30:.2f}"
    line += f" of {total_bytes / 2**30:.2f} GiB" if total_bytes else " GiB"
    if tried is not None:
        line += f", asked for {tried / 2**30:.2f} GiB more"
    return {
        "step": step,
        "where": where,
        "source": source,
        "peak_bytes": peak,
        "total_bytes": total_bytes,
        "tried_bytes": tried,
        "allocated_bytes": int(torch.cuda.memory_allocated()),
        "reserved_bytes": int(torch.cuda.memory_reserved()),
        "message": line,
    }


def _frame(f: Any) -> str:
    return f"{os.path.basename(f.filename)}:{f.lineno} ({f.name})"


def _library(path: str) -> bool:
    norm = path.replace("\\", "/")
    return "/torch/" in norm or "site-packages/" in norm or "dist-packages/" in norm or "/lib/python3" in norm
