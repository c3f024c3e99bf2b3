"""`python -m tracekit` and the `tracekit` script. Only the stdlib is imported before the CLI module, so
a Ctrl-C while typer and the commands are still importing ends with one line, not a traceback."""

import sys


def main() -> None:
    try:
        from tracekit.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("tracekit: interrupted\n")
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
