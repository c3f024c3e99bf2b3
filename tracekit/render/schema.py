"""The report's JSON schema, `report.schema.json` (DESIGN.md "The JSON report"): its `$defs` that list
causes and host states are derived from the cause table (tracekit.analysis.causes) by
`report_schema_defs`, and a test holds the file to them (regenerated with UPDATE_GOLDEN=1). A module of
its own so that rendering JSON (`tracekit info --json`) does not import the analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.analysis.causes import CAUSES, HOST_STATES, SCALED_CAUSES

PATH = Path(__file__).with_name("report.schema.json")


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
