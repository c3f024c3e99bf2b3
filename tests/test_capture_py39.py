"""The capture package imports on Python 3.9 without tracekit's analysis dependencies (or torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.orchestrate.runner import child_env

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "pyarrow", "typer", "msgspec", "rich", "torch", "numpy")
MODULES = (
    "tracekit.capture",
    "tracekit.capture.cli",
    "tracekit.capture.recorder",
    "tracekit.capture.environment",
    "workloads.heavy_mlp",
    "workloads.dataloader_train",
    "workloads.tiny_ops",
)
CHECK = (
    "import sys, json\n"
    + "".join(f"import {m}\n" for m in MODULES)
    + f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
)


def _py39() -> Path:
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = str(Path.home() / ".pyenv")
    path = Path(root) / "versions" / "3.9.18" / "bin" / "python"
    if not path.exists():
        pytest.skip(f"no pyenv Python 3.9.18 at {path}")
    return path


def _run(python: Path | str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=child_env(), cwd="/")


def test_capture_package_imports_on_python39_without_analysis_dependencies():
    proc = _run(_py39(), "-c", CHECK)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_capture_package_imports_no_torch_here_either():
    proc = _run(sys.executable, "-c", CHECK)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_python39_lists_workloads_and_explains_missing_torch(tmp_path):
    py = _py39()
    listed = _run(py, "-m", "tracekit.capture", "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [w["name"] for w in json.loads(listed.stdout)] == ["heavy_mlp", "dataloader_train", "tiny_ops"]
    ran = _run(py, "-m", "tracekit.capture", "heavy_mlp", "--device", "cpu", "-o", str(tmp_path / "r"))
    if "torch is not importable" not in ran.stderr:
        pytest.skip(f"{py} has torch")
    assert ran.returncode == 3
    assert f"install it with `{py} -m pip install torch`" in ran.stderr
