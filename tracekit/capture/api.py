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

Run without tracekit (plain `python train.py`), `session()` returns a session whose `step()` does nothing
and `steps(it)` yields `it` unchanged. Under `tracekit capture --script train.py`, the first call returns the
capture's session: a few unprofiled timed steps, then the profiler schedule; `steps()` stops the loop when
the schedule is complete.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Optional

# Set by `python -m tracekit.capture --script` before it runs the script; taken by the first session() call.
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


def session(samples_per_step: Optional[int] = None) -> Any:
    """The capture session when running under `tracekit capture --script`, else a no-op `NullSession`.

    Use it as a context manager and call `.step()` once per training step; `.done` turns true when the
    profiler schedule is complete; `.knobs` holds the `--set key=value` settings (as text for keys that are
    not tracekit's own).
    """
    global _pending, _taken
    sess, _pending = _pending, None
    if sess is None:
        return NullSession()
    if samples_per_step is not None:
        sess.config.samples_per_step = samples_per_step
    _taken = sess
    return sess


def steps(iterable: Iterable[Any], samples_per_step: Optional[int] = None) -> Iterator[Any]:
    """Yield from `iterable`, marking a step after each item; under tracekit, stop when capture is done."""
    with session(samples_per_step) as sess:
        for item in iterable:
            yield item
            sess.step()
            if sess.done:
                return
