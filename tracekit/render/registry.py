"""The one table of renderers, keyed by the result type and the format the CLI flags name
(`--json`, `--markdown`, text by default; a `-o` file's suffix picks its format).

    from tracekit.render.registry import get_renderer
    get_renderer("markdown").render(report, sys.stdout)                  # a Report
    get_renderer("text", DiffResult, width=120).render(result, sys.stdout)

Every result's JSON is its model's `to_json()` (tracekit.render.json); text and Markdown lay out the
same Sections (tracekit.render.base). A new result type adds its rows here, a new format its class.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from tracekit.errors import TracekitError
from tracekit.render.base import Renderer

# Result type (its module and name) -> its renderers ("module:class"), imported only when asked for: the
# what-if and diff renderers import their models' packages (pandas), which `tracekit info` and
# `analyze` must not pay for at start-up (benchmarks/RESULTS.md, "info, analyze, whatif").
_JSON = "tracekit.render.json:JsonRenderer"
_TABLE: dict[str, tuple[str, ...]] = {
    "tracekit.analysis.model.Report": (
        "tracekit.render.text:TextRenderer",
        _JSON,
        "tracekit.render.markdown:MarkdownRenderer",
    ),
    "tracekit.compare.diff.DiffResult": (
        "tracekit.render.diff:TerminalRenderer",
        _JSON,
        "tracekit.render.diff:MarkdownRenderer",
        "tracekit.render.diff:PlotRenderer",
    ),
    "tracekit.whatif.model.WhatIfResult": (
        "tracekit.render.whatif:WhatIfTextRenderer",
        _JSON,
        "tracekit.render.whatif:WhatIfMarkdownRenderer",
    ),
    "tracekit.whatif.memory.MemoryResult": (
        "tracekit.render.memory_result:MemoryTextRenderer",
        _JSON,
        "tracekit.render.memory_result:MemoryMarkdownRenderer",
    ),
    "tracekit.data.describe.CaptureDescription": (
        "tracekit.render.info:InfoTextRenderer",
        _JSON,
        "tracekit.render.info:InfoMarkdownRenderer",
    ),
}


def _class(where: str) -> Any:
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


def renderers(kind: Optional[type] = None) -> dict[str, Any]:
    """The renderers of a result type (default: the analysis Report), by format name."""
    key = "tracekit.analysis.model.Report" if kind is None else f"{kind.__module__}.{kind.__qualname__}"
    classes = [_class(where) for where in _TABLE.get(key, ())]
    return {cls.name: cls for cls in classes}


def get_renderer(name: str, kind: Any = None, **options: Any) -> Renderer:
    """The renderer of format `name` (text, json, markdown; png for a diff) for results of type `kind`
    (or of `kind`'s type, given a result)."""
    kind = kind if kind is None or isinstance(kind, type) else type(kind)
    cls = renderers(kind).get(name)
    if cls is None:
        names = ", ".join(sorted(renderers(kind)))
        raise TracekitError(f"unknown output format {name!r}; choose one of {names}")
    return cls(**options)


def format_of_suffix(kind: type, suffix: str) -> Optional[str]:
    """The format a file named with `suffix` (".md") gets, or None when no renderer writes it."""
    found = (name for name, cls in renderers(kind).items() if getattr(cls, "suffix", None) == suffix.lower())
    return next(found, None)
