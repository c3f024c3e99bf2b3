"""Capture orchestration, on tracekit's side of the process boundary: finds the requested interpreters
(interpreters), starts `python -m tracekit.capture` in each with tracekit on its path, collects the traces
and manifests, then parses them and writes the TensorBoard files (runner).

The code that runs *inside* the target interpreter is `tracekit.capture` (stdlib + torch only). This
package may import every stage below it (data, parse, analysis, render, export); only commands import it.
"""
