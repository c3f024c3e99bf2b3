"""The input pipeline, measured without the profiler: host time spent getting each step's batch.

The profiler hides a DataLoader stall more often than it shows it: its own pauses (start-up, the trace
export between cycles) let the workers refill their queue, and an active window of fewer steps than the
batches the workers hold ahead (`num_workers × prefetch_factor`) is served from that queue. So the
capture times the fetch itself in every step, profiled or not, with the host clock around `next()`:

    for batch in tracekit.capture.steps(loader): ...        # every next() is timed
    for batch in s.loader(loader): ...; s.step()            # the same, with an explicit session
    with s.fetch(): batch = next(it)                        # a fetch the script makes itself

A `Fetches` accumulates the time of the fetches of the current step; the session takes it at each step
boundary. `describe_loader` records what a `torch.utils.data.DataLoader` was built with. Stdlib (+ the
object's own attributes; torch is not imported here), Python 3.9.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

LOADER_ATTRS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "batch_size")


def describe_loader(obj: Any) -> Dict[str, Any]:
    """What the manifest records about the iterable a capture's steps fetch from.

    For a DataLoader: its class, `num_workers`, `prefetch_factor` (None without workers in torch >= 2.0;
    torch 1.x reports 2 whatever the workers), `pin_memory`, `persistent_workers`, `batch_size` and
    `prefetch_depth`, the batches its workers hold ahead (num_workers × prefetch_factor; 0 without
    workers). Another iterable: its class only.
    """
    cls = type(obj)
    doc: Dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}", "dataloader": False}
    try:
        from torch.utils.data import DataLoader
    except ImportError:  # pragma: no cover - the capture side always has torch
        return doc
    if not isinstance(obj, DataLoader):
        return doc
    doc["dataloader"] = True
    for attr in LOADER_ATTRS:
        value = getattr(obj, attr, None)
        doc[attr] = value if value is None or isinstance(value, (bool, int, float)) else str(value)
    workers = int(doc.get("num_workers") or 0)
    if workers == 0:
        doc["prefetch_factor"] = None  # torch 1.x reports its default even without workers
    factor = doc.get("prefetch_factor")
    doc["prefetch_depth"] = workers * int(factor if factor is not None else 2) if workers else 0
    return doc


def window_hides_loader(schedule: Mapping[str, int], loader: Optional[Mapping[str, Any]]) -> bool:
    """True when a profiled window cannot show a loader stall: it holds no more active steps than the
    batches the workers keep ready (`prefetch_depth`), which the profiler's pauses let them refill."""
    if not loader or not loader.get("prefetch_depth"):
        return False
    return int(schedule.get("active", 0)) <= int(loader["prefetch_depth"])


def window_warning(schedule: Mapping[str, int], loader: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The one-line warning `tracekit capture` prints when `window_hides_loader` holds, else None (for a
    script whose own profiler was adopted, the fix is in its schedule, not tracekit's)."""
    if not window_hides_loader(schedule, loader):
        return None
    assert loader is not None
    depth = int(loader["prefetch_depth"])
    fix = (
        f"give the script's schedule active={depth + 2} or more"
        if loader.get("marked_by") == "adopted"
        else f"use e.g. --schedule active={depth + 2}"
    )
    return (
        f"the profiled window (active={schedule['active']} steps) is not longer than the DataLoader's "
        f"prefetch depth ({loader['num_workers']} workers x prefetch_factor {loader['prefetch_factor']} = "
        f"{depth} batches): the batches the workers queue during the profiler's pauses can hide a loader "
        f"stall from the trace. The unprofiled steps' loader waits (manifest) still show it; to see it in "
        f"the trace {fix}"
    )


class Fetches:
    """Host time of the fetches made since the last step boundary (ns, perf_counter_ns)."""

    def __init__(self) -> None:
        self.ns = 0
        self.calls = 0
        self.end_ns: Optional[int] = None  # perf_counter_ns at the end of the last fetch
        self.loader: Optional[Dict[str, Any]] = None
        self.how: Optional[str] = None  # "steps", "loader" or "fetch": how the script marked it
        self.seen = False  # any fetch marked at all (a step without one then waited 0)

    def note(self, obj: Any, how: str) -> None:
        """Remember what is fetched from (the first DataLoader seen wins)."""
        if self.how is None:
            self.how = how
        if self.loader is None or not self.loader.get("dataloader"):
            self.loader = describe_loader(obj)

    @contextlib.contextmanager
    def fetch(self) -> Iterator[None]:
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            t1 = time.perf_counter_ns()
            self.ns += t1 - t0
            self.calls += 1
            self.end_ns = t1
            self.seen = True

    def timed(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield from `iterable`, timing each `next()` (and the `iter()` that starts a DataLoader's
        workers, which belongs to the first fetch)."""
        it: Optional[Iterator[Any]] = None
        while True:
            with self.fetch():
                if it is None:
                    it = iter(iterable)
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item

    def take(self, step_start_ns: int) -> Dict[str, Any]:
        """The current step's record, and reset: wait ms, fetches, end of its last fetch after the
        step's start (ms; None without a fetch)."""
        end = None if self.end_ns is None or not self.calls else (self.end_ns - step_start_ns) / 1e6
        rec = {"wait_ms": self.ns / 1e6, "fetches": self.calls, "end_ms": end}
        self.ns, self.calls, self.end_ns = 0, 0, None
        return rec


def loader_lists(records: List[Dict[str, Any]]) -> Dict[str, List[Any]]:
    """Per-step records as the manifest's lists: `loader_wait_ms`, `loader_fetches`,
    `loader_fetch_end_ms`."""
    return {
        "loader_wait_ms": [round(r["wait_ms"], 4) for r in records],
        "loader_fetches": [r["fetches"] for r in records],
        "loader_fetch_end_ms": [None if r["end_ms"] is None else round(r["end_ms"], 4) for r in records],
    }
