"""The input pipeline in the replay: a producer of batches with a throughput, feeding the replayed steps.

The trace rarely shows a loader stall (tracekit.analysis.loader: the profiler's pauses refill the workers'
queue), so the producer is taken from the unprofiled steps, whose fetches `tracekit capture` timed
(manifest `ranks[r].unprofiled`: `step_ms`, `host_step_ms`, `loader_wait_ms`, `loader_fetch_end_ms`).

Model (steady state of a producer and a consumer with a queue between them: the queue only delays the
first stall, it does not change the throughput). Per rank:

- the *consumer* is the replayed step without its fetches (`--set dataloader=0` on the trace), plus
  `fetch_ms`, a fetch's own cost when its batch is ready: the cheapest fetch of a step that did not wait
  (fetch < WAITED_MIN_SHARE of the step), unprofiled or in the replay; 0 when every fetch waited (then
  a ready batch's cost is not seen: it is small beside the batch's production);
- the *producer* makes one batch every `period_ms` (the worker pool's throughput): a step cannot start
  before its batch is produced, so the step is max(consumer, period). `period_ms` is measured where the
  consumer waited: a step whose fetch waited (loader wait ≥ WAITED_MIN_SHARE of the step) returned the
  moment its batch was produced, and the pool was busy throughout (a waiting consumer leaves no batch in
  the queue), so between waited fetches of the timed steps the batches came at the pool's rate:
  period = (end of a later waited fetch − end of an earlier one) / (steps between), the median over the
  windows of at least WINDOW_CYCLES × workers steps (WINDOW_MIN_STEPS at least) from a waited fetch to
  the first waited one past the window, else over the whole stretch from the first waited fetch to the
  last: a stall that is no part of the pool's rate (a first step's lazy initialisation, a pause) falls
  in a few windows, but it moved the whole stretch's mean by its length over the steps
  (docs/results/advice.md, the workers pair). A fetch waited when it took longer than a ready batch's
  fetch (the cheapest of the timed steps) by at least WAITED_MIN_SHARE of its step. With one timed step,
  which waited: that step's time; with none waited, or a single stall among steps that did not wait, the
  loader kept up and its throughput is unknown (only period ≤ the step): predictions then say so and
  leave it out. Timed steps that are not consecutive (an adopted profiler's wait steps and the loop's
  steps outside it) give no such span: the period is then the workers' own, a batch's production time
  with a CPU of its own over the workers (the manifest's `loader.production`, tracekit.capture.workers;
  tracekit.analysis.loader.batch_time), or unknown without it. (The two differ on purpose: a span between
  fetches holds one-off stalls that are no part of the pool's rate, hence the median over windows; the
  workers' own batch times are the batches themselves, each slow one costing the pool its whole time,
  hence their mean.)
  Without workers (`num_workers=0`) the batch is made inside the fetch: the step is consumer + load,
  load = the median unprofiled wait.
- `--set dataloader=F` scales the producer (period and fetch cost, or the serial load) by F;
  `--loader-workers N` scales the pool: period × W / N, with W and N capped at the host's CPUs less one
  (the training process keeps one: a pool cannot run more batches at once than there are cores),
  N = 0: loading in the training process, one worker's time per batch, serial.

Unprofiled step = max(consumer, period) per rank, the consumer the median of the replayed steps without
their fetches (a steady state: a step that spans the profiler's pause between two cycles, or a stall the
trace did show, is no consumer's work). The profiler cost is fitted so that this median matches the
consumer's unprofiled time, median(step − loader wait) (tracekit.whatif.predict).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from tracekit.analysis.loader import batch_time

WAITED_MIN_SHARE = 0.10  # a step whose loader wait is ≥ 10 % of it waited for its batch
WINDOW_CYCLES = 2  # the pool's rate over windows of two batches from every worker ...
WINDOW_MIN_STEPS = 4  # ... and of 4 steps at least


@dataclass(frozen=True)
class Producer:
    """One rank's input pipeline, from its unprofiled timed steps (ms)."""

    rank: int
    workers: Optional[int]  # the DataLoader's num_workers (None: not a DataLoader / unknown)
    period_ms: Optional[float]  # one batch per period_ms from the pool; None: it kept up (unknown)
    load_ms: float  # the median loader wait (the serial load per step without workers)
    fetch_ms: Optional[float]  # cheapest fetch of a step that did not wait: a ready batch's own cost
    consumer_ms: float  # median(step − loader wait): the step without waiting for its batch
    consumer_host_ms: Optional[float]  # the same on the host clock (median(host step − wait))
    waited_steps: int
    steps: int
    cpus: Optional[int]  # the capture host's CPU count

    @property
    def serial(self) -> bool:
        return self.workers == 0

    def pool(self, n: Optional[int]) -> Optional[int]:
        """A worker count as the host can run it (capped at its CPUs less one)."""
        if n is None:
            return None
        return min(n, self.cpus - 1) if self.cpus and self.cpus > 1 else n


def producers(manifest: Mapping[str, Any]) -> dict[int, Producer]:
    """Each rank's producer, where its capture timed the fetches of its unprofiled steps."""
    out = {}
    top_loader = manifest.get("loader") or {}
    host = manifest.get("host") or {}
    cpus = host.get("cpu_count") if isinstance(host, Mapping) else None
    for rec in manifest.get("ranks") or []:
        if not isinstance(rec, Mapping):
            continue
        p = _producer(rec, rec.get("loader") or top_loader, cpus if isinstance(cpus, int) else None)
        if p is not None:
            out[p.rank] = p
    return out


def _producer(rec: Mapping[str, Any], loader: Mapping[str, Any], cpus: Optional[int]) -> Optional[Producer]:
    un = rec.get("unprofiled") or {}
    step, wait = un.get("step_ms") or [], un.get("loader_wait_ms") or []
    if not step or len(step) != len(wait):
        return None
    step = [float(x) for x in step]
    wait = [min(float(w), s) for w, s in zip(wait, step)]
    host = [float(x) for x in un.get("host_step_ms") or []]
    ends = un.get("loader_fetch_end_ms") or [None] * len(step)
    waited = _waited(step, wait)
    workers = loader.get("num_workers") if loader.get("dataloader") else None
    if un.get("consecutive") is False:
        # steps from here and there (an adopted profiler's wait steps, the loop's steps outside it): no
        # span between their fetches is the pool's; its pace is what its workers measured, if anything
        period = _production_period(loader)
    else:
        period = _period(waited, host if len(host) == len(step) else step, ends, step, workers)
    return Producer(
        rank=int(rec.get("rank", 0)),
        workers=int(workers) if workers is not None else None,
        period_ms=period,
        load_ms=statistics.median(wait),
        fetch_ms=min((wait[i] for i in range(len(step)) if i not in waited), default=None),
        consumer_ms=statistics.median(s - w for s, w in zip(step, wait)),
        consumer_host_ms=statistics.median(h - w for h, w in zip(host, wait))
        if len(host) == len(step)
        else None,
        waited_steps=len(waited),
        steps=len(step),
        cpus=cpus,
    )


def _waited(step: list[float], wait: list[float]) -> list[int]:
    """The timed steps whose fetch waited for its batch: a wait beyond a ready batch's own cost (the
    cheapest fetch of the timed steps, where that one is small beside a step; else every fetch waited and
    the cost is not seen: 0) of at least WAITED_MIN_SHARE of the step. A ready batch's fetch is not
    free (unpickling it from the worker's queue, pinning, the transfer: ~0.2-0.5 ms on the H200 host), so
    on a step of a few ms the bare share alone called a ready fetch a wait."""
    typical = statistics.median(step) if step else 0.0
    floor = min(wait, default=0.0)
    if floor >= WAITED_MIN_SHARE * typical:
        floor = 0.0
    return [i for i, (w, s) in enumerate(zip(wait, step)) if s > 0 and w - floor >= WAITED_MIN_SHARE * s]


def _period(
    waited: list[int], host: list[float], ends: list[Any], step: list[float], workers: Optional[int] = None
) -> Optional[float]:
    """The pool's time per batch between waited fetches: the median over windows of the timed steps, or
    over the whole waited stretch where it holds no window (module docstring)."""
    if not waited or (len(waited) == 1 < len(step)):
        # none waited, or one stall among steps that did not wait: a moment the queue ran dry, not the
        # pool's rate (a pool slower than the consumer would have made every later step wait)
        return None
    first, last = waited[0], waited[-1]
    if last == first or ends[first] is None or ends[last] is None:
        return statistics.median(step[i] for i in waited)
    start = [sum(host[:i]) for i in range(len(host))]  # each step's start on the host clock

    def rate(a: int, b: int) -> float:
        return ((start[b] + float(ends[b])) - (start[a] + float(ends[a]))) / (b - a)

    k = max(WINDOW_MIN_STEPS, WINDOW_CYCLES * int(workers or 1))
    rates = []
    for a in waited:
        j = bisect.bisect_left(waited, a + k)
        if j == len(waited):
            break
        b = waited[j]
        if ends[a] is not None and ends[b] is not None:
            rates.append(rate(a, b))
    period = statistics.median(rates) if rates else rate(first, last)
    return period if period > 0 else statistics.median(step[i] for i in waited)


def _production_period(loader: Mapping[str, Any]) -> Optional[float]:
    """A batch's production time with a CPU of its own over the workers (tracekit.capture.workers), or
    None without the workers' timings."""
    prods = [p for p in loader.get("production") or [] if isinstance(p, Mapping)]
    if not prods or not prods[0].get("workers"):
        return None
    own = prods[0].get("own_ms") or prods[0].get("wall_ms") or {}
    return batch_time(own) / int(prods[0]["workers"]) if "median" in own or "mean" in own else None


@dataclass(frozen=True)
class LoaderPrediction:
    """One rank's producer under a scenario: the step it paces, or the serial load it adds (ms)."""

    rank: int
    period_ms: Optional[float]  # observed pool period (None: unknown, the loader kept up)
    predicted_period_ms: Optional[float]  # under the scenario (None: unknown)
    serial_ms: float  # time added to every step by loading in the training process
    fetch_ms: float  # the fetch's own cost added to the consumer
    workers: Optional[int]
    predicted_workers: Optional[int]
    note: str = ""

    def step_ms(self, consumer_ms: float) -> float:
        """The unprofiled step for a consumer of `consumer_ms` (steady state)."""
        c = consumer_ms + self.fetch_ms + self.serial_ms
        return max(c, self.predicted_period_ms) if self.predicted_period_ms is not None else c

    def bound(self, consumer_ms: float) -> bool:
        """Whether the producer paces the step."""
        p = self.predicted_period_ms
        return p is not None and p > consumer_ms + self.fetch_ms + self.serial_ms


def predict(
    p: Producer,
    dataloader: float = 1.0,
    workers: Optional[int] = None,
    trace_fetch_ms: Optional[float] = None,
) -> LoaderPrediction:
    """The producer scaled by `--set dataloader=F` and `--loader-workers N` (module docstring);
    `trace_fetch_ms`: the cheapest fetch of a profiled step that did not wait, as the replay sees it."""
    w_obs, w_new = p.pool(p.workers), p.pool(workers if workers is not None else p.workers)
    seen = [x for x in (p.fetch_ms, trace_fetch_ms) if x is not None]
    fetch = min(seen) if seen else 0.0
    note = ""
    if p.serial:
        load = p.load_ms * dataloader
        if not w_new:
            return LoaderPrediction(p.rank, None, None, load, 0.0, p.workers, w_new)
        # from loading in the training process to a pool: one batch per load / N, the fetch then costs
        # what a ready batch costs (unknown here: 0)
        return LoaderPrediction(
            p.rank, None, load / w_new, 0.0, 0.0, p.workers, w_new,
            "the pool's per-batch time is taken as the training process' own load time",
        )  # fmt: skip
    if p.period_ms is None:
        if workers is not None and workers != p.workers:
            note = (
                f"rank {p.rank}: the loader kept up in "
                + ("every timed step" if not p.waited_steps else f"all but one of {p.steps} timed steps")
                + f" (no other wait ≥ {WAITED_MIN_SHARE:.0%} of a step): its throughput, and so the "
                f"effect of {workers} workers, cannot be told"
            )
        return LoaderPrediction(p.rank, None, None, 0.0, fetch * dataloader, p.workers, w_new, note)
    period = p.period_ms * dataloader
    if w_new == 0:  # the pool's work moves into the training process: one worker's time per batch, serial
        serial = period * (w_obs or 1)
        return LoaderPrediction(p.rank, p.period_ms, None, serial, 0.0, p.workers, 0)
    if w_obs and w_new and w_new != w_obs:
        period = period * w_obs / w_new
    if workers is not None and w_new != workers:
        note = f"{workers} workers capped at {w_new} (the host's {p.cpus} CPUs, one for training)"
    return LoaderPrediction(p.rank, p.period_ms, period, 0.0, fetch * dataloader, p.workers, w_new, note)


__all__ = ["Producer", "LoaderPrediction", "producers", "predict", "WAITED_MIN_SHARE"]
