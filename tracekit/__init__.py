"""tracekit: why was the GPU idle, and what changed between two runs?

The Python API (docs/api.md), the same one the CLI commands call:

    import tracekit as tk
    a = tk.analyze("runs/heavy_mlp/py3.11.parquet")   # or a trace file / run folder
    a.causes()                                          # pandas DataFrames: steps, causes, ranks, ...
    d = tk.diff("a.parquet", "b.parquet")
    d.figures()
    w = tk.whatif("a.parquet", set=["sync=0"])        # the step time if the syncs no longer waited
    w.devices()

Imports are lazy: `import tracekit` costs nothing until one of these is used.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from tracekit.version import __version__

_API = ("Analysis", "Comparison", "WhatIf", "analyze", "diff", "load", "memory", "whatif")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from tracekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")


class _WhatIfPackage(types.ModuleType):
    """`tk.whatif(...)` is the notebook verb (tracekit.api.whatif), and `tracekit.whatif` is also the
    package of the replay: once that package is imported, Python sets it as this package's `whatif`
    attribute. Reached through `tk.`, it is made callable, calling the API; it stays the package."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tracekit import api

        return api.whatif(*args, **kwargs)


class _Package(types.ModuleType):
    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name == "whatif" and type(value) is types.ModuleType:
            value.__class__ = _WhatIfPackage
        return value


sys.modules[__name__].__class__ = _Package
