"""The CLI's start-up cuts (tracekit.cli `_coerce_lazily`, `_register_commands`) change nothing a user sees:
every command line gives the same exit code, output and errors as with Typer's own coercion and every
command registered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.core

from tests.clirun import run_main

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz")

# Valid and invalid values of str, bool, list, int, float, path and choice parameters, on several commands.
ARGVS = [
    ["parse", TINY, "-o", "{tmp}/a.parquet"],
    ["parse", TINY, "-o", "{tmp}/a.parquet", "--salvage", "--force"],
    ["parse", TINY],
    ["parse", "{tmp}/missing.json", "-o", "{tmp}/b.parquet"],
    ["parse", "-o", "{tmp}/c.parquet"],
    ["info", "{tmp}/a.parquet", "--json"],
    ["info", "{tmp}/a.parquet", "--width", "abc"],
    ["info", "{tmp}/a.parquet", "--width", "10"],
    ["info", "{tmp}/a.parquet", "--width", "60"],
    ["info", "{tmp}/a.parquet", "--json", "-o", "{tmp}/info.json"],
    ["analyze", "{tmp}/a.parquet", "--no-savings", "--json"],
    ["diff", "{tmp}/a.parquet", "{tmp}/a.parquet", "--top-ops", "x"],
    ["diff", "{tmp}/a.parquet", "{tmp}/a.parquet", "--confidence", "2"],
    ["whatif", "{tmp}/a.parquet", "--set", "interpreter=0", "--json"],
    ["whatif", "{tmp}/a.parquet", "--set", "nonsense"],
    ["whatif", "{tmp}/a.parquet", "--python-speedup", "abc"],
    ["whatif", "{tmp}/a.parquet", "--loader-workers", "2", "--json"],
    ["parse", "--bogus"],
    ["--version"],
]


def _runs(argvs: list[list[str]], tmp: Path, capsys) -> list[tuple[int, str, str]]:
    out = []
    for argv in argvs:
        code, stdout, stderr = run_main([a.replace("{tmp}", str(tmp)) for a in argv], capsys)
        # A parse says how long it took, which differs from run to run.
        stdout = stdout.split(" in ")[0] if stdout.startswith("wrote ") else stdout
        out.append((code, stdout.replace(str(tmp), "TMP"), stderr.replace(str(tmp), "TMP")))
    return out


def test_typer_coercion_built_lazily_changes_nothing(tmp_path, capsys, monkeypatch):
    lazy = typer.core.build_runtime_param
    assert getattr(lazy, "_tracekit_lazy", False), "tracekit.cli did not install its lazy coercion"
    (tmp_path / "lazy").mkdir()
    (tmp_path / "typer").mkdir()
    with_lazy = _runs(ARGVS, tmp_path / "lazy", capsys)
    monkeypatch.setattr(typer.core, "build_runtime_param", lazy.typer_build)
    with_typer = _runs(ARGVS, tmp_path / "typer", capsys)
    assert with_lazy == with_typer
    assert [code for code, _, _ in with_lazy].count(0) >= 6  # the comparison covers successful runs too


@pytest.mark.parametrize("argv", [["parse", "--help"], ["parse"], ["info", "--help"], ["--help"], []])
def test_registering_one_command_changes_nothing(argv):
    """A command line naming a command registers only that command's module; what it prints, with
    every command registered first, is the same (each in a fresh process: registration is for life)."""
    outs = []
    for register_all in (False, True):
        code = (
            "import sys\n"
            + ("from tracekit.cli import get_app\nget_app()\n" if register_all else "")
            + f"sys.argv = ['tracekit', *{argv!r}]\n"
            + "from tracekit.__main__ import main\nmain()\n"
        )
        run = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        outs.append((run.returncode, run.stdout, run.stderr))
    assert outs[0] == outs[1]
    assert outs[0][1] or outs[0][2]  # it printed something to compare


def test_help_prints_each_paragraph_as_prose_not_the_docstrings_line_breaks():
    """GIVEN a command whose docstring has several paragraphs WHEN --help prints it THEN the later
    paragraphs wrap at the terminal's width like the first (Typer kept their source line breaks:
    ragged lines of a few words), and an indented example keeps its lines."""
    from tracekit.cli import reflowed

    doc = """First line
    goes on.

    Second paragraph
    goes on here.

    Example:
        tracekit parse a b
        tracekit analyze c
    """
    assert reflowed(doc) == (
        "First line goes on.\n\nSecond paragraph goes on here.\n\n"
        "Example:\n    tracekit parse a b\n    tracekit analyze c"
    )
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "parse", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=True,
    ).stdout
    assert "the others are written, each failed file is named on stderr" in out
