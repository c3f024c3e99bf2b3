"""Module-level functions for the Ray tests: a Ray worker imports them by name (`tests.ray_tasks`, found
through the driver's working directory, the repository root, which Ray puts on its workers' path)."""

from __future__ import annotations

import os
import time


def slow_negate(x: int) -> int:
    """-x, after a pause that makes later items finish before earlier ones."""
    time.sleep(0.002 * ((7 - x) % 8))
    return -x


def worker_pid(_: object) -> int:
    return os.getpid()
