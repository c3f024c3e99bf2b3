"""The thin CLI: flags become library calls, TracekitError becomes one line on stderr and exit code 2.

Each command body stays short; the work lives in the pipeline modules (capture, parse, analysis, diff,
render). The commands are the rows of tracekit.commands.COMMANDS, registered on `app` below.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import typing
import warnings
from typing import Any, Callable, Optional

import typer

from tracekit.commands import COMMANDS
from tracekit.data import signals
from tracekit.errors import TracekitError, TraceWarning
from tracekit.settings import check_settings
from tracekit.version import __version__


def _coerce_lazily() -> None:
    """Typer >= 0.29 coerces each parameter's value through a pydantic TypeAdapter, built on its first
    value: importing pydantic and building the adapters was a large part of every command's start-up
    (benchmarks/RESULTS.md, "Issue 36"). A value that already is what a plain `str`
    or `bool` parameter (or a list of `str`) takes, as the command line gives it, comes out of that
    adapter unchanged (`_parse_cli_str` and `_parse_cli_bool` return it, pydantic's lax str/bool accept
    it), so it is passed on as it is, and the adapter is built (pydantic imported) for the first value
    that is anything else: numbers, paths, choices, a parameter with a parser, or a bytes value go
    through Typer's own coercion, with its error messages. A parameter of any type left at its default
    None (`-o`, `--width` of every command that prints) is answered as Typer answers None, before any
    adapter, so that `tracekit info CAPTURE` builds none. Typer before 0.29 (click's types, no
    pydantic) has no `typer.core.build_runtime_param` and is left alone."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover - a Typer without the module
        return
    build = getattr(core, "build_runtime_param", None)
    if build is None or getattr(build, "_tracekit_lazy", False):
        return

    def lazy(descriptor: Any) -> Any:
        return _PassThrough(descriptor, _plain_kind(descriptor), build)

    lazy._tracekit_lazy = True  # type: ignore[attr-defined]
    lazy.typer_build = build  # type: ignore[attr-defined]  # Typer's own (tests compare the two)
    core.build_runtime_param = lazy


def _plain_kind(descriptor: Any) -> Optional[type]:
    """str or bool for a parameter of that type (or list of str) that Typer's adapter passes unchanged."""
    info = getattr(descriptor, "parameter_info", None)
    if getattr(descriptor, "file_annotation", None) is not None or getattr(info, "parser", None) is not None:
        return None
    annotation = getattr(descriptor, "annotation", None)
    if annotation in (str, bool):
        return annotation
    if typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,):
        return list
    return None


class _PassThrough:
    """A parameter's coercion that passes None and a plain value on (`kind`: str, bool or list; None: no
    value is plain) and builds Typer's own for any other."""

    def __init__(self, descriptor: Any, kind: Optional[type], build: Callable[[Any], Any]) -> None:
        self._descriptor, self._kind, self._build = descriptor, kind, build
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as Typer's RuntimeParam.coerce answers it, before any adapter
            return () if param.multiple or param.nargs == -1 else None
        if self._kind is list:
            if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
                return list(value)
        elif self._kind is not None and type(value) is self._kind:
            return value
        if self._typer is None:
            self._typer = self._build(self._descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)


_coerce_lazily()

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


def _register_commands(argv: Optional[list[str]] = None) -> None:
    """Register the commands of the table (tracekit.commands.COMMANDS) on `app`. Given the command line,
    only the command it names first (`tracekit parse ...`), when there is one: the other modules cost a
    command's start-up (their imports, and Typer reading every command's signature: benchmarks/RESULTS.md,
    "Issue 36"), and a command's own parsing, errors and --help never look at its siblings. Anything else
    (`--help`, `--version`, a misspelt command, no argument) registers them all, in the table's order."""
    names = [argv[0]] if argv and argv[0] in COMMANDS else list(COMMANDS)
    for name in names:
        if name in _registered:
            continue
        row = COMMANDS[name]
        fn = getattr(importlib.import_module(row.module), name)
        app.command(name, help=reflowed(fn.__doc__) if fn.__doc__ else None, **row.settings)(fn)
        _registered.add(name)
    # Help lists the commands in registration order: the table's, whichever was registered first.
    order = list(COMMANDS)
    app.registered_commands.sort(key=lambda c: order.index(c.name) if c.name in order else len(order))


_registered: set[str] = set()


def reflowed(doc: str) -> str:
    """A command's docstring as its --help shows it: each paragraph one line, which the terminal wraps
    (Typer 0.29 joins the first paragraph's lines but prints the others' line breaks where the source
    has them, between its own: ragged text). Paragraphs with indented lines (examples) keep theirs."""
    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines = para.split("\n")
        keep = any(line.startswith(" ") for line in lines[1:])
        out.append(para if keep else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def get_app() -> typer.Typer:
    """The Typer app with every command registered (what tests drive with CliRunner)."""
    _register_commands()
    return app


def _optional_values(argv: list[str]) -> list[str]:
    """`--ray` takes an optional value, which Typer's options cannot: a bare `--ray` becomes
    `--ray=local`, and `--ray X` becomes `--ray=X` only when X is a Ray address (local, auto,
    HOST:PORT, ray://...) and no file of that name exists, so `--ray run/` still reads run/ as input."""
    if "--ray" not in argv:
        return list(argv)  # the Ray module (it imports logging, socket) is for the commands that name it
    from tracekit.scale.ray_backend import looks_like_address

    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg == "--ray":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and looks_like_address(nxt) and not os.path.exists(nxt):
                out.append(f"--ray={nxt}")
                i += 2
                continue
            arg = "--ray=local"
        out.append(arg)
        i += 1
    return out


def _encodable_streams() -> None:
    """stdout/stderr in an encoding that cannot write 'µ' or '−' (PYTHONIOENCODING=ascii, a C locale):
    such characters are replaced rather than ending the command with UnicodeEncodeError. In UTF-8, a
    file name that is not UTF-8 (its bytes decoded as surrogates) is written back as its own bytes."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            errors = "surrogateescape" if encoding == "utf8" else "backslashreplace"
            with contextlib.suppress(ValueError, OSError, TypeError):
                stream.reconfigure(errors=errors)


def main(argv: list[str] | None = None) -> None:
    """Entry point of `tracekit` and `python -m tracekit`: the one place TracekitError is caught, and
    where a TraceWarning (what a parse skipped) becomes one line on stderr."""
    installed = signals.install()  # tracekit/__main__.py has done it already for the `tracekit` script
    try:
        _encodable_streams()
        with warnings.catch_warnings():
            warnings.simplefilter("always", TraceWarning)
            shown = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None) -> None:
                if issubclass(category, TraceWarning):
                    typer.secho(f"tracekit: warning: {message}", err=True, fg=typer.colors.YELLOW)
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        if installed:
            signals.restore()


def _run(argv: list[str]) -> None:
    try:
        code = _command(argv)
    except BaseException as exc:
        signals.settle()  # decided: a stop signal from now on would only be a traceback here
        code = _failed(exc)
    else:
        signals.settle()
    if code:
        sys.exit(code)


def _command(argv: list[str]) -> int:
    """Run the command; its exit status (a stop or an error raises)."""
    argv = _optional_values(argv)
    check_settings()  # an environment variable that cannot be read: one line, before any work
    _register_commands(argv)
    rc = app(args=argv, standalone_mode=False)
    # Typer (0.29 here) turns Ctrl-C and typer.Exit(code) into a *returned* exit code when not standalone.
    signals.check()  # a stop that was lost in a callback, or that Typer turned into 130
    if rc == 130:
        raise KeyboardInterrupt
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0


def _failed(exc: BaseException) -> int:
    """One line on stderr for how the command ended, and its exit status; re-raises what is a bug."""
    if isinstance(exc, TracekitError):
        typer.secho(f"tracekit: error: {exc}", err=True, fg=typer.colors.RED)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, SIGTERM, SIGHUP (errors.Terminated)
        line, code = signals.ended_by(exc)
        typer.secho(line, err=True)
        return code
    if isinstance(exc, BrokenPipeError):  # `tracekit analyze ... | head`: the reader left; no traceback
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, typer.Abort):
        return 1
    # Usage errors (bad option, missing argument) arrive here in non-standalone mode. Typer >= 0.29
    # vendors click as typer._click (no `click` module installed), older Typer uses click itself:
    # recognise them by their interface, not their class.
    show, usage_code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
    if isinstance(exc, Exception) and callable(show) and isinstance(usage_code, int):
        show()
        return usage_code
    raise exc
