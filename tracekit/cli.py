"""The thin CLI: flags become library calls, TracekitError becomes one line on stderr and exit code 2.

Each command body stays short; the work lives in the pipeline modules (capture, parse, analysis, diff,
render). Commands are registered on `app` below, one function each.
"""

from __future__ import annotations

import sys

import typer

from tracekit.errors import TracekitError
from tracekit.version import __version__

app = typer.Typer(
    name="tracekit",
    help="Why was the GPU idle, and what changed between two runs? "
    "Capture, parse, analyse and diff PyTorch profiler traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """tracekit: PyTorch profiler trace analysis."""


# Commands live in tracekit/commands/*.py, one module each, and register themselves on `app`.
def _register_commands() -> None:
    import importlib
    import pkgutil

    from tracekit import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"tracekit.commands.{info.name}")


def get_app() -> typer.Typer:
    """The Typer app with every command registered (what tests drive with CliRunner)."""
    _register_commands()
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point of `tracekit` and `python -m tracekit`: the one place TracekitError is caught."""
    _register_commands()
    try:
        rc = app(args=argv, standalone_mode=False)
        # Typer (0.29 here) turns Ctrl-C and typer.Exit(code) into a *returned* exit code when not standalone.
        if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            sys.exit(rc)
    except TracekitError as exc:
        typer.secho(f"tracekit: error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.secho("tracekit: interrupted", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:
        # Usage errors (bad option, missing argument) arrive here in non-standalone mode. Typer >= 0.29
        # vendors click as typer._click (no `click` module installed), older Typer uses click itself:
        # recognise them by their interface, not their class.
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
