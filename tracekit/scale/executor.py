"""Where per-rank work runs: an `Executor` maps a module-level function over items, results in input
order. `LocalExecutor` is the pool of forked processes on this machine (tracekit.data.pool);
`get_executor("…")` returns the Ray executor (tracekit.scale.ray_backend) for `--ray`.

    ex = get_executor(None)                       # LocalExecutor: one process per core
    for summary in ex.map(tasks.parse_rank_task, jobs): ...

`fn` and the items must pickle (Ray ships them to other machines); `fn` must be a module-level
function. Results should be small: they all come back to the driver.
"""

from __future__ import annotations

import importlib.util
from typing import Callable, Iterable, Iterator, Optional, Protocol

from tracekit.data import pool
from tracekit.errors import TracekitError


class Executor(Protocol):
    """Runs a job's per-rank tasks. An executor may also say how many tasks it runs at once, as an
    int attribute `workers`: the driver then sizes the tasks (how many ranks each analyses, whether a
    job's files are decoded a file per task); without it, it assumes one."""

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        """fn(item) for each item, in input order (computed in any order, anywhere)."""
        ...


class LocalExecutor:
    """The pool of `workers` forked processes on this machine (tracekit.data.pool; default:
    TRACEKIT_WORKERS, else one per CPU of the process' affinity); with one worker, or one item, `map`
    runs in this process. A task that names what it works on (a `what` attribute: its rank, its files)
    is named in the error of a worker that dies."""

    def __init__(self, workers: Optional[int] = None) -> None:
        self.workers = max(1, workers if workers is not None else pool.workers())

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        return pool.forked_map(fn, items, self.workers, name=_what)


def on_this_machine(executor: Optional[Executor]) -> bool:
    """Whether `executor` runs its tasks on this machine (None: the default, this machine's pool)."""
    return executor is None or isinstance(executor, LocalExecutor)


def _what(item: object) -> str:
    return str(getattr(item, "what", None) or "a task")


def get_executor(ray: Optional[str] = None) -> Executor:
    """LocalExecutor without `ray`; else the Ray executor for `ray` ("" or "local": start Ray on this
    machine; "auto" or an address: join that cluster)."""
    if ray is None:
        return LocalExecutor()
    if importlib.util.find_spec("tracekit.scale.ray_backend") is None:
        raise TracekitError("--ray is not available in this tracekit build (no tracekit.scale.ray_backend)")
    from tracekit.scale.ray_backend import RayExecutor

    return RayExecutor(ray)
