"""`tracekit workloads [--json]`: the built-in workloads and their knobs with defaults."""

from __future__ import annotations

import json

import typer


def workloads(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in workloads and their knobs (set them with `tracekit capture --set KEY=VALUE`)."""
    from tracekit.capture.knobs import (
        COMMON_KNOBS,  # --help imports every command: benchmarks/import_costs.py
    )
    from tracekit.capture.workload import describe

    docs = describe()
    if as_json:
        typer.echo(json.dumps(docs, indent=2))
        return
    for doc in docs:
        typer.echo(f"{doc['name']}: {doc['summary']}")
        for k in doc["knobs"]:
            cpu = f" (cpu: {k['cpu_default']})" if k["cpu_default"] != k["default"] else ""
            choices = f" [{'|'.join(k['choices'])}]" if "choices" in k else ""
            typer.echo(f"  {k['name']}={k['default']}{cpu}{choices}  {k['help']}")
        typer.echo("")
    typer.echo("every workload and --script also take:")
    for k in COMMON_KNOBS:
        typer.echo(f"  {k.name}={k.default}  {k.help}")
