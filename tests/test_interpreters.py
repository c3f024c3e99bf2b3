"""Resolving `--python` to an interpreter, and the message when torch is not there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import CaptureError
from tracekit.orchestrate import interpreters
from tracekit.orchestrate.runner import run_capture


def _pyenv_39() -> Path:
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        path = Path(root) / "versions" / "3.9.18" / "bin" / "python"
    except (OSError, subprocess.CalledProcessError):
        path = Path.home() / ".pyenv" / "versions" / "3.9.18" / "bin" / "python"
    if not path.exists():
        pytest.skip(f"no pyenv Python 3.9.18 at {path}")
    return path


def test_default_is_the_current_interpreter():
    interp = interpreters.resolve(None)
    assert interp.path == Path(sys.executable)
    assert interp.version == ".".join(map(str, sys.version_info[:3]))
    assert interp.run_name == f"py{sys.version_info[0]}.{sys.version_info[1]}"
    assert interp.has_torch and interp.torch_version.startswith("2.")


def test_a_path_is_taken_as_given():
    assert interpreters.resolve(sys.executable).path == Path(sys.executable)
    with pytest.raises(CaptureError, match=r"--python /no/such/python: no such file"):
        interpreters.resolve("/no/such/python")


def test_a_version_prefers_the_interpreter_with_torch():
    major_minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    # other 3.x builds without torch may be on PATH or in pyenv; this one has it and comes first
    assert interpreters.resolve(major_minor).path == Path(sys.executable)


def test_a_version_is_found_among_pyenv_installs():
    _pyenv_39()
    interp = interpreters.resolve("3.9")
    assert interp.version.startswith("3.9.") and interp.run_name == "py3.9"
    assert interpreters.resolve("3.9.18").version == "3.9.18"


def test_an_unknown_version_lists_what_was_found():
    with pytest.raises(CaptureError, match=r"--python 2\.5: no Python 2\.5 found .*found: .*3\.\d+"):
        interpreters.resolve("2.5")
    with pytest.raises(CaptureError, match=r"not a path, a command on PATH, or a version"):
        interpreters.resolve("no-such-command-xyz")


def test_an_interpreter_without_torch_gets_a_clear_message(tmp_path):
    path = _pyenv_39()
    interp = interpreters.probe(str(path))
    if interp.has_torch:
        pytest.skip(f"{path} has torch")
    hint = rf"{interp.path} has no torch; install it with `{path} -m pip install torch`"
    with pytest.raises(CaptureError, match=hint.replace(".", r"\.")):
        run_capture("heavy_mlp", tmp_path, pythons=[str(path)], device="cpu")
    with pytest.raises(CaptureError, match=r"cannot import torch \(ModuleNotFoundError"):
        interpreters.check_torch(interp)


def test_two_interpreters_with_one_run_name_are_refused(tmp_path):
    with pytest.raises(CaptureError, match=r"two interpreters give the same run name 'py3\.\d+\.\d+'"):
        run_capture("heavy_mlp", tmp_path, pythons=[None, sys.executable], device="cpu")


def test_two_builds_of_one_minor_version_are_named_by_full_version(tmp_path, monkeypatch):
    """The system's 3.12.3 beside pyenv's 3.12.1 (the GPU study's build note): py3.12.3 and py3.12.1, and a
    third interpreter of another version keeps its short name."""
    from tracekit.orchestrate import runner

    def cpython(path: str, version: str) -> interpreters.Interpreter:
        return interpreters.Interpreter(
            path=Path(path), version=version, implementation="CPython", prefix="", free_threaded=False,
            has_torch=True,
        )  # fmt: skip

    found = {
        "sys": cpython("/usr/bin/python3", "3.12.3"),
        "pyenv": cpython("/tmp/py312", "3.12.1"),
        "old": cpython("/tmp/py310", "3.10.13"),
    }
    monkeypatch.setattr(runner.interpreters, "resolve", lambda p: found[p])
    runs = runner.plan_runs("tiny_ops", tmp_path, ["sys", "pyenv", "old"], None, force=False, repeat=2)
    assert [r.name for r in runs] == [
        "py3.12.3-1",
        "py3.12.1-1",
        "py3.10-1",
        "py3.10-2",
        "py3.12.1-2",
        "py3.12.3-2",
    ]


def test_several_interpreters_get_one_run_each_named_by_version(tmp_path):
    from tracekit.orchestrate.runner import plan_runs

    _pyenv_39()
    runs = plan_runs("heavy_mlp", tmp_path, ["3.9", None], None, force=False)
    here = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    assert [r.name for r in runs] == ["py3.9", here]
    assert [r.parquet for r in runs] == [tmp_path / "heavy_mlp" / f"{n}.parquet" for n in ("py3.9", here)]
    named = plan_runs("heavy_mlp", tmp_path, ["3.9", None], "base", force=False)
    assert [r.run_dir.name for r in named] == ["base-py3.9", f"base-{here}"]
