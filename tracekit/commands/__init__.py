"""CLI commands, one module each. Each module imports `app` from tracekit.cli and registers on it."""
