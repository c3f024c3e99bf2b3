"""tracekit: why was the GPU idle, and what changed between two runs?

The Python API (docs/api.md), the same one the CLI commands call:

    import tracekit as tk
    a = tk.analyze("runs/heavy_mlp/py3.11.parquet")   # or a trace file / run folder
    a.causes()                                          # pandas DataFrames: steps, causes, ranks, ...
    d = tk.diff("a.parquet", "b.parquet")
    d.figures()
    w = tk.whatif("a.parquet", sets=["sync=0"])       # the step time if the syncs no longer waited
    w.devices()

Imports are lazy: `import tracekit` costs nothing until one of these is used.
"""

from __future__ import annotations

from typing import Any

from tracekit.version import __version__

_API = ("Analysis", "Comparison", "WhatIf", "analyze", "diff", "load", "whatif")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from tracekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
