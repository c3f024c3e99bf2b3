"""Where a command's result goes: one definition of `--json`, `--markdown`, `-o/--output`, `--force` and
`--width`, the same on analyze, diff, whatif and info (tracekit.commands.flags.output_options makes the
flags). The data store and the renderers are imported when a result is written: the commands import
this module, and `tracekit --help` imports every command (benchmarks/import_costs.py).

    out = Output.of(as_json, as_markdown, path, force, width)   # checks the flags, and -o, up front
    out.emit(result)                                            # stdout, or atomically to the file

To stdout the format is text unless --json or --markdown; text is as wide as the terminal (`--width`
pins it; a renderer may set its width for pipes). To a file, the format is --json / --markdown when
given, else the file's suffix (.json, .md; anything else is text), and text is `--width` wide or the
renderer's `file_width` (100), without colour. An existing file is refused unless --force, before any
work is done.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO

from tracekit.errors import TracekitError

FILE_WIDTH = 100  # text written to a file, unless --width or the renderer's file_width


@dataclass(frozen=True)
class Output:
    fmt: Optional[str] = None  # "json" | "markdown"; None: text, or a file's suffix decides
    path: Optional[Path] = None
    force: bool = False
    width: Optional[int] = None
    inputs: tuple = ()  # what the command reads: never its own output (data.store.check_output)

    @classmethod
    def of(
        cls,
        as_json: bool = False,
        as_markdown: bool = False,
        path: Optional[Path] = None,
        force: bool = False,
        width: Optional[int] = None,
        inputs: Sequence[Any] = (),
    ) -> Output:
        """The flags as one Output; both formats at once, or an existing -o without --force, is an error."""
        from tracekit.data.store import check_output

        if as_json and as_markdown:
            raise TracekitError("--json and --markdown both given; pick one")
        fmt = "json" if as_json else "markdown" if as_markdown else None
        out = cls(fmt, path, force, width, tuple(inputs))
        if path is not None:
            check_output(path, force, out.inputs)
        return out

    def format_for(self, kind: type) -> str:
        """The format of a result of type `kind` here: the flag's, else the file's suffix, else text."""
        from tracekit.render.registry import format_of_suffix

        if self.fmt is not None or self.path is None:
            return self.fmt or "text"
        fmt = format_of_suffix(kind, self.path.suffix)
        return fmt if fmt in ("json", "markdown") else "text"

    def emit(self, result: Any, stream: Optional[TextIO] = None) -> Optional[Path]:
        """Write `result` to `stream` (default stdout), or atomically to the file; returns the file."""
        from tracekit.data.store import atomic_path, check_output
        from tracekit.render.registry import get_renderer, renderers

        fmt = self.format_for(type(result))
        if self.path is None:
            options = {"width": self.width, "color": None} if fmt == "text" else {}
            get_renderer(fmt, type(result), **options).render(result, stream or sys.stdout)
            return None
        options = {}
        if fmt == "text":
            width = self.width or getattr(renderers(type(result))["text"], "file_width", FILE_WIDTH)
            options = {"width": width, "color": False}
        check_output(self.path, self.force, self.inputs)  # again: the work took time
        # Without --force, a file that appears meanwhile is not overwritten (files.publish).
        with atomic_path(self.path, replace=self.force) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            get_renderer(fmt, type(result), **options).render(result, fh)
        return self.path
