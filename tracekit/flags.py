"""A command's option declared once: a field of its options dataclass carries a `Flag` (its flag on the
command line, help, the type the command line gives, how a given value becomes the field's value), and
everything else reads the field: the Typer option (tracekit.commands.flags.options_from), the API
keyword (the field's name), the parsing and validation (`Flag.parse`, run by `parse_fields` in the
dataclass' __post_init__, whether the value came from the command line or from Python), the JSON and the
text description.

    @dataclass(frozen=True)
    class WhatIfOptions:
        set: Mapping[str, float] = option({}, Flag("--set", "CAUSE=FACTOR: ...", list[str], parse=causes))

        def __post_init__(self) -> None:
            parse_fields(self)

May import: nothing of tracekit but tracekit.errors (every stage declares its options with it).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from tracekit.errors import TracekitError

__all__ = ["Flag", "option", "flags_of", "parse_fields", "from_argv", "checked_regex"]


@dataclass(frozen=True)
class Flag:
    """How one option is given. `name`: its flag (`--set`). `help`: what `--help` says. `cli`: the type the
    command line gives (`list[str]` for a repeatable flag; Typer checks and converts numbers). `parse`: a
    given value (the command line's, or what a Python caller passed, already parsed or not) to the
    field's value; it validates, raising a TracekitError that names the flag. `describe(options)`: the
    option's part of the text description (None: none, or the field is shown by another's).
    `identity(value)`: whether the value changes nothing (default: it equals the field's default).
    `json`: whether `to_json` holds it. `typer`: more keywords of the Typer option (`min`, `metavar`)."""

    name: str
    help: str
    cli: Any
    parse: Optional[Callable[[Any], Any]] = None
    describe: Optional[Callable[[Any], Optional[str]]] = None
    identity: Optional[Callable[[Any], bool]] = None
    json: bool = True
    typer: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def option(default: Any = dataclasses.MISSING, flag: Optional[Flag] = None, **kwargs: Any) -> Any:
    """A dataclass field with its Flag (a mutable default, {} or [], is given as a factory)."""
    if isinstance(default, (dict, list)):
        kwargs["default_factory"] = (lambda d: lambda: type(d)(d))(default)
    elif default is not dataclasses.MISSING:
        kwargs["default"] = default
    return dataclasses.field(metadata={"flag": flag} if flag is not None else {}, **kwargs)


def flags_of(cls_or_obj: Any) -> Iterator[tuple[dataclasses.Field, Flag]]:
    """The fields that are flags, in the dataclass' order, each with its Flag."""
    for f in dataclasses.fields(cls_or_obj):
        flag = f.metadata.get("flag")
        if flag is not None:
            yield f, flag


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def parse_fields(obj: Any) -> None:
    """Each flag field of the frozen dataclass `obj` through its Flag's parse, in the fields' order (the
    first bad value is the error). A parsed value parses to itself, so `dataclasses.replace` keeps it."""
    for f, flag in flags_of(obj):
        if flag.parse is not None:
            object.__setattr__(obj, f.name, flag.parse(getattr(obj, f.name)))


def is_identity(obj: Any) -> bool:
    """Whether no flag of `obj` changes anything."""
    for f, flag in flags_of(obj):
        value = getattr(obj, f.name)
        if not (flag.identity(value) if flag.identity is not None else value == default_of(f)):
            return False
    return True


def to_json(obj: Any) -> dict:
    """The flag fields that `json` marks, by name (mappings as dicts with string keys)."""
    out = {}
    for f, flag in flags_of(obj):
        if flag.json:
            value = getattr(obj, f.name)
            out[f.name] = {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value
    return out


def describe(obj: Any) -> list[str]:
    """The parts of the text description, in the fields' order."""
    parts = []
    for _, flag in flags_of(obj):
        if flag.describe is not None:
            text = flag.describe(obj)
            if text:
                parts.append(text)
    return parts


def from_argv(cls: Any, argv: Sequence[str]) -> dict[str, Any]:
    """The keywords of `cls` that command-line words give (["--kernels", "gemm=0.5", "--pin-memory"]): a
    repeatable flag collects its values, a bool flag is True (its `--no-` form False), any other takes
    the next word, converted to its type. A word that is no flag of `cls`, or a value missing or of the
    wrong type, is a ValueError naming it."""
    by_name: dict[str, tuple[str, Flag, bool]] = {}
    for f, flag in flags_of(cls):
        yes, _, no = flag.name.partition("/")
        by_name[yes] = (f.name, flag, True)
        if no:
            by_name[no] = (f.name, flag, False)
    out: dict[str, Any] = {}
    words = iter(argv)
    for word in words:
        if word not in by_name:
            raise ValueError(word)
        name, flag, on = by_name[word]
        kind = _plain(flag.cli)
        if kind is bool:
            out[name] = on
            continue
        value = next(words, None)
        if value is None:
            raise ValueError(f"{word} (no value)")
        if kind is list:
            out.setdefault(name, []).append(value)
            continue
        try:
            out[name] = kind(value)
        except ValueError:
            raise ValueError(f"{word} {value}") from None
    return out


def _plain(cli: Any) -> Any:
    """list, bool, int, float or str: what a flag's command-line type takes (Optional[X] takes X)."""
    if typing.get_origin(cli) is list:
        return list
    args = [a for a in typing.get_args(cli) if a is not type(None)]
    return args[0] if typing.get_origin(cli) is Union and len(args) == 1 else cli


def checked_regex(pattern: str, what: str, error: type[TracekitError] = TracekitError) -> str:
    """`pattern`, when it is a regular expression; else `error`, one line: "WHAT is not a regular
    expression (why)" (`what` names the flag and the value given)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise error(f"{what} is not a regular expression ({exc})") from None
    return pattern
