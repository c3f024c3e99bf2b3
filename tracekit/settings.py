"""tracekit's environment variables, one table: each setting's name, how its value is read, and what it
does. A value that cannot be read is an error naming the variable and what it takes (one line, exit 2),
never silently ignored (`TRACEKIT_WORKERS=abc` used to mean "one per CPU"); the CLI checks every one
before a command runs. An empty value is the same as none.

    workers = setting("TRACEKIT_WORKERS")     # None: the default (one per CPU)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tracekit.errors import TracekitError


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError("a whole number, 1 or more")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError("a number of seconds above 0")
    return value


def _one_of(*choices: str) -> Callable[[str], str]:
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(" or ".join(choices))
        return text

    return read


@dataclass(frozen=True)
class Setting:
    name: str
    read: Callable[[str], Any]  # the value from its text; ValueError saying what it takes
    help: str  # what it does, and its default


SETTINGS = {
    s.name: s
    for s in (
        Setting(
            "TRACEKIT_WORKERS",
            _positive_int,
            "the worker processes that decode and analyse (default: one per CPU this process may run on)",
        ),
        Setting(
            "TRACEKIT_DECODER",
            _one_of("c", "msgspec"),
            "the trace decoder (default: c, the C scanner, where it built)",
        ),
        Setting(
            "TRACEKIT_LOOPS",
            _one_of("c", "python"),
            "the replay's loops (default: c, the C extension, where it built; python: their Python "
            "definitions)",
        ),
        Setting(
            "TRACEKIT_RAY_CONNECT_TIMEOUT_S",
            _positive_float,
            "how long to wait for a Ray cluster to answer (default: 30 s)",
        ),
    )
}


def setting(name: str) -> Optional[Any]:
    """The value of setting `name` from the environment, None when unset (or empty)."""
    setting = SETTINGS[name]
    text = os.environ.get(name, "")
    if not text:
        return None
    try:
        return setting.read(text)
    except ValueError as exc:
        raise TracekitError(
            f"{name}={text!r} is not {exc}: it sets {setting.help}; fix it, or unset it"
        ) from None


def check_settings() -> None:
    """Every setting read once: a value that cannot be read fails here, before any work."""
    for name in SETTINGS:
        setting(name)
