"""Renderers: text (rich terminal), json (the DESIGN.md contract) and markdown for analysis reports
(`registry` is the table by name; `sections` the tables text and markdown share), and `diff` for diff
results. They format what a result model holds and compute nothing.

May import: tracekit.errors, tracekit.analysis.model, tracekit.compare (the diff result objects).
Never export, orchestrate or commands.
"""
