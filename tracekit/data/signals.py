"""Stop signals while tracekit runs a command: Ctrl-C (SIGINT), SIGTERM and SIGHUP.

`install()` (tracekit/__main__.py, before the CLI is imported; cli.main for a caller that runs it in
process) gives each of them whose handler is Python's default a handler that raises `Terminated(N)`, a
KeyboardInterrupt: the clean-up of Ctrl-C runs for all three (temporary files removed, worker pools shut
down), and the command ends with one line and exit 128 + N (`ended_by`). Not Python's own SIGINT
handler, because:

- a KeyboardInterrupt raised where Python cannot propagate it (a weakref callback, a `__del__`, a GC
  callback, a fork hook) is printed as "Exception ignored" and lost: the parse went on and exited 0.
  Every stop is recorded (STOPPED_BY); one that is lost is raised again 1 ms later, outside the
  callback (`_unraisable`), `check()` raises it before any output is committed (data/files.py), and
  the CLI after the command;
- CPython 3.11 ends the process by SIGINT (exit -2) once a KeyboardInterrupt of exactly that class
  left code run by exec() or eval() of a string (dataclasses and namedtuple build methods so), even if
  tracekit then caught it (`run_eval_code_obj` in Python/pythonrun.c sets the flag Py_RunMain reads;
  3.14 sets it only for one that nobody caught). Terminated is a subclass, which does not set it.

Held back while a worker pool starts: raised while the pool forks its workers, Terminated leaves a
worker forked but not yet known to the pool: nobody stops it, and it keeps the command's pipes open
forever. Inside `held()` a stop is recorded (PENDING) and raised when the outermost `held()` block ends,
the pool complete:

    with signals.held():
        pool = ProcessPoolExecutor(...); pool.submit(...)   # all workers started

Held back too while the main thread takes a lock that another thread takes (a pool's future's:
tracekit.data.pool.result says why).

Inside a fork's hooks (logging's, multiprocessing's) it is recorded and raised 1 ms after the fork
returns. A forked worker gets the default handlers back (its parent stops it). Once the command's exit
status is decided (`settle()`), a stop signal is ignored: it can no longer stop anything, and raised
in the CLI's last lines it was a traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator

from tracekit.errors import Terminated

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
REDELIVER_S = 0.001

_DEPTH = [0]
PENDING: list[int] = []  # stops that came inside held()
STOPPED_BY: list[int] = []  # stops raised as Terminated (Typer turns one into a returned 130)
_SETTLED = [False]
_PROCESS = [False]
_FORKING: list[bool] = []
_DEFERRED: list[int] = []  # stops that came inside a fork's hooks, or were lost in a callback
_SAVED: dict[Any, Any] = {}  # what install() replaced: handlers by signal, "unraisablehook", "alarm"


def _default(sig: int) -> Any:
    return signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL


def install(*, process: bool = False) -> bool:
    """Handle the stop signals whose handler is Python's default (in the main thread only). Returns
    whether this call installed them: its caller then owns them and calls `restore()`. `process`: the
    process is tracekit's (the `tracekit` script), and it exits once the command has ended."""
    if threading.current_thread() is not threading.main_thread() or _SAVED:
        return False
    _PROCESS[0] = process
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is _default(sig):
            _SAVED[sig] = signal.signal(sig, _handler)
    if not _SAVED:
        return False
    _SAVED["unraisablehook"] = sys.unraisablehook
    sys.unraisablehook = _unraisable
    return True


def restore() -> None:
    """Put back what install() replaced and forget every recorded stop (in-process callers)."""
    if "alarm" in _SAVED:  # a timer of ours may still be armed
        signal.setitimer(signal.ITIMER_REAL, 0)
    for key, old in list(_SAVED.items()):
        if key == "unraisablehook":
            sys.unraisablehook = old
        elif key == "alarm":
            signal.signal(signal.SIGALRM, old)
        else:
            signal.signal(key, old)
    _SAVED.clear()
    for state in (PENDING, STOPPED_BY, _DEFERRED, _FORKING):
        state.clear()
    _SETTLED[0] = _PROCESS[0] = False


def _handler(signum: int, frame: Any) -> None:
    if _SETTLED[0]:
        return
    if _FORKING:
        _DEFERRED.append(signum)
        return
    stop(signum)


def stop(signum: int) -> None:
    """What the handler of a stop signal does: hold it inside held(), else raise Terminated."""
    if holding():
        PENDING.append(signum)
        return
    STOPPED_BY.append(signum)
    raise Terminated(signum)


def check() -> None:
    """Raise a stop that was recorded but did not stop the command (lost in a callback): called before
    an output is committed, and by the CLI after the command."""
    if not holding() and recorded() is not None:
        stop(STOPPED_BY[-1])


def recorded() -> int | None:
    """The last stop signal recorded while the command runs, if any (whether it stopped it or not)."""
    return STOPPED_BY[-1] if STOPPED_BY and not _SETTLED[0] else None


def taken() -> None:
    """A stop the command took as its normal end (`tracekit view`: Ctrl-C stops the server)."""
    STOPPED_BY.clear()


def settle() -> None:
    """The command's exit status is decided: stop signals are ignored from now on. In the `tracekit`
    script they are set to SIG_IGN, which Python's finalization keeps (it puts SIG_DFL back for a
    handler of its own: one stop signal while the interpreter shut down killed the process, exit -N,
    after a complete output)."""
    _SETTLED[0] = True
    if _PROCESS[0] and threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is _handler:
                signal.signal(sig, signal.SIG_IGN)


def ended_by(exc: BaseException) -> tuple[str, int]:
    """The CLI's last line and exit status for a stop (Terminated, or any KeyboardInterrupt)."""
    signum = getattr(exc, "signum", signal.SIGINT)
    if signum == signal.SIGINT:
        return "tracekit: interrupted", 130
    return f"tracekit: stopped by {signal.Signals(signum).name}", 128 + signum


def holding() -> bool:
    return _DEPTH[0] > 0


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


def _redeliver(signum: int) -> None:
    """Raise the stop `signum` again REDELIVER_S from now, from a timer: by then the callback or fork
    hook it landed in has returned."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return  # check() raises it before the next output, and the CLI after the command
    _DEFERRED.append(signum)
    old = signal.signal(signal.SIGALRM, _again)
    _SAVED.setdefault("alarm", old)
    signal.setitimer(signal.ITIMER_REAL, REDELIVER_S)


def _again(_signum: int, _frame: Any) -> None:
    if _DEFERRED and not _SETTLED[0]:
        signum = _DEFERRED.pop()
        _DEFERRED.clear()
        stop(signum)


def _unraisable(unraisable: Any) -> None:
    """sys.unraisablehook: a Terminated raised in a callback is not printed ("Exception ignored") but
    raised again from a timer; anything else goes to the hook this one replaced."""
    exc = unraisable.exc_value
    if isinstance(exc, Terminated) and _SAVED and not _SETTLED[0]:
        _redeliver(exc.signum)
        return
    _SAVED.get("unraisablehook", sys.__unraisablehook__)(unraisable)


def _forking() -> None:
    _FORKING.append(True)


def _forked() -> None:
    # A stop that came while a worker was forked: raised inside the fork hooks, Terminated would be
    # printed as "Exception ignored" and lost. It was recorded; it is raised once they have returned.
    _FORKING.clear()
    if _DEFERRED:
        _redeliver(_DEFERRED.pop())


def _in_child() -> None:
    """In a forked worker: the default handlers back. Its parent stops it; it must not outlive a parent
    whose clean-up could not run, nor turn its own stop into an exception."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is _handler:
            signal.signal(sig, _default(sig))
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _SAVED.get("unraisablehook", sys.__unraisablehook__)
    _SAVED.clear()
    for state in (PENDING, STOPPED_BY, _DEFERRED, _FORKING):
        state.clear()
    _SETTLED[0] = _PROCESS[0] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_forking, after_in_parent=_forked, after_in_child=_in_child)
