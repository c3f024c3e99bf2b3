"""Stop signals (SIGTERM, SIGHUP: tracekit.cli turns them into Terminated) held back while a worker pool
starts. Raised while the pool forks its workers, Terminated leaves a worker forked but not yet known to
the pool: nobody stops it, and it keeps the command's pipes open forever. Inside `held()` the CLI's
handler records the signal; it is raised when the outermost `held()` block ends, the pool complete.

    with signals.held():
        pool = ProcessPoolExecutor(...); pool.submit(...)   # all workers started
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from tracekit.errors import Terminated

_DEPTH = [0]
PENDING: list[int] = []  # signals that came inside held()
STOPPED_BY: list[int] = []  # signals raised as Terminated (Typer turns it into a returned 130)


def holding() -> bool:
    return _DEPTH[0] > 0


def stop(signum: int) -> None:
    """What the handler of a stop signal does: hold it inside held(), else raise Terminated."""
    if holding():
        PENDING.append(signum)
        return
    STOPPED_BY.append(signum)
    raise Terminated(signum)


@contextlib.contextmanager
def held() -> Iterator[None]:
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        if not _DEPTH[0] and PENDING:
            signum = PENDING.pop()
            PENDING.clear()
            stop(signum)
