"""One exception hierarchy. The CLI catches `TracekitError` in one place and prints its message.

Every message names the bad value, the valid options and the next step, e.g.
"out.parquet exists; pass --force to overwrite".
"""

from __future__ import annotations

from typing import Optional


class TracekitError(Exception):
    """A problem with the user's input or environment: shown as one line, exit code 2."""

    exit_code = 2


class InputNotFound(TracekitError):
    """A path the user named does not exist or holds no trace."""


class TraceFormatError(TracekitError):
    """The file is not a readable PyTorch profiler (Chrome-trace) JSON file."""

    rank: Optional[int] = None  # the file's rank, when known (named in a job's failed-file message)


class TruncatedTraceError(TraceFormatError):
    """The JSON ends before its last event (a profiler killed mid-write); `--salvage` keeps the rest."""


class CaptureFileError(TracekitError):
    """A Parquet file that is not a tracekit capture, or of a schema version this tracekit cannot read."""


class OutputExistsError(TracekitError):
    """The output path exists and --force was not given."""


class OutputWriteError(TracekitError):
    """The output could not be written (the disk is full, a file-size limit, a read-only file system);
    nothing half-written is left behind."""


class CaptureError(TracekitError):
    """Running a workload under the profiler failed (interpreter without torch, workload crash...)."""


class NotComparableError(TracekitError):
    """Captures that cannot be compared at all (e.g. no steps in common)."""


class WorkerError(TracekitError):
    """A worker process died (killed, out of memory): a parse's decode worker or a job's per-rank task
    (tracekit.data.pool names what it was working on), or the workers' engine is unavailable."""


class ClusterError(TracekitError):
    """Ray is missing, a Ray cluster cannot be reached, or one of its tasks died (`--ray`)."""


class Terminated(KeyboardInterrupt):
    """A stop signal, Ctrl-C's SIGINT, SIGTERM or SIGHUP (tracekit.data.signals): a KeyboardInterrupt, so
    that Ctrl-C's clean-up runs for all three (temporary files removed, worker pools shut down); the exit
    status is 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class TraceWarning(UserWarning):
    """A trace parsed, but some of it was skipped (events without a usable time, values nested too
    deep, ...): the CLI shows it as one line on stderr; the counts are in the capture's trace entries."""
