"""The CLI as users run it: every command documented in the README, both entry points, clean errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.clirun import run_main
from tracekit.cli import get_app

ROOT = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    app = get_app()
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`tracekit (\w+)", readme))
    missing = [c for c in _commands() if c not in documented]
    assert not missing, f"commands not in README.md: {missing}"
    assert "make demo" in readme and "make test" in readme


def test_every_command_has_help():
    runner = CliRunner()
    for name in _commands():
        result = runner.invoke(get_app(), [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage" in result.output


def test_both_entry_points_run_as_subprocesses():
    exe = Path(sys.executable).with_name("tracekit")
    for cmd in ([str(exe), "--version"], [sys.executable, "-m", "tracekit", "--version"]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("tracekit ")


def test_user_mistake_is_one_line_not_a_traceback(tmp_path, capsys):
    missing = tmp_path / "nope.pt.trace.json"
    code, _, err = run_main(["analyze", str(missing)], capsys)
    assert code == 2
    assert "Traceback" not in err
    assert str(missing) in err and len(err.strip().splitlines()) == 1


def test_unknown_option_is_a_usage_error(capsys):
    code, _, err = run_main(["analyze", "--no-such-option", "x"], capsys)
    assert code == 2
    assert "No such option" in err
