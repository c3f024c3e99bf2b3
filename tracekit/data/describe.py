"""What a capture holds (`tracekit info`): its manifest, sources, per-rank trace metadata, devices, steps
and row counts, as one document. Read from the capture's metadata and its step rows; nothing analysed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from tracekit.data.schema import device_properties

__all__ = ["CaptureDescription", "describe", "losses_line"]


@dataclass(frozen=True)
class CaptureDescription:
    """The info document of one capture (`to_json()`: what `tracekit info --json` prints, keys sorted)."""

    doc: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return _sorted(self.doc)


def _sorted(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _sorted(x[k]) for k in sorted(x, key=str)}
    if isinstance(x, (list, tuple)):
        return [_sorted(v) for v in x]
    return x


def describe(meta: Mapping[str, Any], s: Any, path: Any) -> CaptureDescription:
    """The info document of the capture at `path` from its metadata document and its summary (a
    tracekit.data.summary Summary: `summarize` of a capture on disk, or `Capture.summary()`): manifest,
    sources, per-rank trace metadata, devices, steps, row counts."""
    traces = []
    for t in meta.get("traces") or []:
        md = t.get("metadata") or {}
        props = device_properties(md)
        traces.append(
            {
                "rank": t.get("rank"),
                "source": t.get("source"),
                "time_unit": t.get("time_unit"),
                "events": t.get("events"),
                "device_names": sorted(
                    {str(p["name"]) for p in props if isinstance(p, dict) and p.get("name")}
                ),
                "world_size": (md.get("distributedInfo") or {}).get("world_size")
                if isinstance(md.get("distributedInfo"), dict)
                else None,
                "cuda_runtime_version": md.get("cuda_runtime_version"),
                "cuda_driver_version": md.get("cuda_driver_version"),
                "cupti_version": md.get("cupti_version"),
                "salvaged_dropped_bytes": t.get("salvaged_dropped_bytes"),
                "gzip_damage": t.get("gzip_damage"),
                "skipped_events": t.get("skipped_events") or {},
                "dropped_values": t.get("dropped_values") or {},
                # how the parser found the rank's steps (tracekit.parse.iterations; absent before it did)
                "step_rule": t.get("step_rule"),
            }
        )
    steps = [
        {"rank": r["rank"], "step": r["step"], "name": r["name"], "ms": r["dur_ns"] / 1e6}
        for r in s["step_rows"]
    ]
    return CaptureDescription(
        {
            "path": str(path),
            "schema_version": meta.get("schema_version"),
            "tracekit_version": meta.get("tracekit_version"),
            "manifest": meta.get("manifest"),
            "sources": meta.get("sources") or [],
            "traces": traces,
            "ranks": s["ranks"],
            "devices": s["devices"],
            "steps": steps,
            "rows_by_kind": s["rows_by_kind"],
            "events_by_cat": s["events_by_cat"],
        }
    )


def losses_line(trace: dict) -> Optional[str]:
    """What a trace entry says was skipped or dropped, in one phrase ("skipped 2 events: 1 ts not a
    number, 1 ts out of range"), or None when nothing was."""
    parts = []
    for key, verb, noun in (("skipped_events", "skipped", "event"), ("dropped_values", "dropped", "value")):
        counts = trace.get(key) or {}
        total = sum(counts.values())
        if total:
            reasons = ", ".join(f"{n:,} {why}" for why, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            parts.append(f"{verb} {total:,} {noun}{'s' * (total != 1)}: {reasons}")
    return "; ".join(parts) or None
