"""Renderer plug-ins (STYLE.md 4): each declares its name and file suffix and implements
`render(result, out)`. Renderers never compute figures: they format what the result holds.

    from tracekit.render import get_renderer
    get_renderer("markdown").render(report, sys.stdout)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, runtime_checkable

from tracekit.errors import TracekitError


@runtime_checkable
class Renderer(Protocol):
    name: str  # the --format / flag name: "text", "json", "markdown"
    suffix: str  # file suffix of its output: ".txt", ".json", ".md"

    def render(self, result: Any, out: TextIO) -> None:
        """Write `result` (a tracekit.model.Report) to `out`."""
        ...


@dataclass
class Section:
    """A titled table: what text and Markdown renderers both lay out (one source of rows)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    align: str = ""  # one char per column: l or r (default: first l, rest r)

    def alignment(self) -> str:
        return self.align or ("l" + "r" * (len(self.columns) - 1))


_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    _REGISTRY[cls.name] = cls
    return cls


def get_renderer(name: str, **options: Any) -> Renderer:
    """The renderer called `name` (text, json, markdown)."""
    _load()
    try:
        return _REGISTRY[name](**options)
    except KeyError:
        raise TracekitError(
            f"unknown output format {name!r}; choose one of {', '.join(sorted(_REGISTRY))}"
        ) from None


def renderers() -> dict[str, type]:
    _load()
    return dict(_REGISTRY)


def _load() -> None:
    from tracekit.render import json as _json  # noqa: F401
    from tracekit.render import markdown as _md  # noqa: F401
    from tracekit.render import text as _text  # noqa: F401
