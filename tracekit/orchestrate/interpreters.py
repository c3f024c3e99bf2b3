"""Find the Python interpreters `tracekit capture --python` names, and check that torch is there.

`--python` takes a path (`/opt/py/bin/python3`, `.venv/bin/python`), a command on PATH (`python3.12`), or
a version (`3.9`, `3.11.7`, `3.13t` for a free-threaded build) looked up among PATH, pyenv
(`$(pyenv root)/versions/*`), conda environments and uv-managed installs. Among several matches the first
one with torch wins (the interpreter running tracekit first, then PATH order, pyenv, conda, uv).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tracekit.errors import CaptureError

_VERSION_RE = re.compile(r"^(?:py(?:thon)?)?(\d+)(?:\.(\d+))?(?:\.(\d+))?(t?)$")
_PROBE = (
    "import importlib.util, json, platform, sys, sysconfig; "
    "print(json.dumps({'version': platform.python_version(), "
    "'implementation': platform.python_implementation(), 'executable': sys.executable, "
    "'prefix': sys.prefix, 'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
    "'torch': importlib.util.find_spec('torch') is not None}))\n"
    "try:\n    from importlib.metadata import version; print(version('torch'))\n"
    "except Exception:\n    print('')"
)
_PROBE_TIMEOUT_S = 20


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter tracekit can start a capture in."""

    path: Path
    version: str  # "3.11.7"
    implementation: str  # "CPython", "PyPy"
    prefix: str
    free_threaded: bool
    has_torch: bool  # torch is installed (found on its path); importing it is checked by check_torch
    torch_version: str = ""  # from the package metadata, without importing torch

    @property
    def run_name(self) -> str:
        """`py3.11`, `py3.13t` (free-threaded), `pypy3.10`: the default run folder name."""
        major_minor = ".".join(self.version.split(".")[:2])
        stem = "pypy" if self.implementation == "PyPy" else "py"
        return f"{stem}{major_minor}{'t' if self.free_threaded else ''}"

    def describe(self) -> str:
        return f"{self.implementation} {self.version} at {self.path}"


@cache
def probe(path: str) -> Interpreter | None:
    """Ask an interpreter what it is (a subprocess); None when it does not run."""
    try:
        proc = subprocess.run(
            [path, "-c", _PROBE], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        lines = proc.stdout.splitlines()
        doc = json.loads(lines[0])
        torch_version = lines[1].strip() if len(lines) > 1 else ""
    except (ValueError, IndexError):
        return None
    return Interpreter(
        path=Path(path),
        version=doc["version"],
        implementation=doc["implementation"],
        prefix=doc["prefix"],
        free_threaded=doc["free_threaded"],
        has_torch=doc["torch"],
        torch_version=torch_version,
    )


def current() -> Interpreter:
    """The interpreter running tracekit."""
    found = probe(sys.executable)
    if found is None:
        raise CaptureError(f"cannot run this interpreter ({sys.executable}) as a subprocess")
    return found


def _pyenv_root() -> Path | None:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    exe = shutil.which("pyenv")
    if exe:
        try:
            out = subprocess.run([exe, "root"], capture_output=True, text=True, timeout=10, check=False)
            if out.returncode == 0 and out.stdout.strip():
                return Path(out.stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    default = Path.home() / ".pyenv"
    return default if default.is_dir() else None


def _conda_envs() -> list[Path]:
    roots: list[Path] = []
    exe = shutil.which("conda")
    if exe:
        try:
            out = subprocess.run(
                [exe, "info", "--envs", "--json"], capture_output=True, text=True, timeout=30, check=False
            )
            roots += [Path(p) for p in json.loads(out.stdout).get("envs", [])]
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    for env_var in ("CONDA_PREFIX",):
        if os.environ.get(env_var):
            roots.append(Path(os.environ[env_var]))
    for base in ("miniconda3", "anaconda3", "miniforge3", "mambaforge"):
        root = Path.home() / base
        if root.is_dir():
            roots.append(root)
            roots += sorted(p for p in (root / "envs").glob("*") if p.is_dir())
    return roots


def _uv_pythons() -> list[Path]:
    dirs = []
    if os.environ.get("UV_PYTHON_INSTALL_DIR"):
        dirs.append(Path(os.environ["UV_PYTHON_INSTALL_DIR"]))
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    dirs.append(Path(data) / "uv" / "python")
    found = []
    for d in dirs:
        for install in sorted(d.glob("*")) if d.is_dir() else []:
            exe = install / "bin" / "python3"
            if exe.exists():
                found.append(exe)
    return found


def candidates() -> list[Path]:
    """Interpreters to consider for a version: this one, PATH, pyenv versions, conda envs, uv installs."""
    pyenv = _pyenv_root()
    shims = str(pyenv / "shims") if pyenv else None
    paths: list[Path] = [Path(sys.executable)]  # the interpreter running tracekit first
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or d == shims or not os.path.isdir(d):
            continue  # pyenv shims fail for versions that are not activated: use versions/* instead
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if re.fullmatch(r"python3(\.\d+t?)?", name):
                paths.append(Path(d) / name)
    if pyenv:
        paths += [p / "bin" / "python" for p in sorted((pyenv / "versions").glob("*"))]
    paths += [env / "bin" / "python" for env in _conda_envs()]
    paths += _uv_pythons()
    seen: set[str] = set()
    out = []
    for p in paths:
        key = str(p)
        if key not in seen and p.exists() and os.access(p, os.X_OK):
            seen.add(key)
            out.append(p)
    return out


def _matches(interp: Interpreter, want: tuple[str, ...], free_threaded: bool) -> bool:
    have = interp.version.split(".")
    return have[: len(want)] == list(want) and interp.free_threaded == free_threaded


def resolve(spec: str | None) -> Interpreter:
    """The interpreter `--python SPEC` names (None: the current one). Raises CaptureError when none fits."""
    if spec is None or spec == "":
        return current()
    m = _VERSION_RE.match(spec)
    looks_like_path = os.sep in spec or spec.startswith(".")
    if looks_like_path or (m is None and shutil.which(spec)):
        path = spec if looks_like_path else shutil.which(spec)
        if path is None or not Path(path).exists():
            raise CaptureError(
                f"--python {spec}: no such file; give a path, a command, or a version like 3.11"
            )
        found = probe(str(path))
        if found is None:
            raise CaptureError(f"--python {spec}: {path} does not run as a Python interpreter")
        return found
    if m is None:
        raise CaptureError(
            f"--python {spec}: not a path, a command on PATH, or a version; try e.g. --python 3.11 "
            "or --python /usr/bin/python3.11"
        )
    want = tuple(x for x in m.group(1, 2, 3) if x)
    free = bool(m.group(4))
    matches: list[Interpreter] = []
    seen_prefix: set[tuple[str, str]] = set()
    for candidate in candidates():
        found = probe(str(candidate))
        if found is None or not _matches(found, want, free):
            continue
        key = (found.prefix, found.version)
        if key in seen_prefix:
            continue
        seen_prefix.add(key)
        matches.append(found)
    if not matches:
        known = sorted({f"{i.version}" for i in map(probe, map(str, candidates())) if i is not None})
        raise CaptureError(
            f"--python {spec}: no Python {spec} found on PATH, in pyenv, conda or uv installs "
            f"(found: {', '.join(known) or 'none'}); install one (e.g. `pyenv install {spec}`) "
            "or pass its path"
        )
    with_torch = [i for i in matches if i.has_torch]
    return (with_torch or matches)[0]


def _install_hint(interp: Interpreter) -> str:
    return (
        f"install it with `{interp.path} -m pip install torch` (CPU-only: add "
        "--index-url https://download.pytorch.org/whl/cpu), or pick another interpreter with --python"
    )


def require_torch(interp: Interpreter) -> None:
    """Fail early, without importing it, when torch is not installed in `interp`."""
    if not interp.has_torch:
        raise CaptureError(f"{interp.describe()} has no torch; {_install_hint(interp)}")


def check_torch(interp: Interpreter) -> str:
    """Import torch in `interp` (seconds) and return its version; a CaptureError says how to install it."""
    code = "import torch, sys; sys.stdout.write(torch.__version__)"
    try:
        proc = subprocess.run(
            [str(interp.path), "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CaptureError(f"cannot run {interp.describe()}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise CaptureError(f"{interp.describe()} cannot import torch ({last}); {_install_hint(interp)}")
    return proc.stdout.strip()
