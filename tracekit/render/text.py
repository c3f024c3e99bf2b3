"""The terminal report (rich). Width and colour are parameters so golden files can pin them."""

from __future__ import annotations

from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tracekit.render.base import Section
from tracekit.render.sections import advice_items, header, other_notes, report_sections


def make_console(out: TextIO, width: int | None, color: bool | None) -> Console:
    return Console(
        file=out,
        width=width,
        force_terminal=color,
        no_color=color is False,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
    )


def print_sections(console: Console, sections: list[Section]) -> None:
    """Each Section as a bold title, a table and its notes (indented)."""
    for sec in sections:
        console.print()
        console.print(sec.title, style="bold", markup=False)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        aligns = sec.alignment()
        for i, (col, al) in enumerate(zip(sec.columns, aligns)):
            # a narrow terminal wraps a column between words, never inside the header's words; a row's
            # name (the first column: an op, a kernel, a source line) is cut short instead, one row a line,
            # to what the other columns leave of the width
            name = i == 0 and al != "r" and len(aligns) > 1
            table.add_column(
                col,
                justify="right" if al == "r" else "left",
                overflow="ellipsis" if name else "fold",
                no_wrap=name,
                max_width=_name_width(console.width, sec) if name else None,
                min_width=max((len(w) for w in col.split()), default=1),
            )
        for row in sec.rows:
            table.add_row(*row)
        console.print(table)
        for note in sec.notes:
            console.print(Padding(Text(note), (0, 0, 0, 2), expand=False))


def _name_width(width: int, sec: Section) -> int:
    """The first column's width once the others (one space of padding each side) have theirs."""
    others = sum(
        max([len(col)] + [len(str(row[j])) for row in sec.rows if j < len(row)]) + 2
        for j, col in enumerate(sec.columns)
        if j > 0
    )
    return max(12, width - others - 8)


class TextRenderer:
    name = "text"
    suffix = ".txt"

    def __init__(self, width: int | None = None, color: bool | None = None) -> None:
        self.width = width
        self.color = color

    def render(self, result: Any, out: TextIO) -> None:
        console = make_console(out, self.width, self.color)
        for line in header(result):
            console.print(line, style="bold", markup=False)
        print_sections(console, report_sections(result))
        notes = other_notes(result)
        if notes:
            console.print()
            for n in notes:
                console.print(n, markup=False)
        adv = advice_items(result)
        if adv:
            console.print()
            console.print("advice (largest predicted saving first)", style="bold")
            for i, (msg, rows) in enumerate(adv, 1):
                console.print(Padding(Text(f"{i}. {msg}"), (0, 0, 0, 2), expand=False))
                for label, value in rows:
                    console.print(Padding(Text(f"{label}: {value}"), (0, 0, 0, 6), expand=False))
