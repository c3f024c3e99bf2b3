"""What several commands share: the output flags and how a result is written (`output_options`, `emit`),
the `--ray` option and where per-rank work runs (`ray_option`, `executor`), and a command's options
object made from its flags (`OptionsFrom`, `with_options`: one Typer option per field that declares a
tracekit.flags.Flag).

Imports no command module and not tracekit.cli (the commands import this; the CLI imports the commands).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer

from tracekit.flags import default_of, flags_of
from tracekit.render.output import Output

RAY_HELP = (
    "Run the per-rank work as Ray tasks. Alone: a local Ray on this machine's cores; "
    "'--ray auto', '--ray HOST:PORT' or '--ray ray://HOST:PORT': join that running cluster "
    "(pip install 'tracekit\\[ray]')."
)


def ray_option(help: str = RAY_HELP):
    """The `--ray [ADDRESS]` option of the commands that run per-rank work (tracekit.cli turns a bare
    `--ray` into `--ray=local`: Typer's options cannot take an optional value)."""
    return typer.Option(None, "--ray", metavar="[ADDRESS]", help=help)


def output_options(force_help: str = "Overwrite --output if it exists.") -> Callable[[Callable], Callable]:
    """The output flags every command that prints a result shares: `--json`, `--markdown`, `-o/--output`,
    `--force`, `--width` (tracekit.render.output.Output says what they do). The decorated command takes
    `out: Output` in their place; `emit(out, result)` writes the result."""
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


class OptionsFrom:
    """The default of a command's parameter that takes an options object (`opts: WhatIfOptions =
    OptionsFrom(WhatIfOptions)`): `with_options` puts the object's flags in its place; with field
    names (`OptionsFrom(AnalyzeOptions, "step")`) only those fields' flags, the others left at their
    defaults."""

    def __init__(self, cls: type, *names: str) -> None:
        self.cls = cls
        self.names = names


def with_options(fn: Callable) -> Callable:
    """Each parameter of `fn` whose default is OptionsFrom(cls) becomes, in its place, one Typer option per
    flag field of `cls` (its flag, help and command-line type: tracekit.flags.Flag); the command is
    called with `cls(**those values)`, whose own parsing validates them."""
    hints = typing.get_type_hints(fn)
    params, made = [], {}
    for p in inspect.signature(fn).parameters.values():
        if not isinstance(p.default, OptionsFrom):
            params.append(p.replace(annotation=hints[p.name]))
            continue
        cls, names = p.default.cls, p.default.names
        fields = [(f, flag) for f, flag in flags_of(cls) if not names or f.name in names]
        made[p.name] = (cls, [f.name for f, _ in fields])
        for f, flag in fields:
            default = [] if typing.get_origin(flag.cli) is list else default_of(f)
            option = typer.Option(default, flag.name, help=flag.help, **flag.typer)
            params.append(inspect.Parameter(f.name, p.kind, default=option, annotation=flag.cli))

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        for name, (cls, names) in made.items():
            kwargs[name] = cls(**{n: kwargs.pop(n) for n in names})
        return fn(*args, **kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


# The parameters that name what a command reads: its output is never one of them (Output.inputs).
_INPUT_PARAMETERS = ("inputs", "captures", "capture", "logdir")


def _inputs_of(kwargs: dict) -> list:
    """The input paths among a command's arguments ("A1,A2" sides of diff split)."""
    from tracekit.data.files import split_joined  # pyarrow: --help imports no command's dependencies

    found: list = []
    for name in _INPUT_PARAMETERS:
        value = kwargs.get(name)
        for item in value if isinstance(value, (list, tuple)) else [value] if value is not None else []:
            found += split_joined(str(item))
    return found


def emit(out: Output, result: Any) -> None:
    """Write a command's result where `out` says; a file written is named on stderr."""
    written = out.emit(result)
    if written is not None:
        typer.echo(f"wrote {written}", err=True)


@contextlib.contextmanager
def executor(ray: Optional[str]) -> Iterator:
    """Where a command's per-rank work runs: worker processes here, or Ray (`--ray`); closed after."""
    from tracekit.scale.executor import get_executor  # not for `info` (benchmarks/import_costs.py)

    ex = get_executor(ray)
    try:
        yield ex
    finally:
        close = getattr(ex, "close", None)
        if close is not None:
            close()
