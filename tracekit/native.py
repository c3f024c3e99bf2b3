"""tracekit's optional C extensions and the sources they were built from.

setup.py compiles each extension with its source's hash (SOURCE_SHA, the first 16 hex digits of the
file's SHA-256) and the module keeps it. An editable install (`pip install -e .`) builds the extensions
once; after the sources move on (a pull, a merge) the old build would still load and run the old code:
misread columns from the scanner, other replays from the loops. `current` says whether a module was built
from the source beside it; where it was not, the caller runs its Python path and one warning says how to
rebuild. An installed package ships no sources: nothing to compare, the build is taken as it is.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from types import ModuleType
from typing import Optional

ROOT = Path(__file__).resolve().parent


def source_sha(path: Path) -> Optional[str]:
    """The hash setup.py builds `path` with (None: no such file)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def current(module: Optional[ModuleType], source: str) -> Optional[ModuleType]:
    """`module` where it was built from `source` (a path under tracekit/) as it is now, else None with one
    warning; None stays None."""
    if module is None:
        return None
    want = source_sha(ROOT / source)
    if want is None or getattr(module, "SOURCE_SHA", None) == want:
        return module
    warnings.warn(
        f"tracekit's C extension {module.__name__} was built from another version of tracekit/{source}: "
        "its Python path runs instead (rebuild it: `pip install -e .` or `python setup.py build_ext "
        "--inplace`)",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


__all__ = ["current", "source_sha"]
