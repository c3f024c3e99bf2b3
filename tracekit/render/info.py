"""Renderers of a capture's description (`tracekit info`): text lines and Markdown. Its JSON is
`CaptureDescription.to_json()` (tracekit.render.json)."""

from __future__ import annotations

from typing import Any, Optional, TextIO

from tracekit.data.describe import CaptureDescription, losses_line
from tracekit.data.store import source_digest


class InfoTextRenderer:
    name = "text"
    suffix = ".txt"

    def __init__(self, width: Optional[int] = None, color: Optional[bool] = None) -> None:
        self.width = width  # lines are not wrapped: accepted for the shared --width
        self.color = color

    def render(self, result: CaptureDescription, out: TextIO) -> None:
        out.write(render_text(result.doc) + "\n")


class InfoMarkdownRenderer:
    name = "markdown"
    suffix = ".md"

    def render(self, result: CaptureDescription, out: TextIO) -> None:
        first, *rest = render_text(result.doc).splitlines()
        out.write(f"# {first}\n\n")
        for line in rest:
            indented = line.startswith("  ")
            out.write(f"{'  ' if indented else ''}- {line.strip()}\n")
        out.write("\n")


def render_text(doc: Any) -> str:

    lines = [f"{doc['path']}"]
    if doc["schema_version"] is not None:
        lines[0] += (
            f"  (capture schema {doc['schema_version']}, written by tracekit {doc['tracekit_version']})"
        )
    manifest = doc["manifest"]
    if manifest:
        from tracekit.render.sections import manifest_parts  # text only (benchmarks/import_costs.py)

        lines.append("manifest: " + ", ".join(manifest_parts(manifest)))
    else:
        lines.append("manifest: none (parsed from profiler traces, not captured by tracekit)")
    lines.append(f"sources: {len(doc['sources'])} file(s)")

    for src in doc["sources"]:
        recorded = source_digest(src)
        digest = f"{recorded[0]} {recorded[1][:12]}" if recorded else "no digest"
        lines.append(f"  {src['path']}  rank {src.get('rank')}  {src['bytes']:,} bytes  {digest}")
    for t in doc["traces"]:
        extra = [f"{t['events']:,} events", f"times in {t['time_unit']}"]
        if t["device_names"]:
            extra.append(", ".join(t["device_names"]))
        if t["cuda_runtime_version"]:
            extra.append(f"CUDA runtime {t['cuda_runtime_version']}")
        if t["world_size"]:
            extra.append(f"world size {t['world_size']}")
        if t["gzip_damage"]:
            extra.append(t["gzip_damage"])
        if t["salvaged_dropped_bytes"]:
            extra.append(f"salvaged: last {t['salvaged_dropped_bytes']:,} bytes dropped")
        loss = losses_line(t)
        if loss:
            extra.append(loss)
        lines.append(f"  rank {t['rank']} ({t['source']}): " + "; ".join(extra))
    lines.append("ranks: " + (", ".join(str(r) for r in doc["ranks"]) or "none"))
    devices = ", ".join(f"rank {d['rank']} device {d['device']}" for d in doc["devices"])
    lines.append("devices: " + (devices or "none (no device activity: a CPU-only capture)"))
    lines.append(f"steps: {len(doc['steps'])}")
    for rank in doc["ranks"]:
        mine = [s for s in doc["steps"] if s["rank"] == rank]
        if mine:
            ms = [s["ms"] for s in mine]
            names = f"{mine[0]['name']}" + (f" .. {mine[-1]['name']}" if len(mine) > 1 else "")
            lines.append(
                f"  rank {rank}: {len(mine)} step(s), {names}; "
                f"step time mean {sum(ms) / len(ms):.3f} ms, min {min(ms):.3f}, max {max(ms):.3f}"
                + _found_by(doc, rank)
            )
    lines.append("rows by kind: " + ", ".join(f"{k} {v:,}" for k, v in doc["rows_by_kind"].items()))
    lines.append("events by category: " + ", ".join(f"{k} {v:,}" for k, v in doc["events_by_cat"].items()))
    return "\n".join(lines)


def _found_by(doc: dict, rank: int) -> str:
    """'; found by repeated annotation 'X'' for a rank whose parse recorded how it found its steps (its
    sentence, tracekit.parse.iterations: info imports no parser)."""
    rule = next((t["step_rule"] for t in doc["traces"] if t["rank"] == rank and t.get("step_rule")), None)
    if not rule or not rule.get("says"):
        return ""
    return "; " + ("" if rule.get("rule") == "none" else "found by ") + str(rule["says"])
