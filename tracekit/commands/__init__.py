"""CLI commands, one short module each: parse the flags, call the API or a stage, hand the result to a
renderer. `COMMANDS` is the table of them; tracekit.cli reads it, imports a command's module when the
command line names it (every module for `--help`) and registers the module's function of the command's
name on its Typer app.

May import: every stage, and `tracekit.commands.flags` (the flags several commands share). Nothing here
imports tracekit.cli: the CLI depends on the commands, never the reverse.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple


class Command(NamedTuple):
    """A row of the table: the module that defines the command's function (named as the command), and
    the Typer settings of its command (`context_settings`)."""

    name: str
    module: str
    settings: Mapping[str, Any] = {}


# `tracekit capture WORKLOAD -o OUT -- SCRIPT_ARGS`: options may come after the workload.
_INTERSPERSED = {"allow_interspersed_args": True}

# In the order `tracekit --help` lists them.
COMMANDS = {
    c.name: c
    for c in (
        Command("analyze", "tracekit.commands.analyze"),
        Command("annotate", "tracekit.commands.annotate"),
        Command("capture", "tracekit.commands.capture", {"context_settings": _INTERSPERSED}),
        Command("demo", "tracekit.commands.demo"),
        Command("diff", "tracekit.commands.diff"),
        Command("info", "tracekit.commands.info"),
        Command("memory", "tracekit.commands.memory"),
        Command("parse", "tracekit.commands.parse"),
        Command("tb", "tracekit.commands.tb"),
        Command("view", "tracekit.commands.view"),
        Command("whatif", "tracekit.commands.whatif"),
        Command("workloads", "tracekit.commands.workloads"),
    )
}
