"""tracekit: why was the GPU idle, and what changed between two runs?

The Python API (docs/api.md), the same one the CLI commands call:

    import tracekit as tk
    a = tk.analyze("runs/heavy_mlp/py3.11.parquet")   # or a trace file / run folder
    a.causes()                                          # pandas DataFrames: steps, causes, ranks, ...
    d = tk.diff("a.parquet", "b.parquet")
    d.figures()

Imports are lazy: `import tracekit` costs nothing until one of these is used.
"""

from __future__ import annotations

from typing import Any

from tracekit.version import __version__

__all__ = ["Analysis", "Comparison", "analyze", "diff", "load", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Analysis", "Comparison", "analyze", "diff", "load"):
        from tracekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
