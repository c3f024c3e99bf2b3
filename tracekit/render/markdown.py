"""The report as GitHub-flavoured Markdown (tables), e.g. for a pull request or an issue."""

from __future__ import annotations

from typing import Any, TextIO

from tracekit.render.base import Section
from tracekit.render.sections import advice_items, header, other_notes, report_sections


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def write_header(out: TextIO, lines: list[str]) -> None:
    """The first line as the level-1 heading, the others as paragraphs."""
    out.write(f"# {lines[0]}\n\n")
    for line in lines[1:]:
        out.write(f"{line}\n\n")


def write_sections(out: TextIO, sections: list[Section]) -> None:
    """Each Section as a level-2 heading, a table and its notes as paragraphs."""
    for sec in sections:
        out.write(f"## {sec.title}\n\n")
        out.write("| " + " | ".join(_cell(c) for c in sec.columns) + " |\n")
        out.write("|" + "|".join("---:" if a == "r" else "---" for a in sec.alignment()) + "|\n")
        for row in sec.rows:
            out.write("| " + " | ".join(_cell(c) for c in row) + " |\n")
        out.write("\n")
        for note in sec.notes:
            out.write(f"{note}\n\n")


class MarkdownRenderer:
    name = "markdown"
    suffix = ".md"

    def render(self, result: Any, out: TextIO) -> None:
        write_header(out, header(result))
        write_sections(out, report_sections(result))
        for n in other_notes(result):
            out.write(f"{n}\n\n")
        adv = advice_items(result)
        if adv:
            out.write("## advice (largest predicted saving first)\n\n")
            for i, (msg, rows) in enumerate(adv, 1):
                out.write(f"{i}. {msg}\n")
                for label, value in rows:
                    text = f"`{value}`" if label in ("knob", "predict") and "`" not in value else value
                    out.write(f"   - {label}: {text}\n")
            out.write("\n")
