"""`python -m tracekit` and the `tracekit` script. The stop signals get tracekit's handlers first
(tracekit.data.signals: the stdlib and tracekit.errors), before typer and the commands are imported, so
that Ctrl-C, SIGTERM or SIGHUP while tracekit starts ends with one line, not a traceback or the signal's
default action. Before this module runs (Python's start-up, importing the tracekit package) Python's own
behaviour holds: docs/QUIRKS.md, the fault table."""

import os
import sys


def settle_process(command: str) -> None:
    """The process settings of `tracekit COMMAND`, made before numpy is imported (benchmarks that run a
    command's code in process call it too, so that they measure what the command runs)."""
    if command in ("parse", "info"):
        # NumPy's OpenBLAS starts a thread per core when numpy is imported, each spinning a while for
        # work: CPU a tiny `tracekit parse` pays (benchmarks/RESULTS.md), which does no linear algebra
        # (its decode workers are processes), nor does `info`. Not for the commands that run the
        # user's code.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    settle_process(sys.argv[1] if len(sys.argv) > 1 else "")
    try:
        from tracekit.data import signals

        signals.install(process=True)
        from tracekit.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt as exc:  # before cli.main took over (it ends every command itself)
        from tracekit.data import signals

        signals.settle()
        line, code = signals.ended_by(exc)
        sys.stderr.write(line + "\n")
        sys.exit(code)


if __name__ == "__main__":
    main()
