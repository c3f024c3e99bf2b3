"""CLI commands, one short module each: parse the flags, call the API or a stage, hand the result to a
renderer. Each module imports `app` from tracekit.cli and registers on it.

May import: every stage. Nothing imports a command module except tracekit.cli.
"""
