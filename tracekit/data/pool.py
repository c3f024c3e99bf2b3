"""The one pool of worker processes on this machine: the parse's decode workers (tracekit.parse.parser)
and the per-rank tasks of a job (tracekit.scale.executor.LocalExecutor) both run in it.

    for result in forked_map(fn, items, n, name=lambda item: f"rank {item.rank}"):   # in input order
        ...

    with ForkPool(n) as pool:                       # to submit other work beside a map
        side = pool.submit(digest, path)
        for result in pool.map(fn, items, name=...):
            ...

The workers are forked: they start with the driver's modules imported and its memory shared (a parse's
file pages), and items need not be importable by path. At most `window(n)` items are in flight, so a
result waits in the driver only until it is taken: the driver's memory follows the result size, not the
job's. A worker that dies (killed, out of memory) ends the work with one WorkerError that names what the
pool was working on, where a multiprocessing.Pool would have waited forever for its result.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Optional

from tracekit.data import signals
from tracekit.errors import WorkerError
from tracekit.settings import setting


def workers() -> int:
    """Worker processes: TRACEKIT_WORKERS, else one per CPU this process may run on (its affinity:
    `taskset -c 0,1` or a job scheduler's CPU set gives two, where os.cpu_count() counts the machine's)."""
    return setting("TRACEKIT_WORKERS") or usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may run on (os.sched_getaffinity where the OS has it, else os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def window(n: int) -> int:
    """Items in flight in a pool of `n` workers: each worker's, the next one queued for each, and two
    more, so that no worker waits for the driver to hand it work."""
    return 2 * n + 2


def forked_map(fn: Callable, items: Iterable, n: int, *, name: Callable[[Any], str] = repr) -> Iterator:
    """fn(item) for each item, in input order, in `n` forked workers; in this process when n <= 1, when
    there is one item, or where the OS cannot fork. `name(item)` says what a worker that dies was on."""
    items = list(items)
    n = min(n, len(items))
    if n <= 1 or not can_fork():
        yield from (fn(item) for item in items)
        return
    with ForkPool(n) as pool:
        yield from pool.map(fn, items, name=name)


class ForkPool:
    """`n` forked worker processes (a ProcessPoolExecutor: a dead worker fails its futures with
    BrokenProcessPool, which leaving the `with` block turns into a WorkerError; with "fork" it starts all
    its workers at the first submit, before it starts any thread). Leaving the block shuts it down."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
        self._in_flight: dict[Future, str] = {}

    def submit(self, fn: Callable, *args: Any, name: str = "a task") -> Future:
        # Held: the pool forks its workers at the first submit, and every submit takes locks that its
        # manager thread takes too (the future's, the work queue's: result() says why).
        with signals.held():
            future = self._pool.submit(fn, *args)
            self._in_flight[future] = name
            future.add_done_callback(self._done)
        return future

    def _done(self, future: Future) -> None:
        """A future that ended on its own leaves the names of what the pool is working on; one failed
        because a worker died stays among them."""
        if future.cancelled() or not isinstance(future.exception(), BrokenProcessPool):
            self._in_flight.pop(future, None)

    def map(self, fn: Callable, items: Iterable, *, name: Callable[[Any], str] = repr) -> Iterator:
        """fn(item) for each item, in input order, at most window(n) in flight."""
        todo = iter(items)
        pending: collections.deque = collections.deque()

        def submit() -> None:
            item = next(todo, _DONE)
            if item is not _DONE:
                pending.append(self.submit(fn, item, name=name(item)))

        for _ in range(window(self.n)):
            submit()
        while pending:
            value = result(pending.popleft())
            submit()
            yield value

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(
        self, kind: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        shut_down(self._pool)  # its threads have ended: `_in_flight` no longer changes
        if isinstance(exc, BrokenProcessPool):  # raised by whichever call noticed first: a result, a submit
            raise WorkerError(
                f"a worker process died (killed, or out of memory?) while working on {self._on()}; "
                "nothing was written. Run again; if it recurs, lower TRACEKIT_WORKERS"
            ) from None

    def _on(self) -> str:
        """What the pool was working on when a worker died: the items in flight (the pool cannot tell
        which worker held which)."""
        names = list(dict.fromkeys(self._in_flight.values()))
        if len(names) <= 1:
            return names[0] if names else "a task"
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return f"one of {shown}"


_DONE = object()


def result(future: Future) -> Any:
    """future.result(), in the main thread, which a stop signal may interrupt between any two C calls
    (tracekit.data.signals): it waits on a bare lock, and takes the future's lock only inside
    signals.held(). Future.result waits in threading.Condition's Python code, which takes and gives up
    the future's lock by C calls; the signal's handler runs just after one returns. Raised in
    Condition.__enter__ once the lock was taken, or in __exit__ before it was given up, the stop left it
    taken (the `with` statement's clean-up does not cover them): the pool's manager thread waited for it
    forever, and the pool's shut-down for the manager thread. Raised in Condition.wait once it had given
    the lock up, the `with` gave it up again: a RuntimeError."""
    done = threading.Lock()
    done.acquire()
    with signals.held():
        future.add_done_callback(lambda _future: done.release())
    done.acquire()  # a stop raised in this wait leaves nothing taken
    with signals.held():
        return future.result()


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate a pool's worker processes (the command is being stopped: their work is not wanted)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            proc.terminate()


def shut_down(pool: ProcessPoolExecutor) -> None:
    """pool.shutdown, for a pool stopped at any moment (Ctrl-C, SIGTERM, SIGHUP: errors.Terminated): the
    workers finish the item they hold and exit. Terminating them instead can hang the pool's manager
    thread (its queue's feeder waits on a pipe no one reads). A signal between the pool's first fork and
    the start of its manager thread leaves no thread to join (RuntimeError): then, and only then, the
    workers are terminated."""
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except RuntimeError:
        stop_workers(pool)
