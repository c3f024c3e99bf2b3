"""`python -m tracekit` and the `tracekit` script. Only the stdlib is imported before the CLI module, so
a Ctrl-C while typer and the commands are still importing ends with one line, not a traceback."""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["parse"]:
        # NumPy's OpenBLAS starts a thread per core when numpy is imported, each spinning a while for
        # work: ~40 ms of CPU of a tiny `tracekit parse` (benchmarks/RESULTS.md), which does no linear
        # algebra (its decode workers are processes). Not for the other commands: `capture` runs the
        # user's workload with this environment.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from tracekit.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("tracekit: interrupted\n")
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
