"""`ParseOptions`: how trace files become a capture, each field that is a flag of `tracekit parse`
declared once (tracekit.flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tracekit.flags import Flag, option

__all__ = ["ParseOptions"]


@dataclass(frozen=True)
class ParseOptions:
    """Where and how `tracekit.api.parse` writes a capture; the fields with a flag are `tracekit parse`'s.
    `force`: overwrite. `salvage`: keep the complete events of a cut-off trace. `folder`: a folder of one
    Parquet file per rank (None: when `output` ends with a path separator or is an existing folder, or
    when several trace files are parsed on Ray)."""

    force: bool = option(False, Flag("--force", "Overwrite the output if it exists.", bool))
    salvage: bool = option(
        False,
        Flag("--salvage", "Keep every complete event of a truncated trace instead of refusing it.", bool),
    )
    folder: Optional[bool] = None
