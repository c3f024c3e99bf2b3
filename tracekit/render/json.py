"""The JSON of every result: its model's own `to_json()` (a Report: the contract of DESIGN.md "The JSON
report"; a DiffResult, a WhatIfResult, a capture's description), one object, non-finite floats as null.

The report's JSON schema (`report.schema.json`) names the causes and host states in its `$defs`, which
`report_schema_defs` derives from the cause table (a test holds the file to it)."""

from __future__ import annotations

import json
import math
from typing import Any, TextIO

from tracekit.analysis.causes import CAUSES, HOST_STATES, SCALED_CAUSES


def _by_name(names: tuple[str, ...], value: dict) -> dict:
    return {
        "type": "object",
        "properties": {n: dict(value) for n in names},
        "required": list(names),
        "additionalProperties": False,
    }


def report_schema_defs() -> dict[str, Any]:
    """The `$defs` of the report's JSON schema that list causes or host states (tracekit.analysis.causes)."""
    ms, ns = {"type": "number", "minimum": 0}, {"type": "integer", "minimum": 0}
    return {
        "cause": {"enum": list(CAUSES)},
        "gap_slice": {"enum": [*HOST_STATES, "queued"]},
        "ms_by_cause": _by_name(CAUSES, ms),
        "ns_by_cause": _by_name(CAUSES, ns),
        "ns_list_by_cause": _by_name(CAUSES, {"type": "array", "items": {"type": "integer"}}),
        "saving_ms_by_cause": _by_name(SCALED_CAUSES, {"type": "number"}),
        "ms_by_state": _by_name(HOST_STATES, ms),
        "ns_by_state": _by_name(HOST_STATES, ns),
    }


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
