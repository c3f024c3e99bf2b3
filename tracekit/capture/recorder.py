"""One capture in the target interpreter: a few unprofiled timed steps, then the profiled schedule.

A `Session` is driven by whoever owns the training loop (a built-in workload or the user's script)::

    with Session(config) as s:
        while not s.done:
            train_step()
            s.step(samples=batch_size)

Steps `0 .. timing_warmup + timing_steps - 1` run without the profiler; the last `timing_steps` of them are
timed (CUDA events on the current stream, so no extra synchronisation enters the step; on CPU the host
clock). Then `torch.profiler.profile` runs the fixed schedule and writes one
`<worker>.<time>.pt.trace.json.gz` per cycle through `tensorboard_trace_handler`. The caching allocator's
figures (allocated, reserved, their peaks, fragmentation, retries, OOMs) are read and its peaks reset at
every step boundary, and the model's parameters, gradients and optimizer state recorded once the steps
are done (tracekit.capture.memory). The host time spent getting each step's batch is timed in every
step, profiled or not, where the loop marks it (`loader()`, `fetch()`, or `tracekit.capture.steps`;
tracekit.capture.loader). Stdlib + torch, Python 3.9.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, ContextManager, Dict, Iterable, Iterator, List, Optional, TextIO, Tuple

from tracekit.capture.environment import environment, utc_now
from tracekit.capture.knobs import KnobError, format_schedule, schedule_phase, schedule_steps
from tracekit.capture.loader import Fetches, loader_lists, window_warning
from tracekit.capture.memory import columns, device_free, model_state, read_allocator

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
TRACE_SUFFIX = ".pt.trace.json.gz"


# The Ctrl-C that stopped this capture process, if one came (`tracekit.capture.cli`): a session stops
# at its next step even when Python lost the KeyboardInterrupt.
STOPPED: List[int] = []


def rank_manifest_name(rank: int) -> str:
    """Where rank `rank` of a multi-process capture leaves its part before the launcher merges them."""
    return f".manifest.rank{rank}.json"


@dataclass
class CaptureConfig:
    """Everything a capture process needs to know; it all lands in the manifest."""

    out_dir: str
    workload: str
    device: str
    schedule: Dict[str, int]
    knobs: Dict[str, Any]
    knobs_set: Dict[str, Any] = field(default_factory=dict)
    label: str = ""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    script: Optional[Dict[str, Any]] = None
    samples_per_step: Optional[int] = None
    # What the workload says about its own set-up once built (its `manifest_extra`: calibrations, the
    # precision torch actually uses); not knobs, since two repeats of one setting may calibrate differently.
    extra: Dict[str, Any] = field(default_factory=dict)
    # The machine-speed calibration run before and after the capture (`calibrate.calibrate`):
    # {"before": {...}, "after": {...}}.
    calibration: Dict[str, Any] = field(default_factory=dict)

    @property
    def worker(self) -> str:
        # TensorBoard's profiler plugin splits `<worker>.<time>.pt.trace.json.gz` at the first dot: no dots.
        return f"rank{self.rank}"


class Session:
    """Times, then profiles, the steps of one process. See the module docstring."""

    def __init__(self, config: CaptureConfig, stream: Optional[TextIO] = None) -> None:
        self.config = config
        self.knobs = dict(config.knobs)
        self.stream = stream if stream is not None else sys.stderr
        sched = config.schedule
        self.n_untimed = int(config.knobs.get("timing_warmup", 0))
        self.n_timed = int(config.knobs.get("timing_steps", 0))
        self.n_profiled = schedule_steps(sched)
        self.n_total = self.n_untimed + self.n_timed + self.n_profiled
        self.index = 0  # steps completed so far
        self.done = False
        self.entered = False
        self.active = True  # a real capture (NullSession.active is False)
        self.started_at: Optional[str] = None
        self.env: Dict[str, Any] = {}
        self.host_ms: List[float] = []
        self.peak_bytes: List[Optional[int]] = []
        self.allocator: List[Optional[Dict[str, int]]] = []  # per step: the allocator's figures at its end
        self.memory: Dict[str, Any] = {}  # the model per device, the device's free memory at the start
        self.oom: Optional[Dict[str, Any]] = None  # an out-of-memory error that ended the loop
        self._stats: Optional[Dict[str, int]] = None
        self.samples: List[Optional[int]] = []
        self.unprofiled_device_ms: List[float] = []
        self.loader_steps: List[Dict[str, Any]] = []  # per step: loader wait, fetches, last fetch end
        self.fetches = Fetches()
        self._warned_window = False
        self._events: List[Any] = []
        self._last = 0.0
        self._last_ns = 0
        self._last_cpu_ns = 0
        self.cpu_ms: List[float] = []  # the training process' CPU time per step (all its threads)
        self._prof: Any = None
        self._cuda = config.device == "cuda"
        self.adopter: Any = None  # tracekit.capture.adopt.Adopter of a script's capture: told of our profiler
        self.loader_facts: Dict[str, Any] = {}  # tracekit.capture.workers.loader_facts, for the manifest

    # -- the loop -------------------------------------------------------------------------------
    def __enter__(self) -> Session:
        import torch

        if self.entered:  # `session()` hands out one session; entering it again changes nothing
            return self
        self.entered = True
        self.started_at = utc_now()
        self.env = environment(self.config.device)
        # torch.profiler's first start imports torch._inductor (`hasattr(torch, "_inductor")`, torch 2.13:
        # seconds on a small CPU). Pay that here, before any step is timed.
        hasattr(torch, "_inductor")
        if self._cuda:
            self.memory["device_free_at_start"] = device_free()
            torch.cuda.reset_peak_memory_stats()
        if self.n_untimed + self.n_timed == 0:
            self._start_profiler()
        self._boundary(0)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(exc)

    def step(self, samples: Optional[int] = None) -> None:
        """Mark the end of one training step (`samples` = samples it processed, for throughput)."""
        if self.done:
            return
        if STOPPED:
            raise KeyboardInterrupt
        if not self.entered:
            raise KnobError(
                "session.step() was called before the session started: use `with session() as s:` "
                "around the loop, or loop over tracekit.capture.steps(loader)"
            )
        i = self.index
        step_start_ns = self._last_ns
        host_ms, peak = self._boundary(i + 1)
        self.loader_steps.append(self.fetches.take(step_start_ns))
        self.host_ms.append(host_ms)
        self.peak_bytes.append(peak)
        self.allocator.append(self._stats)
        self.samples.append(samples if samples is not None else self.config.samples_per_step)
        self.index += 1
        self._progress(i, host_ms)
        if i < self.n_untimed + self.n_timed:
            if self.index == self.n_untimed + self.n_timed:
                self._finish_timing()
                self._start_profiler()
            return
        self._prof.step()
        if self.index == self.n_total:
            self._stop_profiler(None)
            self.done = True
            self._record_model()

    def loader(self, iterable: Iterable[Any], source: Any = None, how: str = "loader") -> Iterator[Any]:
        """Yield from `iterable`, timing each fetch (the `next()` that gets a batch) into its step.

        `source`: the DataLoader behind `iterable` when `iterable` only wraps it (a generator over
        epochs); its settings go into the manifest. Default: `iterable` itself. `how`: what the
        manifest says marked the fetches (`steps()` passes "steps")."""
        self._note(iterable if source is None else source, how)
        return self.fetches.timed(iterable)

    def fetch(self, source: Any = None) -> ContextManager[None]:
        """`with s.fetch(): batch = next(it)`: time a fetch the loop makes itself (`source`: the
        DataLoader it fetches from, for the manifest)."""
        if source is not None or self.fetches.how is None:
            self._note(source, "fetch")
        return self.fetches.fetch()

    def _note(self, source: Any, how: str) -> None:
        if source is not None:
            self.fetches.note(source, how)
        elif self.fetches.how is None:
            self.fetches.how = how
        self._warm_past_queue()
        warning = window_warning(self.config.schedule, self.fetches.loader)
        if warning and not self._warned_window and self.config.rank == 0:
            self._warned_window = True
            self.stream.write(f"tracekit.capture: warning: {warning}\n")
            self.stream.flush()

    def _warm_past_queue(self) -> None:
        """Time no step the DataLoader serves from the batches its workers made ahead at its start: the
        first `prefetch_depth` steps after `iter(loader)` can take a ready batch whatever the workers'
        throughput (H200, 8 workers × prefetch 2: 12 warm-up + timed steps all ~3 ms, a step of ~28 ms
        once the queue was drained), so the unprofiled warm-up lasts at least that many steps. Only
        before the timing starts; the manifest's loader record says so."""
        depth = int((self.fetches.loader or {}).get("prefetch_depth") or 0)
        started = self._prof is not None or bool(self._events) or self.index > self.n_untimed
        if depth <= self.n_untimed or started or self.n_timed == 0:
            return
        self.n_total += depth - self.n_untimed
        self.n_untimed = depth
        if self.config.rank == 0:
            self.stream.write(
                f"tracekit.capture: unprofiled warm-up extended to {depth} steps, past the {depth} batches "
                "the DataLoader's workers make ahead at its start (timed steps then show its steady state)\n"
            )
            self.stream.flush()

    def close(self, exc: Optional[BaseException] = None) -> None:
        """Stop the profiler (keeping the cycle in progress when `exc` ended the loop early). Idempotent."""
        if self._prof is not None:
            self._stop_profiler(exc)
        self._record_model()
        if self._events:
            try:
                self._finish_timing()
            except Exception:  # the device may be in an error state after a crash
                self._events = []
        self.done = True

    # -- measurement ----------------------------------------------------------------------------
    def _boundary(self, b: int) -> Tuple[float, Optional[int]]:
        """Boundary `b` is the start of step `b` (and the end of step `b - 1`)."""
        import torch

        now_ns, cpu_ns = time.perf_counter_ns(), time.process_time_ns()
        if b > 0:
            self.cpu_ms.append((cpu_ns - self._last_cpu_ns) / 1e6)
        self._last_cpu_ns = cpu_ns
        now = now_ns / 1e9
        host_ms = (now - self._last) * 1e3
        self._last, self._last_ns = now, now_ns
        peak = None
        if self._cuda:
            if self.n_untimed <= b <= self.n_untimed + self.n_timed:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._events.append(ev)
            self._stats = read_allocator()  # and its peaks reset: the next step's are its own
            peak = self._stats["allocated_peak"]
        return host_ms, peak

    def _finish_timing(self) -> None:
        import torch

        if self._cuda and self._events:
            torch.cuda.synchronize()
            evs = self._events
            self.unprofiled_device_ms = [a.elapsed_time(b) for a, b in zip(evs, evs[1:])]
        self._events = []

    def _start_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        sched = self.config.schedule
        activities = [ProfilerActivity.CPU]
        if self._cuda:
            activities.append(ProfilerActivity.CUDA)
        os.makedirs(self.config.out_dir, exist_ok=True)
        # One file per cycle is what we want; torch >= 2.5 warns about it once per process.
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        self._prof = profile(
            activities=activities,
            schedule=schedule(
                wait=sched["wait"],
                warmup=sched["warmup"],
                active=sched["active"],
                repeat=sched["repeat"],
                skip_first=sched["skip_first"],
            ),
            on_trace_ready=tensorboard_trace_handler(
                self.config.out_dir, worker_name=self.config.worker, use_gzip=True
            ),
            record_shapes=bool(self.knobs.get("record_shapes", False)),
            with_stack=bool(self.knobs.get("with_stack", False)),
            profile_memory=bool(self.knobs.get("profile_memory", False)),
        )
        if self.adopter is not None:
            self.adopter.own(self._prof)
        self._prof.__enter__()

    def _stop_profiler(self, exc: Optional[BaseException]) -> None:
        prof, self._prof = self._prof, None
        if exc is not None:
            # torch.profiler saves a cycle only when its last active step ends (RECORD_AND_SAVE); stopping
            # in a plain RECORD step drops what was recorded. Mark it as the last one so the steps that ran
            # before the crash or Ctrl-C are written.
            try:
                from torch.profiler import ProfilerAction

                if prof.current_action == ProfilerAction.RECORD:
                    prof.current_action = ProfilerAction.RECORD_AND_SAVE
            except Exception:
                pass
        prof.__exit__(None, None, None)

    def _record_model(self) -> None:
        """The model's bytes per device (tracekit.capture.memory.model_state), once: after the last step,
        or when the loop ended early (the objects are still alive in both)."""
        if "model" in self.memory or not self.entered:
            return
        try:
            self.memory["model"] = model_state()
        except Exception as exc:  # a broken object among the process's: the capture stands without it
            self.memory["model_error"] = f"{type(exc).__name__}: {exc}"

    def step_label(self) -> str:
        """The step in progress, as the progress lines and the OOM message name it."""
        i = self.index
        first_prof = self.n_untimed + self.n_timed
        if not self.entered:
            return "the start (before the first step)"
        if i < first_prof:
            return f"unprofiled step {i + 1} of {first_prof}"
        n = i - first_prof
        return f"ProfilerStep#{n} ({schedule_phase(self.config.schedule, n)}, step {i + 1} of {self.n_total})"

    def _progress(self, i: int, host_ms: float) -> None:
        if self.config.rank != 0:
            return
        if i < self.n_untimed:
            what = "unprofiled warm-up"
        elif i < self.n_untimed + self.n_timed:
            what = "unprofiled timed"
        else:
            what = f"profiled {schedule_phase(self.config.schedule, i - self.n_untimed - self.n_timed)}"
        label = f"[{self.config.label}] " if self.config.label else ""
        ranks = f" x{self.config.world_size} ranks" if self.config.world_size > 1 else ""
        wait = ""
        if self.fetches.seen and self.loader_steps:
            wait = f" (loader wait {self.loader_steps[-1]['wait_ms']:.1f} ms)"
        self.stream.write(
            f"tracekit.capture: {label}{self.config.workload}{ranks} step {i + 1}/{self.n_total} "
            f"({what}) {host_ms:.1f} ms{wait}\n"
        )
        self.stream.flush()

    # -- results --------------------------------------------------------------------------------
    def traces(self) -> List[str]:
        prefix = self.config.worker + "."
        try:
            names = os.listdir(self.config.out_dir)
        except OSError:
            return []
        return sorted(n for n in names if n.startswith(prefix) and n.endswith(TRACE_SUFFIX))

    def rank_record(self, status: str, error: Optional[str]) -> Dict[str, Any]:
        """This process's part of the manifest: its step measurements and its trace files."""
        first_timed, first_prof = self.n_untimed, self.n_untimed + self.n_timed
        host_unprof = self.host_ms[first_timed:first_prof]
        unprof_ms = self.unprofiled_device_ms if self.unprofiled_device_ms else host_unprof
        # Loader waits only where the loop marked its fetches (else unknown, not zero).
        timed_loader = loader_lists(self.loader_steps[first_timed:first_prof]) if self.fetches.seen else {}
        prof_loader = loader_lists(self.loader_steps[first_prof:]) if self.fetches.seen else {}
        return {
            "rank": self.config.rank,
            "worker": self.config.worker,
            "status": status,
            "error": error,
            "steps_planned": self.n_total,
            "steps_completed": self.index,
            "unprofiled": {
                "step_ms": [round(x, 4) for x in unprof_ms],
                "clock": "cuda_event" if self.unprofiled_device_ms else "host",
                "host_step_ms": [round(x, 4) for x in host_unprof],
                "cpu_ms": [round(x, 4) for x in self.cpu_ms[first_timed:first_prof]],
                "peak_memory_bytes": self.peak_bytes[first_timed:first_prof],
                **({"allocator": columns(self.allocator[first_timed:first_prof])} if self._cuda else {}),
                "samples": self.samples[first_timed:first_prof],
                **timed_loader,
            },
            # Entry i of each profiled list is ProfilerStep#i in the traces (torch numbers the steps from the
            # profiler's start); `phases` says which were recorded (active).
            "profiled": {
                "profiler_step": list(range(len(self.host_ms[first_prof:]))),
                "host_step_ms": [round(x, 4) for x in self.host_ms[first_prof:]],
                "cpu_ms": [round(x, 4) for x in self.cpu_ms[first_prof:]],
                "peak_memory_bytes": self.peak_bytes[first_prof:],
                **({"allocator": columns(self.allocator[first_prof:])} if self._cuda else {}),
                "samples": self.samples[first_prof:],
                "phases": [
                    schedule_phase(self.config.schedule, i) for i in range(len(self.host_ms[first_prof:]))
                ],
                **prof_loader,
            },
            "traces": self.traces(),
            "extra": dict(self.config.extra),
            "loader": self.loader_record(),
            "memory": dict(self.memory),
            "oom": self.oom,
        }

    def loader_record(self) -> Optional[Dict[str, Any]]:
        """How the loop marked its fetches and what it fetched from (None: it marked none)."""
        f = self.fetches
        if not f.seen:
            return None
        doc: Dict[str, Any] = {"marked_by": f.how}
        doc.update(f.loader or {})
        doc["window_hides_stall"] = bool(window_warning(self.config.schedule, f.loader))
        doc["unprofiled_warmup_steps"] = self.n_untimed  # timing_warmup, or the prefetch depth when longer
        doc.update(self.loader_facts)
        return doc

    def manifest(self, status: str, error: Optional[str]) -> Dict[str, Any]:
        return manifest_doc(
            self.config, self.rank_record(status, error), self.env, self.started_at, status, error
        )


def manifest_doc(
    cfg: CaptureConfig,
    rec: Dict[str, Any],
    env: Dict[str, Any],
    started_at: Optional[str],
    status: str,
    error: Optional[str],
) -> Dict[str, Any]:
    """The manifest of one process (`rec`: its rank record) with the capture's settings and environment."""
    from tracekit.version import __version__

    spp = [s for s in rec["unprofiled"]["samples"] + rec["profiled"]["samples"] if s is not None]
    peaks = [p for p in rec["unprofiled"]["peak_memory_bytes"] + rec["profiled"]["peak_memory_bytes"] if p]
    doc: Dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "tracekit_version": __version__,
        "workload": cfg.workload,
        "run": cfg.label or None,
        "script": cfg.script,
        "knobs": cfg.knobs,
        "knobs_set": cfg.knobs_set,
        "extra": dict(cfg.extra),
        "calibration": dict(cfg.calibration),
        "schedule": dict(cfg.schedule),
        "schedule_text": format_schedule(cfg.schedule),
        "device_kind": cfg.device,
        "started_at": started_at,
        "finished_at": utc_now(),
        "world_size": cfg.world_size,
        "status": status,
        "error": error,
        "samples_per_step": spp[0] if spp else None,
        "global_samples_per_step": spp[0] * cfg.world_size if spp else None,
        "unprofiled_step_ms": rec["unprofiled"]["step_ms"],
        "unprofiled_loader_wait_ms": rec["unprofiled"].get("loader_wait_ms"),
        "loader": rec["loader"],
        "peak_memory_bytes": max(peaks) if peaks else None,
        "oom": rec.get("oom"),
        "ranks": [rec],
    }
    doc.update(env)
    return doc


def write_json(path: str, doc: Dict[str, Any]) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def merge_rank_manifests(docs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One manifest from the ranks' parts: rank 0's environment and figures, every rank's record."""
    docs = sorted(docs, key=lambda d: d["ranks"][0]["rank"])
    merged = dict(docs[0])
    merged["ranks"] = [d["ranks"][0] for d in docs]
    statuses = [r["status"] for r in merged["ranks"]]
    for worst in ("oom", "interrupted", "crashed"):
        if worst in statuses:
            merged["status"] = worst
    merged["oom"] = next((r["oom"] for r in merged["ranks"] if r.get("oom")), None)
    errors = [f"rank {r['rank']}: {r['error']}" for r in merged["ranks"] if r["error"]]
    merged["error"] = "\n".join(errors) or None
    return merged
