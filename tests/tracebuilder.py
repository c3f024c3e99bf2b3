"""The one helper that builds tiny synthetic Kineto traces for tests.

Times are given in microseconds, as Kineto writes them (floats with up to three decimals are fine).
A timeline reads top to bottom in the order it happens::

    t = TraceBuilder()
    t.step(1, 0, 100)                       # ProfilerStep#1 over [0, 100) µs on the main thread
    t.op("aten::mm", 10, 20)                # a cpu_op on the main thread
    t.launch(12, 5, corr=1)                 # cudaLaunchKernel inside it, correlation 1
    t.kernel("gemm", 30, 40, corr=1)        # the kernel it launched, on device 0 stream 7
    trace = t.build()                       # a dict in Chrome-trace form; t.write(path) writes it

`make_trace(kernels=..., runtime=..., ops=..., steps=...)` does the same from lists of tuples.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID = 100  # the host process
TID = 100  # the main thread (calls prof.step())


class TraceBuilder:
    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        pid: int = PID,
        tid: int = TID,
        device_properties: list[dict] | None = None,
        extra_meta: dict | None = None,
    ) -> None:
        self.pid = pid
        self.tid = tid
        self.events: list[dict] = []
        self.meta: dict[str, Any] = {"schemaVersion": 1, "displayTimeUnit": "ms"}
        if rank is not None:
            info: dict[str, Any] = {"backend": "nccl", "rank": rank}
            if world_size is not None:
                info["world_size"] = world_size
            self.meta["distributedInfo"] = info
        if device_properties is not None:
            self.meta["deviceProperties"] = device_properties
        if extra_meta:
            self.meta.update(extra_meta)
        self._ext = 0
        self.events.append(
            {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "python3"}}
        )

    # -- host side -------------------------------------------------------------------------------
    def _x(self, cat: str, name: str, ts: float, dur: float, tid: int | None, args: dict) -> dict:
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": self.tid if tid is None else tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }
        self.events.append(ev)
        return ev

    def step(self, n: int, start: float, end: float, tid: int | None = None) -> dict:
        """ProfilerStep#n over [start, end) µs (cat user_annotation)."""
        return self.annotation(f"ProfilerStep#{n}", start, end - start, tid=tid)

    def annotation(self, name: str, ts: float, dur: float, tid: int | None = None) -> dict:
        self._ext += 1
        return self._x("user_annotation", name, ts, dur, tid, {"External id": self._ext})

    def dataloader(self, ts: float, dur: float, kind: str = "_SingleProcessDataLoaderIter") -> dict:
        return self.annotation(f"enumerate(DataLoader)#{kind}.__next__", ts, dur)

    def op(self, name: str, ts: float, dur: float, tid: int | None = None, ext: int | None = None) -> dict:
        """A cpu_op. `ext` is its External id (defaults to a fresh one)."""
        if ext is None:
            self._ext += 1
            ext = self._ext
        return self._x("cpu_op", name, ts, dur, tid, {"External id": ext})

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        corr: int | None = None,
        tid: int | None = None,
        ext: int | None = None,
        cat: str = "cuda_runtime",
    ) -> dict:
        """A runtime/driver call (cudaLaunchKernel, cudaStreamSynchronize...), with flow start if corr."""
        args: dict[str, Any] = {}
        if ext is not None:
            args["External id"] = ext
        if corr is not None:
            args["correlation"] = corr
        ev = self._x(cat, name, ts, dur, tid, args)
        if corr is not None:
            self.events.append(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": self.pid,
                    "tid": ev["tid"],
                    "ts": ts,
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
        return ev

    def launch(self, ts: float, dur: float, corr: int, tid: int | None = None) -> dict:
        return self.runtime("cudaLaunchKernel", ts, dur, corr=corr, tid=tid)

    def sync(
        self, ts: float, dur: float, name: str = "cudaDeviceSynchronize", tid: int | None = None
    ) -> dict:
        return self.runtime(name, ts, dur, tid=tid)

    def python(self, name: str, ts: float, dur: float, py_id: int, parent: int | None = None) -> dict:
        """A python_function event (with_stack traces); name like 'train.py(57): main'."""
        args: dict[str, Any] = {"Python id": py_id, "Python thread": 0}
        if parent is not None:
            args["Python parent id"] = parent
        return self._x("python_function", name, ts, dur, None, args)

    # -- device side -----------------------------------------------------------------------------
    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        corr: int | None = None,
        device: int = 0,
        stream: int = 7,
        cat: str = "kernel",
        extra: dict | None = None,
    ) -> dict:
        args: dict[str, Any] = {"device": device, "stream": stream}
        if corr is not None:
            args["correlation"] = corr
        if extra:
            args.update(extra)
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": device,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": args,
        }
        self.events.append(ev)
        if corr is not None:
            self.events.append(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": device,
                    "tid": stream,
                    "ts": ts,
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        return ev

    def memcpy(self, ts: float, dur: float, corr: int | None = None, nbytes: int = 1024, **kw: Any) -> dict:
        return self.kernel(
            "Memcpy HtoD (Pageable -> Device)", ts, dur, corr, cat="gpu_memcpy", extra={"bytes": nbytes}, **kw
        )

    def memory(
        self,
        ts: float,
        nbytes: int,
        total_allocated: int,
        device: int = 0,
        *,
        addr: int | None = None,
        reserved: int | None = None,
        tid: int | None = None,
    ) -> dict:
        """A [memory] instant (profile_memory=True): an allocation (nbytes > 0) or a free (< 0) of the
        block at `addr` (default: a fresh address), with the allocator's totals after it (`reserved`
        defaults to twice the allocated total)."""
        args = {
            "Total Reserved": total_allocated * 2 if reserved is None else reserved,
            "Total Allocated": total_allocated,
            "Bytes": nbytes,
            "Addr": 140000000 + len(self.events) if addr is None else addr,
            "Device Type": 1 if device >= 0 else 0,
            "Device Id": device,
        }
        ev = {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": self.pid,
            "tid": self.tid if tid is None else tid,
            "ts": ts,
            "args": args,
        }
        self.events.append(ev)
        return ev

    def memory_events(self, events: list[tuple], base: int = 0, **kw: Any) -> int:
        """Allocations and frees in order, (ts, addr, bytes: + allocated, - freed[, tid]), with the
        totals they give from `base`; returns the total after the last."""
        total = base
        for ts, addr, nbytes, *tid in events:
            total += nbytes
            self.memory(ts, nbytes, total, addr=addr, tid=tid[0] if tid else None, **kw)
        return total

    # -- output ----------------------------------------------------------------------------------
    def build(self) -> dict:
        return {**self.meta, "traceEvents": list(self.events)}

    def write(self, path: Path, *, gz: bool | None = None) -> Path:
        path = Path(path)
        data = json.dumps(self.build()).encode()
        if gz is None:
            gz = path.name.endswith(".gz")
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


def make_trace(
    *,
    steps: list[tuple[int, float, float]] = (),
    ops: list[tuple[str, float, float]] = (),
    runtime: list[tuple[str, float, float, int | None]] = (),
    kernels: list[tuple[str, float, float, int | None]] = (),
    rank: int | None = None,
) -> dict:
    """A trace from tuples: steps (n, start, end), ops (name, ts, dur), runtime (name, ts, dur, corr),
    kernels (name, ts, dur, corr). All times in µs."""
    t = TraceBuilder(rank=rank)
    for n, a, b in steps:
        t.step(n, a, b)
    for name, ts, dur in ops:
        t.op(name, ts, dur)
    for name, ts, dur, corr in runtime:
        t.runtime(name, ts, dur, corr=corr)
    for name, ts, dur, corr in kernels:
        t.kernel(name, ts, dur, corr=corr)
    return t.build()
