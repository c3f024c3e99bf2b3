"""The thin CLI: flags become library calls, TracekitError becomes one line on stderr and exit code 2.

Each command body stays short; the work lives in the pipeline modules (capture, parse, analysis, diff,
render). Commands are registered on `app` below, one function each.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import typing
import warnings
from typing import Any, Callable, Iterator, Optional

import typer

from tracekit.data import signals
from tracekit.errors import TracekitError, TraceWarning
from tracekit.settings import check_settings
from tracekit.version import __version__


def _coerce_lazily() -> None:
    """Typer >= 0.29 coerces each parameter's value through a pydantic TypeAdapter, built on its first
    value: importing pydantic and building the adapters was ~0.1 CPU-s of every command's start-up (a
    fifth of a tiny `tracekit parse`, benchmarks/RESULTS.md). A value that already is what a plain `str`
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


# Commands live in tracekit/commands/*.py, one module each named as its command, and register
# themselves on `app`.
def _register_commands(argv: Optional[list[str]] = None) -> None:
    """Import the command modules. Given the command line, only the module of the command it names
    first (`tracekit parse ...`), when there is one: the other ten cost a command's start-up ~25 ms
    (their imports, and Typer reading every command's signature), and a command's own parsing, errors
    and --help never look at its siblings. Anything else (`--help`, `--version`, a misspelt command,
    no argument) registers them all."""
    import importlib
    import pkgutil

    from tracekit import commands

    names = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))
    if argv and argv[0] in names:
        names = [argv[0]]
    for name in names:
        importlib.import_module(f"tracekit.commands.{name}")
    # Help lists the commands in registration order: the modules' order, whichever was imported first.
    order = {f"tracekit.commands.{name}": i for i, name in enumerate(names)}
    app.registered_commands.sort(key=lambda c: order.get(getattr(c.callback, "__module__", ""), len(order)))
    for c in app.registered_commands:
        if c.help is None and c.callback is not None and c.callback.__doc__:
            c.help = reflowed(c.callback.__doc__)


def reflowed(doc: str) -> str:
    """A command's docstring as its --help shows it: each paragraph one line, which the terminal wraps
    (Typer 0.29 joins the first paragraph's lines but prints the others' line breaks where the source
    has them, between its own: ragged text). Paragraphs with indented lines (examples) keep theirs."""
    import inspect

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


RAY_HELP = (
    "Run the per-rank work as Ray tasks. Alone: a local Ray on this machine's cores; "
    "'--ray auto', '--ray HOST:PORT' or '--ray ray://HOST:PORT': join that running cluster "
    "(pip install 'tracekit\\[ray]')."
)


def ray_option(help: str = RAY_HELP):
    """The `--ray [ADDRESS]` option of the commands that run per-rank work (see `_optional_values`)."""
    return typer.Option(None, "--ray", metavar="[ADDRESS]", help=help)


def output_options(force_help: str = "Overwrite --output if it exists.") -> Callable[[Callable], Callable]:
    """The output flags every command that prints a result shares: `--json`, `--markdown`, `-o/--output`,
    `--force`, `--width` (tracekit.render.output.Output says what they do). The decorated command takes
    `out: Output` in their place; `emit(out, result)` writes the result."""
    from pathlib import Path

    from tracekit.render.output import Output

    flags = [
        ("as_json", bool, typer.Option(False, "--json", help="Print the result as JSON (docs/DESIGN.md).")),
        ("as_markdown", bool, typer.Option(False, "--markdown", help="Print the result as Markdown.")),
        (
            "output",
            Optional[Path],
            typer.Option(
                None,
                "-o",
                "--output",
                help="Write the result to this file; its format follows its suffix (.txt .json .md) "
                "unless --json or --markdown.",
            ),
        ),
        ("force", bool, typer.Option(False, "--force", help=force_help)),
        (
            "width",
            Optional[int],
            typer.Option(None, "--width", min=40, help="Width of the text output (default: the terminal's)."),
        ),
    ]

    def decorate(fn: Callable) -> Callable:
        hints = typing.get_type_hints(fn)
        params = [p.replace(annotation=hints[p.name]) for p in inspect.signature(fn).parameters.values()]
        params = [p for p in params if p.name != "out"]
        params += [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=t) for n, t, d in flags
        ]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = [kwargs.pop(name) for name, _, _ in flags]
            out = Output.of(*given, inputs=_inputs_of(kwargs))  # type: ignore[misc]  # given: the flags, in order
            return fn(*args, out=out, **kwargs)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


# The parameters that name what a command reads: its output is never one of them (Output.inputs).
_INPUT_PARAMETERS = ("inputs", "captures", "capture", "logdir")


def _inputs_of(kwargs: dict) -> list:
    """The input paths among a command's arguments ("A1,A2" sides of diff split)."""
    from tracekit.data.files import split_joined

    found: list = []
    for name in _INPUT_PARAMETERS:
        value = kwargs.get(name)
        for item in value if isinstance(value, (list, tuple)) else [value] if value is not None else []:
            found += split_joined(str(item))
    return found


def emit(out: Any, result: Any) -> None:
    """Write a command's result where `out` (an Output) says; a file written is named on stderr."""
    written = out.emit(result)
    if written is not None:
        typer.echo(f"wrote {written}", err=True)


@contextlib.contextmanager
def executor(ray: Optional[str]) -> Iterator:
    """Where a command's per-rank work runs: worker processes here, or Ray (`--ray`); closed after."""
    from tracekit.scale.executor import get_executor

    ex = get_executor(ray)
    try:
        yield ex
    finally:
        close = getattr(ex, "close", None)
        if close is not None:
            close()


def _optional_values(argv: list[str]) -> list[str]:
    """`--ray` takes an optional value, which Typer's options cannot: a bare `--ray` becomes
    `--ray=local`, and `--ray X` becomes `--ray=X` only when X is a Ray address (local, auto,
    HOST:PORT, ray://...) and no file of that name exists, so `--ray run/` still reads run/ as input."""
    if "--ray" not in argv:
        return list(argv)  # the Ray module (logging, socket: ~10 ms) is for the commands that name it
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
