"""Capture a script that makes its own `torch.profiler.profile` and never imports tracekit.

`tracekit capture --script train.py` runs the script as it is. Before it starts, `Adopter.install()` wraps
four methods of `torch.profiler.profile` (`start`, `step`, `stop`, `export_chrome_trace`) and the
DataLoader's iteration (`DataLoader.__iter__`, `_BaseDataLoaderIter.__next__`); the script's profiler keeps
its schedule, activities and trace handler, and tracekit only watches:

- each `prof.step()` is a step boundary, timed on the host clock where it is entered and where it returns
  (the profiler's own work inside the call, starting a cycle or exporting its trace, is in no step); on
  CUDA a step the profiler does not record (its schedule's `NONE` action: the wait steps, and every step
  after the last cycle) gets an event recorded on the current stream at each end, read without a
  synchronisation (`query()`) as the loop goes on;
- each DataLoader fetch (`next()` on its iterator; creating the iterator counts into the fetch that
  follows) is timed into the step it happens in, profiled or not;
- while no profiler runs (before it starts, after it stops) the loop's own steps are delimited by its
  fetches: every `k`-th fetch from the DataLoader it fetches from most starts a step (`k`: the fetches per
  profiled step, usually 1);
- each trace the profiler exports, wherever its handler writes it (`tensorboard_trace_handler('./log')`
  relative to the script's working folder, Lightning's `dirpath`, `prof.export_chrome_trace(path)` after
  the loop), is found by its path and copied into the run folder as `rank<r>.<time>.pt.trace.json[.gz]`.

The steps the profiler does not record, and the loop's steps outside it, are the manifest's unprofiled
steps (less the script's first step: lazy initialisation, the workers' start). With the seed recipe's
schedule (wait=1, ..., repeat=2) and no steps outside the profiler there are few: one per cycle, the
first of them the first step; the capture says how many, and the input pipeline's steady state then
rests on what its workers measured (tracekit.capture.workers). Stdlib + torch, Python 3.9.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, TextIO, Tuple

from tracekit.capture.knobs import KnobError, format_schedule
from tracekit.capture.loader import describe_loader, window_warning
from tracekit.capture.recorder import STOPPED

# The profiler's actions in which it records nothing (torch.profiler.ProfilerAction names).
UNRECORDED = ("NONE",)
RECORDING = ("RECORD", "RECORD_AND_SAVE", "DEVICE_STOPPED")
FEW_UNPROFILED = 5  # fewer unprofiled steps than this: the capture says the baseline is thin
# A long run keeps tracekit's records bounded: after this many unrecorded steps past a profiler's last
# recording (or fetches past its stop) nothing more is kept until it records again; before a profiler
# starts, the latest KEEP_BEFORE fetches are kept.
QUIET_STEPS = 64
KEEP_BEFORE = 512
SCHEDULE_ARGS = ("wait", "warmup", "active", "repeat", "skip_first")


class Stamp:
    """A CUDA event, then (once the device passed it) its time in ms after the adopter's first event."""

    __slots__ = ("event", "ms")

    def __init__(self, event: Any) -> None:
        self.event: Any = event
        self.ms = 0.0


@dataclass
class Boundary:
    """One call that ends a step and/or starts the next: the profiler's start(), step() or stop()."""

    kind: str  # start | step | stop
    entry_ns: int
    cpu_entry_ns: int
    action_before: Optional[str]  # the profiler's action in the step this call ends
    stamp_entry: Any = None  # device time at entry (a Stamp), when the step it ends was not recorded
    return_ns: int = 0
    cpu_return_ns: int = 0
    step_num: int = 0  # the step this call starts (the trace's ProfilerStep#N)
    action_after: Optional[str] = None
    stamp_return: Any = None


@dataclass
class Adopted:
    """A profiler the script made, as tracekit saw it."""

    index: int
    prof: Any
    boundaries: List[Boundary] = field(default_factory=list)
    running: bool = False
    quiet: int = 0  # unrecorded steps since its last recording
    has_recorded: bool = False  # `recorded`, kept up to date by the hooks (no scan per step)

    @property
    def recorded(self) -> bool:
        return any(b.action_after in RECORDING for b in self.boundaries)


@dataclass
class Fetch:
    start_ns: int
    end_ns: int
    cpu_ns: int
    loader: int  # id() of the DataLoader
    delimits: bool  # a next() (True) or an iterator's creation (False)
    stamp: Any = None  # device time at its start (a Stamp), outside every profiler


@dataclass
class Step:
    start_ns: int
    end_ns: int
    cpu_ms: Optional[float]
    where: str  # outside | profiler
    phase: str  # outside | wait | warmup | active | done
    step_num: Optional[int] = None
    events: Tuple[Any, Any] = (None, None)
    wait_ms: float = 0.0
    fetches: int = 0
    fetch_end_ms: Optional[float] = None

    @property
    def host_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def unprofiled(self) -> bool:
        return self.where == "outside" or self.phase in ("wait", "done")


def action_name(action: Any) -> Optional[str]:
    return None if action is None else str(getattr(action, "name", action))


def schedule_params(fn: Any) -> Optional[Dict[str, int]]:
    """wait/warmup/active/repeat/skip_first of a `torch.profiler.schedule(...)` function (read from its
    closure; Lightning wraps it in a ScheduleWrapper whose `_schedule` it is), else None."""
    fn = getattr(fn, "_schedule", fn)
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return None
    values = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            values[name] = cell.cell_contents
        except ValueError:
            continue
    if not all(isinstance(values.get(k), int) for k in ("wait", "warmup", "active")):
        return None
    return {k: int(values.get(k) or 0) for k in SCHEDULE_ARGS}


class Adopter:
    """Watches the script's profiler and DataLoaders (module docstring); one per capture process."""

    def __init__(self, out_dir: str, device: str, rank: int = 0, stream: Optional[TextIO] = None) -> None:
        self.out_dir = out_dir
        self.rank = rank
        self.stream = stream if stream is not None else sys.stderr
        self.cuda = device == "cuda"
        self.origin_ns = time.perf_counter_ns()
        self.profilers: List[Adopted] = []
        self.fetches: List[Fetch] = []
        self.loaders: Dict[int, Dict[str, Any]] = {}
        self.exports: List[Tuple[str, Optional[int], int]] = []  # (path, profiler index, time_ns)
        self.running: Optional[Adopted] = None
        self.exported_by_tracekit: List[str] = []
        self._own: Dict[int, bool] = {}
        self._restore: List[Tuple[Any, str, Any]] = []
        self._pending: Deque[Stamp] = deque()  # stamps whose events the device has not passed yet
        self._origin: Any = None  # the first event: every stamp is a time after it
        self.closed = False
        self._exporting = False  # tracekit exports a profiler's results itself (collect_traces)
        self.quiet = False  # keep no fetches (QUIET_STEPS)
        self._after_stop = 0  # fetches since the last profiler stopped
        self.step_calls = 0  # prof.step() calls of the script's profilers (the steps its loop finished)

    # -- hooks ------------------------------------------------------------------------------------
    def install(self) -> None:
        import torch.profiler
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        prof_cls = torch.profiler.profile
        self._patch(prof_cls, "start", self._start_hook)
        self._patch(prof_cls, "step", self._step_hook)
        self._patch(prof_cls, "stop", self._stop_hook)
        self._patch(prof_cls, "export_chrome_trace", self._export_hook)
        self._patch(DataLoader, "__iter__", self._iter_hook)
        self._patch(_BaseDataLoaderIter, "__next__", self._next_hook)

    def uninstall(self) -> None:
        for cls, name, original in reversed(self._restore):
            if original is None:  # inherited: the class had none of its own
                delattr(cls, name)
            else:
                setattr(cls, name, original)
        self._restore = []

    def own(self, prof: Any) -> None:
        """Mark tracekit's own profiler (a script that uses tracekit.capture.session): not adopted."""
        self._own[id(prof)] = True

    def _patch(self, cls: Any, name: str, make: Callable[[Any], Any]) -> None:
        own = cls.__dict__.get(name)
        self._restore.append((cls, name, own))
        setattr(cls, name, make(own or getattr(cls, name)))

    def _adopted(self, prof: Any) -> Optional[Adopted]:
        if self._own.get(id(prof)):
            return None
        for a in self.profilers:
            if a.prof is prof:
                return a
        return None

    def _stamp(self) -> Stamp:
        """A CUDA event recorded on the current stream now, read later as a device time (no sync)."""
        import torch

        if self._origin is None:
            self._origin = torch.cuda.Event(enable_timing=True)
            self._origin.record()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        stamp = Stamp(ev)
        self._pending.append(stamp)
        return stamp

    def _start_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def start(prof: Any, *args: Any, **kwargs: Any) -> Any:
            if adopter._own.get(id(prof)) or adopter.closed:
                return original(prof, *args, **kwargs)
            a = adopter._adopted(prof)
            if a is None:
                a = Adopted(len(adopter.profilers), prof)
                adopter.profilers.append(a)
            b = Boundary("start", time.perf_counter_ns(), time.process_time_ns(), None)
            result = original(prof, *args, **kwargs)
            adopter._returned(b, prof)
            a.boundaries.append(b)
            a.running, a.quiet = True, 0
            adopter.running, adopter.quiet = a, False
            return result

        return start

    def _step_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def step(prof: Any, *args: Any, **kwargs: Any) -> Any:
            a = adopter._adopted(prof)
            if a is None or not a.running:
                return original(prof, *args, **kwargs)
            if STOPPED:  # a Ctrl-C Python lost (tracekit.capture.cli): stop as the session does
                raise KeyboardInterrupt
            adopter.step_calls += 1
            before = action_name(getattr(prof, "current_action", None))
            if a.quiet >= QUIET_STEPS:  # long past its last recording: watch only for the next one
                result = original(prof, *args, **kwargs)
                if action_name(getattr(prof, "current_action", None)) not in UNRECORDED:
                    b = Boundary("resume", time.perf_counter_ns(), time.process_time_ns(), before)
                    adopter._returned(b, prof)
                    a.boundaries.append(b)
                    a.quiet, adopter.quiet = 0, False
                return result
            b = Boundary("step", time.perf_counter_ns(), time.process_time_ns(), before)
            if adopter.cuda and before in UNRECORDED:
                b.stamp_entry = adopter._stamp()
            try:
                return original(prof, *args, **kwargs)
            finally:
                adopter._returned(b, prof)
                a.boundaries.append(b)
                a.has_recorded = a.has_recorded or b.action_after in RECORDING
                a.quiet = a.quiet + 1 if b.action_after in UNRECORDED and a.has_recorded else 0
                adopter.quiet = a.quiet >= QUIET_STEPS
                if adopter._pending:
                    adopter._poll()

        return step

    def _stop_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def stop(prof: Any, *args: Any, **kwargs: Any) -> Any:
            a = adopter._adopted(prof)
            if a is None or not a.running:
                return original(prof, *args, **kwargs)
            before = action_name(getattr(prof, "current_action", None))
            b = Boundary("stop", time.perf_counter_ns(), time.process_time_ns(), before)
            if adopter.cuda and before in UNRECORDED:
                b.stamp_entry = adopter._stamp()
            try:
                return original(prof, *args, **kwargs)
            finally:
                b.return_ns, b.cpu_return_ns = time.perf_counter_ns(), time.process_time_ns()
                a.boundaries.append(b)
                a.running = False
                if adopter.running is a:
                    adopter.running = None
                adopter._after_stop, adopter.quiet = 0, False

        return stop

    def _returned(self, b: Boundary, prof: Any) -> None:
        b.return_ns, b.cpu_return_ns = time.perf_counter_ns(), time.process_time_ns()
        b.step_num = int(getattr(prof, "step_num", 0) or 0)
        b.action_after = action_name(getattr(prof, "current_action", None))
        if self.cuda and b.action_after in UNRECORDED:
            b.stamp_return = self._stamp()

    def _export_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def export_chrome_trace(prof: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(prof, path, *args, **kwargs)
            if not adopter._own.get(id(prof)) and not adopter._exporting:
                a = adopter._adopted(prof)
                adopter.exports.append(
                    (os.path.abspath(os.fspath(path)), a.index if a else None, time.time_ns())
                )
            return result

        return export_chrome_trace

    def _iter_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def __iter__(loader: Any) -> Any:
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            it = original(loader)
            t1 = time.perf_counter_ns()
            key = id(loader)
            if key not in adopter.loaders:
                adopter.loaders[key] = describe_loader(loader)
            with contextlib.suppress(AttributeError):  # __slots__: its fetches then count for no loader
                it._tracekit_loader = key
            adopter.fetches.append(Fetch(t0, t1, c0, key, False))
            return it

        return __iter__

    def _next_hook(self, original: Callable[..., Any]) -> Callable[..., Any]:
        adopter = self

        def __next__(it: Any) -> Any:
            if adopter.quiet:
                return original(it)
            outside = adopter.running is None  # only a fetch outside the profiler delimits a step
            t0 = time.perf_counter_ns()
            c0 = time.process_time_ns() if outside else 0
            ev = adopter._stamp() if adopter.cuda and outside else None
            item = original(it)  # StopIteration ends the loop: no fetch, no step
            adopter.fetches.append(
                Fetch(t0, time.perf_counter_ns(), c0, getattr(it, "_tracekit_loader", 0), True, ev)
            )
            if outside:
                adopter._bound_outside()
            if adopter._pending:
                adopter._poll()
            return item

        return __next__

    def _bound_outside(self) -> None:
        """Keep the records of a long loop outside the profiler bounded (QUIET_STEPS, KEEP_BEFORE)."""
        if self.profilers:
            self._after_stop += 1
            self.quiet = self._after_stop > QUIET_STEPS
        elif len(self.fetches) > 2 * KEEP_BEFORE:
            del self.fetches[:KEEP_BEFORE]

    def _poll(self, wait: bool = False) -> None:
        """Read the device time of the events the device has passed, and let them go (a few per call;
        `wait`: all of them, after one synchronisation once the script is done)."""
        if wait and self._pending:
            import torch

            torch.cuda.synchronize()
        n = len(self._pending) if wait else 4
        while self._pending and n and (wait or self._pending[0].event.query()):
            s = self._pending.popleft()
            s.ms = float(self._origin.elapsed_time(s.event))
            s.event = None
            n -= 1

    # -- after the script -------------------------------------------------------------------------
    @property
    def adopted(self) -> bool:
        return bool(self.profilers)

    def close(self, exc: Optional[BaseException] = None) -> None:
        """Stop a profiler the script left running (an exception, Ctrl-C, no `stop()`), keeping the cycle
        in progress: torch saves a cycle only at its last active step, so a plain RECORD is made the last."""
        for a in self.profilers:
            if not a.running:
                continue
            try:
                from torch.profiler import ProfilerAction

                if a.prof.current_action == ProfilerAction.RECORD:
                    a.prof.current_action = ProfilerAction.RECORD_AND_SAVE
                a.prof.stop()
            except Exception as err:  # the device may be in an error state after a crash
                self.stream.write(f"tracekit.capture: could not stop the script's profiler: {err}\n")
        self.closed = True

    def main_loader(self) -> Optional[int]:
        counts: Dict[int, int] = {}
        for f in self.fetches:
            if f.delimits:
                counts[f.loader] = counts.get(f.loader, 0) + 1
        return max(counts, key=lambda k: counts[k]) if counts else None

    def steps(self) -> List[Step]:
        """Every step the script ran that tracekit can delimit, in time order (module docstring)."""
        profiled = []
        ranges = []
        for a in self.profilers:
            bs = a.boundaries
            if bs:
                ranges.append((bs[0].entry_ns, bs[-1].return_ns if not a.running else 2**63 - 1))
            later_recorded = [any(x.action_after in RECORDING for x in bs[i + 1 :]) for i in range(len(bs))]
            for i, (b0, b1) in enumerate(zip(bs, bs[1:])):
                if b1.kind != "step":  # the piece before stop(), or across a quiet stretch, is no whole step
                    continue
                profiled.append(
                    Step(
                        b0.return_ns,
                        b1.entry_ns,
                        (b1.cpu_entry_ns - b0.cpu_return_ns) / 1e6,
                        "profiler",
                        _phase(b0.action_after, later_recorded[i]),
                        b0.step_num,
                        (b0.stamp_return, b1.stamp_entry),
                    )
                )
        main = self.main_loader()
        per_step = [
            sum(
                1
                for f in self.fetches
                if f.delimits and f.loader == main and s.start_ns <= f.start_ns < s.end_ns
            )
            for s in profiled
        ]
        k = max(1, int(statistics.median([n for n in per_step if n]))) if any(per_step) else 1
        outside = self._outside_steps(main, ranges, k)
        steps = sorted(profiled + outside, key=lambda s: s.start_ns)
        self._loader_waits(steps)
        return steps

    def _outside_steps(self, main: Optional[int], ranges: List[Tuple[int, int]], k: int) -> List[Step]:
        """The loop's steps while no profiler runs: from a fetch of the main DataLoader to the k-th next,
        never across a profiler's run."""

        def inside(t: int) -> bool:
            return any(lo <= t <= hi for lo, hi in ranges)

        marks = [f for f in self.fetches if f.delimits and f.loader == main and not inside(f.start_ns)]
        runs: List[List[Fetch]] = []
        for f in marks:
            if runs and not any(runs[-1][-1].start_ns < lo < f.start_ns for lo, _ in ranges):
                runs[-1].append(f)
            else:
                runs.append([f])
        out = []
        for run in runs:
            for a, b in zip(run[::k], run[k::k]):
                out.append(
                    Step(
                        a.start_ns, b.start_ns, (b.cpu_ns - a.cpu_ns) / 1e6, "outside", "outside", None,
                        (a.stamp, b.stamp),
                    )
                )  # fmt: skip
        return out

    def _loader_waits(self, steps: List[Step]) -> None:
        """Each step's time in fetches (any DataLoader, the iterator's creation included)."""
        fetches = sorted(self.fetches, key=lambda f: f.start_ns)
        j = 0
        for s in steps:
            while j < len(fetches) and fetches[j].start_ns < s.start_ns:
                j += 1
            i = j
            while i < len(fetches) and fetches[i].start_ns < s.end_ns:
                f = fetches[i]
                s.wait_ms += (min(f.end_ns, s.end_ns) - f.start_ns) / 1e6
                s.fetches += int(f.delimits)
                s.fetch_end_ms = (min(f.end_ns, s.end_ns) - s.start_ns) / 1e6
                i += 1

    def device_ms(self, steps: List[Step]) -> Optional[List[float]]:
        """The steps' device times from their stamps, or None where a step lacks one."""
        if not self.cuda or not steps or any(a is None or b is None for s in steps for a, b in [s.events]):
            return None
        self._poll(wait=True)
        return [s.events[1].ms - s.events[0].ms for s in steps]

    def schedule(self) -> Tuple[Dict[str, int], str]:
        """The schedule the script's profiler ran, and where it was read from."""
        for a in self.profilers:
            sched = getattr(a.prof, "schedule", None)
            params = schedule_params(sched)
            if params is not None:
                how = "lightning" if hasattr(sched, "_schedule") else "torch.profiler.schedule"
                return params, how
        # no schedule (the profiler records from start() to stop()), or one tracekit cannot read: the
        # longest run of recorded steps is the active window
        best, run = 0, 0
        for a in self.profilers:
            for b in a.boundaries:
                run = run + 1 if b.action_after in RECORDING else 0
                best = max(best, run)
        no_schedule = all(not getattr(a.prof, "record_steps", True) for a in self.profilers)
        sched = {"wait": 0, "warmup": 0, "active": max(best, 1), "repeat": 1, "skip_first": 0}
        return sched, "none" if no_schedule else "observed"

    def settings(self) -> Dict[str, Any]:
        """What the script's (first) profiler was made with."""
        if not self.profilers:
            return {}
        p = self.profilers[0].prof
        handler = getattr(p, "on_trace_ready", None)
        acts = getattr(p, "activities", None) or []
        return {
            "class": f"{type(p).__module__}.{type(p).__qualname__}",
            "profilers": len(self.profilers),
            "activities": sorted(str(getattr(x, "name", x)) for x in acts),
            "record_shapes": bool(getattr(p, "record_shapes", False)),
            "profile_memory": bool(getattr(p, "profile_memory", False)),
            "with_stack": bool(getattr(p, "with_stack", False)),
            "on_trace_ready": getattr(handler, "__qualname__", None) or (repr(handler) if handler else None),
        }

    def collect_traces(self) -> List[Dict[str, Any]]:
        """Copy the traces the script's profilers exported into the run folder (tracekit's names); where
        a profiler recorded and nothing was exported, export its last results there. Raises KnobError
        when no trace is left to analyse (the traces written stay where they are)."""
        os.makedirs(self.out_dir, exist_ok=True)
        out: List[Dict[str, Any]] = []
        missing = []
        for path, _, t_ns in self.exports:
            if not os.path.isfile(path):
                missing.append(path)
                continue
            gz = path.endswith(".gz")
            name = f"rank{self.rank}.{t_ns}.pt.trace.json" + (".gz" if gz else "")
            dest = os.path.join(self.out_dir, name)
            if os.path.abspath(os.path.dirname(path)) == os.path.abspath(self.out_dir):
                dest = path  # the handler wrote into the run folder itself
            else:
                try:
                    os.link(path, dest)
                except OSError:
                    shutil.copyfile(path, dest)
            out.append({"path": path, "copied_as": os.path.basename(dest)})
        recorded = [a for a in self.profilers if a.recorded]
        if not out and recorded and not self.exports:
            for a in recorded:
                dest = os.path.join(self.out_dir, f"rank{self.rank}.{time.time_ns()}.pt.trace.json.gz")
                self._exporting = True
                try:
                    a.prof.export_chrome_trace(dest)
                except Exception as err:
                    self.stream.write(f"tracekit.capture: could not export the profiler's trace: {err}\n")
                    continue
                finally:
                    self._exporting = False
                self.exported_by_tracekit.append(dest)
                out.append({"path": None, "copied_as": os.path.basename(dest)})
            if out:
                self.stream.write(
                    f"tracekit.capture: the script's profiler exported no trace; tracekit exported its "
                    f"last recording into {self.out_dir}\n"
                )
        if out:
            return out
        if not self.profilers:
            raise KnobError("the script never started a torch.profiler.profile")
        if not recorded:
            sched, how = self.schedule()
            calls = sum(1 for a in self.profilers for b in a.boundaries if b.kind == "step")
            need = sched["skip_first"] + sched["wait"] + sched["warmup"]
            what = f"({format_schedule(sched)}) records only after {need} steps (skip_first + wait + warmup)"
            raise KnobError(
                f"the script's torch.profiler.profile never recorded a step: its schedule "
                f"{what if how != 'observed' else 'is its own'}, and the loop called prof.step() "
                f"{calls} times; run more steps or shorten the schedule"
            )
        if missing:
            raise KnobError(
                f"the script's profiler wrote {len(missing)} trace files, and none is there any more "
                f"(first: {missing[0]}); keep them, or write them elsewhere"
            )
        raise KnobError(
            "the script's profiler recorded, but its on_trace_ready handler wrote no trace file and "
            "tracekit could not export one; pass on_trace_ready=torch.profiler.tensorboard_trace_handler(DIR)"
        )

    def rank_record(self, status: str, error: Optional[str], production: Any) -> Dict[str, Any]:
        """This process's part of the manifest, in the shape `Session.rank_record` gives, plus `where`
        (outside the profiler, or its wait steps) and `cpu_ms` (the training process' CPU per step)."""
        steps = self.steps()
        first = steps[0] if steps else None
        un = [s for s in steps if s.unprofiled and s is not first]
        prof = [s for s in steps if s.where == "profiler"]
        dev = self.device_ms(un)
        sched, _ = self.schedule()
        main = self.main_loader()
        loader = dict(self.loaders.get(main, {})) if main is not None else {}
        fetched = any(f.delimits for f in self.fetches)
        if fetched:
            loader = loader or {"type": "unknown", "dataloader": False}
            loader["marked_by"] = "adopted"
            loader["window_hides_stall"] = bool(window_warning(sched, loader))
            loader["unprofiled_warmup_steps"] = 1
        if production is not None and loader:
            loader.update(production)
        samples = None
        if loader.get("dataloader") and isinstance(loader.get("batch_size"), int):
            k = statistics.median([s.fetches for s in prof if s.fetches] or [1])
            samples = int(loader["batch_size"] * k)

        def lists(ss: List[Step]) -> Dict[str, Any]:
            if not fetched:
                return {}
            return {
                "loader_wait_ms": [round(min(s.wait_ms, s.host_ms), 4) for s in ss],
                "loader_fetches": [s.fetches for s in ss],
                "loader_fetch_end_ms": [
                    None if s.fetch_end_ms is None else round(s.fetch_end_ms, 4) for s in ss
                ],
            }

        return {
            "rank": self.rank,
            "worker": f"rank{self.rank}",
            "status": status,
            "error": error,
            "steps_planned": None,
            "steps_completed": len(steps),
            "unprofiled": {
                "step_ms": [round(x, 4) for x in (dev if dev is not None else [s.host_ms for s in un])],
                "clock": "cuda_event" if dev is not None else "host",
                "host_step_ms": [round(s.host_ms, 4) for s in un],
                "cpu_ms": [None if s.cpu_ms is None else round(s.cpu_ms, 4) for s in un],
                "peak_memory_bytes": [None] * len(un),
                "samples": [samples] * len(un),
                "where": ["outside" if s.where == "outside" else s.phase for s in un],
                "consecutive": False,
                **lists(un),
            },
            "profiled": {
                "profiler_step": [s.step_num for s in prof],
                "host_step_ms": [round(s.host_ms, 4) for s in prof],
                "cpu_ms": [None if s.cpu_ms is None else round(s.cpu_ms, 4) for s in prof],
                "peak_memory_bytes": [None] * len(prof),
                "samples": [samples] * len(prof),
                "phases": [s.phase for s in prof],
                **lists(prof),
            },
            "traces": sorted(n for n in os.listdir(self.out_dir) if n.startswith(f"rank{self.rank}."))
            if os.path.isdir(self.out_dir)
            else [],
            "extra": {},
            "loader": loader or None,
        }

    def summary_line(self, rec: Dict[str, Any]) -> str:
        """What was adopted and how many unprofiled steps were timed, for the capture's progress."""
        sched, how = self.schedule()
        where = rec["unprofiled"]["where"]
        n_wait = sum(1 for w in where if w in ("wait", "done"))
        n_out = sum(1 for w in where if w == "outside")
        text = {"none": "no schedule: it records from start to stop", "observed": "its own schedule"}.get(
            how, f"schedule {format_schedule(sched)}"
        )
        line = (
            f"adopted the script's torch.profiler.profile ({text}); {len(where)} unprofiled steps timed "
            f"({n_wait} that the profiler did not record, {n_out} outside it; the script's first step is "
            "a warm-up)"
        )
        if not where:
            line += ": the analysis assumes a default profiler cost for the step without it"
        elif len(where) < FEW_UNPROFILED:
            line += (
                f": fewer than {FEW_UNPROFILED}, a thin baseline (inside the profiler only the schedule's "
                "wait steps are unprofiled); the input pipeline's steady state rests on its workers' timings"
            )
        return line


def _phase(action: Optional[str], later_recorded: bool) -> str:
    if action in RECORDING:
        return "active"
    if action == "WARMUP":
        return "warmup"
    return "wait" if later_recorded else "done"
