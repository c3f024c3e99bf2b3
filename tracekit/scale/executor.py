"""Where per-rank work runs: an `Executor` maps a module-level function over items, results in input
order. `LocalExecutor` is a pool of forked processes on this machine; `get_executor("…")` returns the
Ray executor (tracekit.scale.ray_backend) for `--ray`.

    ex = get_executor(None)                       # LocalExecutor: one process per core
    for summary in ex.map(tasks.parse_rank_task, jobs): ...

`fn` and the items must pickle (Ray ships them to other machines); `fn` must be a module-level
function. Results should be small: they all come back to the driver.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator, Optional, Protocol

from tracekit.data import signals
from tracekit.errors import TracekitError, WorkerError


class Executor(Protocol):
    """Runs a job's per-rank tasks. An executor may also say how many tasks it runs at once, as an
    int attribute `workers`: the driver then sizes the tasks (how many ranks each analyses, whether a
    job's files are decoded a file per task); without it, it assumes one."""

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        """fn(item) for each item, in input order (computed in any order, anywhere)."""
        ...


class LocalExecutor:
    """A pool of `workers` forked processes (default: TRACEKIT_WORKERS, else one per CPU of the
    process' affinity: parse.parser.workers); with one worker, or one item, `map` runs in this
    process. At most a few tasks per worker are in flight, so results wait in the driver only until it
    takes them: the driver's memory follows the result size, not the job's."""

    def __init__(self, workers: Optional[int] = None) -> None:
        from tracekit.parse.parser import workers as default_workers

        self.workers = max(1, workers if workers is not None else default_workers())

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        from tracekit.parse.parser import shut_down

        items = list(items)
        n = min(self.workers, len(items))
        if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            for item in items:
                yield fn(item)
            return
        # fork: workers start with the driver's modules imported (pandas, pyarrow: ~0.5 s each to
        # import), and items need not be importable by path. The driver holds little when it forks.
        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
        try:
            todo = iter(items)
            with signals.held():  # the pool forks its workers at the first submit
                pending: collections.deque = collections.deque(
                    pool.submit(fn, item) for item in itertools.islice(todo, 4 * n)
                )
            while pending:
                result = pending.popleft().result()
                item = next(todo, _DONE)
                if item is not _DONE:
                    pending.append(pool.submit(fn, item))
                yield result
        except BrokenProcessPool:
            raise WorkerError(
                "a worker process died (killed, or out of memory?); nothing was written. "
                "Run again; if it recurs, lower TRACEKIT_WORKERS"
            ) from None
        finally:
            shut_down(pool)


_DONE = object()


def get_executor(ray: Optional[str] = None) -> Executor:
    """LocalExecutor without `ray`; else the Ray executor for `ray` ("" or "local": start Ray on this
    machine; "auto" or an address: join that cluster)."""
    if ray is None:
        return LocalExecutor()
    if importlib.util.find_spec("tracekit.scale.ray_backend") is None:
        raise TracekitError("--ray is not available in this tracekit build (no tracekit.scale.ray_backend)")
    from tracekit.scale.ray_backend import RayExecutor

    return RayExecutor(ray)
