"""The one table of report renderers, by the name the CLI flags use.

from tracekit.render.registry import get_renderer
get_renderer("markdown").render(report, sys.stdout)
"""

from __future__ import annotations

from typing import Any

from tracekit.errors import TracekitError
from tracekit.render.base import Renderer
from tracekit.render.json import JsonRenderer
from tracekit.render.markdown import MarkdownRenderer
from tracekit.render.text import TextRenderer

RENDERERS: dict[str, type] = {r.name: r for r in (TextRenderer, JsonRenderer, MarkdownRenderer)}


def get_renderer(name: str, **options: Any) -> Renderer:
    """The renderer called `name` (text, json, markdown)."""
    try:
        return RENDERERS[name](**options)
    except KeyError:
        raise TracekitError(
            f"unknown output format {name!r}; choose one of {', '.join(sorted(RENDERERS))}"
        ) from None


def renderers() -> dict[str, type]:
    return dict(RENDERERS)
