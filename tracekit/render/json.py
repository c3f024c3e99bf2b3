"""The JSON of every result: its model's own `to_json()` (a Report: the contract of DESIGN.md "The JSON
report"; a DiffResult, a WhatIfResult, a capture's description), one object, non-finite floats as null.
The report's JSON schema is `report.schema.json` (tracekit.render.schema)."""

from __future__ import annotations

import json
import math
from typing import Any, TextIO


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


class JsonRenderer:
    name = "json"
    suffix = ".json"

    def __init__(self, indent: int | None = 2) -> None:
        self.indent = indent

    def render(self, result: Any, out: TextIO) -> None:
        json.dump(_finite(result.to_json()), out, indent=self.indent, allow_nan=False, default=str)
        out.write("\n")
