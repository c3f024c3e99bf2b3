"""The input pipeline measured at its source: the time each batch takes to produce in a DataLoader worker.

The training process sees only its fetches, and the profiler's pauses refill the workers' queue, so neither
tells whether the workers can keep up. Each worker therefore times every batch it makes (the dataset's
`__getitem__` calls and the collation: the fetcher's `fetch()`), on the host clock and in the worker's
CPU time, and appends one fixed-size record per batch to a file of its own in a folder the capture names
(`TRACEKIT_LOADER_LOG`, inherited by forked and spawned workers alike):

    start_ns, end_ns (perf_counter_ns: CLOCK_MONOTONIC, one clock for every process of the machine),
    cpu_ns (the worker process' CPU time for the batch), runqueue_ns (the time its thread waited for a
    CPU meanwhile, from Linux's /proc/thread-self/schedstat; -1 elsewhere), base_seed (one per DataLoader
    iterator), worker_id, num_workers

The wall time less the run-queue wait is the batch's production time with a CPU of its own (its CPU
time plus any I/O or sleep): what `num_workers` workers would take per batch on enough CPUs. The CPU
time is what the batch costs the machine, whoever else runs there.

`install()` replaces torch's `_worker_loop` (the function each worker process runs) by `worker_loop`,
which wraps the fetchers of that process and then runs torch's own loop; the training process is not
touched. `summarize()` reads the records back into the manifest's `loader.production`: per DataLoader
iterator, the workers, the batches, the wall and CPU time per batch, and how busy the workers were.
Stdlib + torch (imported inside functions), Python 3.9.
"""

from __future__ import annotations

import glob
import inspect
import os
import statistics
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ENV = "TRACEKIT_LOADER_LOG"
RECORD = struct.Struct("<qqqqqii")  # start_ns, end_ns, cpu_ns, runqueue_ns, base_seed, worker_id, num_workers
SCHEDSTAT = "/proc/thread-self/schedstat"  # "<on-CPU ns> <run-queue wait ns> <timeslices>"

_ORIGINAL: Optional[Callable[..., Any]] = None  # torch's _worker_loop (inherited by forked workers)
_context: Tuple[int, int, int] = (0, 0, 0)  # this worker's (base_seed, worker_id, num_workers)
_fd: Optional[int] = None
_sched_fd: Optional[int] = None  # this worker thread's schedstat, -1: not available


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: taskset, a container's CPU set), else the count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def install(folder: str) -> None:
    """Make every DataLoader worker started from now on time its batches into `folder`."""
    global _ORIGINAL
    import torch.utils.data._utils.worker as torch_worker

    os.makedirs(folder, exist_ok=True)
    os.environ[ENV] = folder
    if torch_worker._worker_loop is worker_loop:
        return
    _ORIGINAL = torch_worker._worker_loop
    torch_worker._worker_loop = worker_loop


def uninstall() -> None:
    global _ORIGINAL
    import torch.utils.data._utils.worker as torch_worker

    if _ORIGINAL is not None and torch_worker._worker_loop is worker_loop:
        torch_worker._worker_loop = _ORIGINAL
    _ORIGINAL = None
    os.environ.pop(ENV, None)


def worker_loop(*args: Any, **kwargs: Any) -> Any:
    """torch's `_worker_loop`, with this worker's batches timed (runs in the worker process)."""
    global _context
    import torch.utils.data._utils.worker as torch_worker

    # A forked worker inherits _ORIGINAL; a spawned one imports this module afresh, where torch's own
    # function is still in place.
    original = _ORIGINAL if _ORIGINAL is not None else torch_worker._worker_loop
    if original is worker_loop:  # pragma: no cover - install() keeps the original
        raise RuntimeError("tracekit.capture.workers: torch's _worker_loop was lost")
    try:
        bound = inspect.signature(original).bind(*args, **kwargs).arguments
        _context = (
            int(bound.get("base_seed") or 0) & 0x7FFFFFFFFFFFFFFF,
            int(bound.get("worker_id") or 0),
            int(bound.get("num_workers") or 0),
        )
        _wrap_fetchers()
    except Exception:  # another torch's signature: the worker runs untimed, as it would without tracekit
        pass
    return original(*args, **kwargs)


def _wrap_fetchers() -> None:
    from torch.utils.data._utils import fetch as torch_fetch

    for cls in (torch_fetch._MapDatasetFetcher, torch_fetch._IterableDatasetFetcher):
        fetch = cls.__dict__.get("fetch")
        if fetch is None or getattr(fetch, "_tracekit", False):
            continue
        cls.fetch = _timed(fetch)  # type: ignore[method-assign]


def _runqueue_ns() -> int:
    """This thread's total run-queue wait so far (ns), or -1 where the kernel does not say."""
    global _sched_fd
    if _sched_fd is None:
        try:
            _sched_fd = os.open(SCHEDSTAT, os.O_RDONLY)
        except OSError:
            _sched_fd = -1
    if _sched_fd < 0:
        return -1
    try:
        return int(os.pread(_sched_fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _timed(fetch: Callable[..., Any]) -> Callable[..., Any]:
    def timed_fetch(self: Any, possibly_batched_index: Any) -> Any:
        q0 = _runqueue_ns()
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        data = fetch(self, possibly_batched_index)
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        q1 = _runqueue_ns()
        _write(t0, t1, c1 - c0, q1 - q0 if q0 >= 0 and q1 >= 0 else -1)
        return data

    timed_fetch._tracekit = True  # type: ignore[attr-defined]
    return timed_fetch


def _write(t0: int, t1: int, cpu: int, runqueue: int) -> None:
    global _fd
    try:
        if _fd is None:
            folder = os.environ.get(ENV)
            if not folder:
                return
            path = os.path.join(folder, f"worker.{os.getpid()}.bin")
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, RECORD.pack(t0, t1, cpu, runqueue, *_context))
    except OSError:  # a full disk must not stop the user's training
        pass


def read(folder: str) -> List[Tuple[int, ...]]:
    """Every batch record in `folder`, by start time."""
    out = []
    for path in glob.glob(os.path.join(folder, "worker.*.bin")):
        with open(path, "rb") as fh:
            data = fh.read()
        whole = len(data) - len(data) % RECORD.size  # a record cut by a killed worker is dropped
        out += [RECORD.unpack_from(data, i) for i in range(0, whole, RECORD.size)]
    return sorted(out)


def _stats(values: List[float]) -> Dict[str, float]:
    xs = sorted(values)
    return {
        "median": round(statistics.median(xs), 4),
        "mean": round(statistics.fmean(xs), 4),
        "p10": round(xs[int(0.1 * (len(xs) - 1))], 4),
        "p90": round(xs[int(0.9 * (len(xs) - 1))], 4),
    }


def summarize(folder: Optional[str], origin_ns: int = 0) -> List[Dict[str, Any]]:
    """Per DataLoader iterator (most batches first): `workers`, `batches`, per batch (median, mean, p10,
    p90) its `wall_ms`, `cpu_ms`, `runqueue_ms` (None where unknown) and `own_ms` (wall less run-queue
    wait: its production time with a CPU of its own), `busy` (the workers' producing time over workers ×
    the span from the first batch's start to the last one's end), and that span (`first_ms`, `last_ms`
    after `origin_ns`)."""
    if not folder or not os.path.isdir(folder):
        return []
    groups: Dict[int, List[Tuple[int, ...]]] = {}
    for rec in read(folder):
        groups.setdefault(rec[4], []).append(rec)
    out = []
    for recs in groups.values():
        workers = max(r[6] for r in recs)
        start, end = min(r[0] for r in recs), max(r[1] for r in recs)
        produced = sum(r[1] - r[0] for r in recs)
        known = all(r[3] >= 0 for r in recs)
        out.append(
            {
                "workers": workers,
                "workers_seen": len({r[5] for r in recs}),
                "batches": len(recs),
                "wall_ms": _stats([(r[1] - r[0]) / 1e6 for r in recs]),
                "cpu_ms": _stats([r[2] / 1e6 for r in recs]),
                "runqueue_ms": _stats([r[3] / 1e6 for r in recs]) if known else None,
                "own_ms": _stats([(r[1] - r[0] - max(r[3], 0)) / 1e6 for r in recs]) if known else None,
                "busy": round(produced / (workers * (end - start)), 4) if end > start and workers else None,
                "first_ms": round((start - origin_ns) / 1e6, 3),
                "last_ms": round((end - origin_ns) / 1e6, 3),
            }
        )
    return sorted(out, key=lambda d: -d["batches"])


def loader_facts(folder: Optional[str], origin_ns: int = 0) -> Dict[str, Any]:
    """What the manifest's `loader` record gets from the workers and the machine: `production` (per
    iterator, `summarize`), `usable_cpus` (this process' affinity) and `trainer_threads` (torch's
    intra-op threads in the training process)."""
    threads = None
    try:
        import torch

        threads = int(torch.get_num_threads())
    except Exception:  # pragma: no cover - the capture side always has torch
        pass
    return {
        "production": summarize(folder, origin_ns),
        "usable_cpus": usable_cpus(),
        "trainer_threads": threads,
    }
