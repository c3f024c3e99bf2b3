"""tracekit's capture layer: runs inside the *target* interpreter with only the stdlib and torch.

Python 3.9 syntax, torch imported inside functions, nothing from tracekit's analysis side (no pandas,
pyarrow, typer, msgspec, rich). `python -m tracekit.capture` is the process `tracekit capture` starts in each
interpreter; `session()` / `steps()` are the API a user's own training script marks its steps with.

May import: the stdlib, torch and tracekit.capture itself (and tracekit.version); tests/test_layout.py
checks it.
"""

from __future__ import annotations

from tracekit.capture.api import NullSession, session, steps

__all__ = ["NullSession", "session", "steps"]
