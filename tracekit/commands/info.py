"""`tracekit info CAPTURE`: what a capture holds (manifest, ranks, devices, steps, event counts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

import typer

from tracekit.cli import app


@app.command()
def info(
    capture: str = typer.Argument(
        ..., help="A capture (.parquet or a capture folder), or a trace file / run folder; a path or a URI."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Show what a capture holds: the quick look before analysing it.

    A capture is described from its metadata and row-group statistics, reading only the few columns
    the counts need, a row group at a time (constant memory); trace files are parsed first."""
    doc = describe(capture)
    typer.echo(json.dumps(doc, indent=2, sort_keys=True) if as_json else render_text(doc))


def describe(path: Union[str, Path]) -> dict:
    """The info document of a capture, trace file or run folder: manifest, sources, per-rank trace
    metadata, devices, steps, row counts."""
    from tracekit.data.files import is_uri
    from tracekit.data.store import is_capture, read_meta
    from tracekit.data.summary import summarize
    from tracekit.parse.parser import load_capture

    where = path if is_uri(path) else Path(path)
    if is_capture(where):
        meta = read_meta(where)
        s = summarize(where, meta)
    else:
        capture = load_capture(where)
        meta, s = capture.meta, capture.summary()
    traces = []
    for t in meta.get("traces") or []:
        md = t.get("metadata") or {}
        props = md.get("deviceProperties") or []
        traces.append(
            {
                "rank": t.get("rank"),
                "source": t.get("source"),
                "time_unit": t.get("time_unit"),
                "events": t.get("events"),
                "device_names": sorted(
                    {p.get("name") for p in props if isinstance(p, dict) and p.get("name")}
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
            }
        )
    steps = [
        {"rank": r["rank"], "step": r["step"], "name": r["name"], "ms": r["dur_ns"] / 1e6}
        for r in s["step_rows"]
    ]
    return {
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


def render_text(doc: dict) -> str:
    from tracekit.parse.parser import losses_line

    lines = [f"{doc['path']}"]
    if doc["schema_version"] is not None:
        lines[0] += (
            f"  (capture schema {doc['schema_version']}, written by tracekit {doc['tracekit_version']})"
        )
    manifest = doc["manifest"]
    if manifest:
        from tracekit.render.sections import manifest_parts

        lines.append("manifest: " + ", ".join(manifest_parts(manifest)))
    else:
        lines.append("manifest: none (parsed from profiler traces, not captured by tracekit)")
    lines.append(f"sources: {len(doc['sources'])} file(s)")
    for src in doc["sources"]:
        lines.append(
            f"  {src['path']}  rank {src.get('rank')}  {src['bytes']:,} bytes  sha256 {src['sha256'][:12]}"
        )
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
            )
    lines.append("rows by kind: " + ", ".join(f"{k} {v:,}" for k, v in doc["rows_by_kind"].items()))
    lines.append("events by category: " + ", ".join(f"{k} {v:,}" for k, v in doc["events_by_cat"].items()))
    return "\n".join(lines)
