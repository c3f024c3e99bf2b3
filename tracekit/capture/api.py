"""The tiny API a user's training script calls to mark its steps for `tracekit capture --script`.

::

    from tracekit.capture import session

    with session(samples_per_step=batch_size) as s:
        for batch in loader:
            train_step(batch)
            s.step()
            if s.done:          # the profiler schedule is complete (never true without tracekit)
                break

or, shorter, `for batch in tracekit.capture.steps(loader): train_step(batch)`.

The host time spent getting each batch is timed in every step (the loader waits the profiler hides:
tracekit.capture.loader): `steps(loader)` times every `next()`; with an explicit session loop over
`s.loader(loader)`, or wrap a fetch the script makes itself in `with s.fetch(): batch = next(it)`.

Run without tracekit (plain `python train.py`), `session()` returns a session whose `step()` does nothing
and `steps(it)` yields `it` unchanged. Under `tracekit capture --script train.py`, every call returns the
capture's one session: a few unprofiled timed steps, then the profiler schedule; `steps()` stops the loop
when the schedule is complete, and several `steps()` loops (one per epoch) continue one capture.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterable, Iterator, Optional

# Set by `python -m tracekit.capture --script` before it runs the script; taken by the first session() call,
# which keeps it in `_taken` for every later call.
_pending: Any = None
_taken: Any = None


class NullSession:
    """What `session()` gives outside tracekit: every call is a no-op."""

    done = False
    active = False
    knobs: Dict[str, Any] = {}

    def __enter__(self) -> NullSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def step(self, samples: Optional[int] = None) -> None:
        """Mark the end of a training step (no-op outside tracekit)."""

    def loader(self, iterable: Iterable[Any], source: Any = None, how: str = "loader") -> Iterator[Any]:
        """Yield from `iterable` unchanged (timed under tracekit)."""
        return iter(iterable)

    def fetch(self, source: Any = None) -> Any:
        """A context manager around one fetch (no-op outside tracekit)."""
        return contextlib.nullcontext()


def session(samples_per_step: Optional[int] = None) -> Any:
    """The capture session when running under `tracekit capture --script`, else a no-op `NullSession`.

    Use it as a context manager and call `.step()` once per training step; `.done` turns true when the
    profiler schedule is complete; `.knobs` holds the `--set key=value` settings (as text for keys that are
    not tracekit's own). Every call in one capture returns the same session (reading `.knobs` first and
    looping over `steps()` afterwards is one capture).
    """
    global _pending, _taken
    sess, _pending = _pending, None
    if sess is None:
        sess = _taken
    if sess is None:
        return NullSession()
    if samples_per_step is not None:
        sess.config.samples_per_step = samples_per_step
    _taken = sess
    return sess


def steps(iterable: Iterable[Any], samples_per_step: Optional[int] = None) -> Iterator[Any]:
    """Yield from `iterable`, timing each fetch and marking a step after each item; under tracekit, stop
    when the capture is done. The session stays open when `iterable` ends, so a loop over `steps()` per
    epoch continues the same capture (tracekit closes it when the script returns)."""
    sess = session(samples_per_step)
    if sess.done:
        return
    if sess.active and not sess.entered:
        sess.__enter__()
    for item in sess.loader(iterable, how="steps"):
        yield item
        sess.step()
        if sess.done:
            return
