"""The one table of renderers, keyed by the result type and the format the CLI flags name
(`--json`, `--markdown`, text by default; a `-o` file's suffix picks its format).

    from tracekit.render.registry import get_renderer
    get_renderer("markdown").render(report, sys.stdout)                  # a Report
    get_renderer("text", DiffResult, width=120).render(result, sys.stdout)

Every result's JSON is its model's `to_json()` (tracekit.render.json); text and Markdown lay out the
same Sections (tracekit.render.base). A new result type adds its rows here, a new format its class.
"""

from __future__ import annotations

from typing import Any, Optional

from tracekit.analysis.model import Report
from tracekit.compare.diff import DiffResult
from tracekit.data.describe import CaptureDescription
from tracekit.errors import TracekitError
from tracekit.render import diff as diff_renderers
from tracekit.render.base import Renderer
from tracekit.render.info import InfoMarkdownRenderer, InfoTextRenderer
from tracekit.render.json import JsonRenderer
from tracekit.render.markdown import MarkdownRenderer
from tracekit.render.text import TextRenderer
from tracekit.render.whatif import WhatIfMarkdownRenderer, WhatIfTextRenderer
from tracekit.whatif.model import WhatIfResult

RENDERERS: dict[tuple[type, str], type] = {
    (kind, cls.name): cls
    for kind, classes in (
        (Report, (TextRenderer, JsonRenderer, MarkdownRenderer)),
        (
            DiffResult,
            (
                diff_renderers.TerminalRenderer,
                JsonRenderer,
                diff_renderers.MarkdownRenderer,
                diff_renderers.PlotRenderer,
            ),
        ),
        (WhatIfResult, (WhatIfTextRenderer, JsonRenderer, WhatIfMarkdownRenderer)),
        (CaptureDescription, (InfoTextRenderer, JsonRenderer, InfoMarkdownRenderer)),
    )
    for cls in classes
}


def renderers(kind: type = Report) -> dict[str, type]:
    """The renderers of a result type, by format name."""
    return {name: cls for (k, name), cls in RENDERERS.items() if k is kind}


def get_renderer(name: str, kind: Any = Report, **options: Any) -> Renderer:
    """The renderer of format `name` (text, json, markdown; png for a diff) for results of type `kind`
    (or of `kind`'s type, given a result)."""
    kind = kind if isinstance(kind, type) else type(kind)
    cls = RENDERERS.get((kind, name))
    if cls is None:
        names = ", ".join(sorted(renderers(kind)))
        raise TracekitError(f"unknown output format {name!r}; choose one of {names}")
    return cls(**options)


def format_of_suffix(kind: type, suffix: str) -> Optional[str]:
    """The format a file named with `suffix` (".md") gets, or None when no renderer writes it."""
    found = (name for name, cls in renderers(kind).items() if getattr(cls, "suffix", None) == suffix.lower())
    return next(found, None)
