"""What every renderer is (docs/STYLE.md 4): it declares its name and file suffix and implements
`render(result, out)`; renderers never compute figures, they format what the result holds. The table of
renderers is `tracekit.render.registry` (this module imports none of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, runtime_checkable


@runtime_checkable
class Renderer(Protocol):
    name: str  # the --format / flag name: "text", "json", "markdown"
    suffix: str  # file suffix of its output: ".txt", ".json", ".md"

    def render(self, result: Any, out: TextIO) -> None:
        """Write `result` (a tracekit.analysis.model.Report) to `out`."""
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
