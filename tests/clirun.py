"""Run the CLI in-process through `main()`, the one place errors become messages and exit codes."""

from __future__ import annotations

from tracekit.cli import main


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `tracekit ARGV`."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
