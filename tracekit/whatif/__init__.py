"""What if? Replay a capture as a dependency graph and predict its step time when a cause changes,
with and without the profiler (issue 11; DESIGN.md "What if: the graph and the replay").

    from tracekit.whatif import parse_scenario, whatif
    result, _ = whatif(capture, parse_scenario(sets=["sync=0"]))

Modules: graph (nodes, edges, weights), replay (the longest-path pass, scenario weights, step times),
scenario (flags → factors), profiler (the per-event profiler cost), timeline (the replayed capture as
frames, table and Chrome trace), model (the result), predict (the pipeline), savings (each cause removed
alone: what `analyze` shows beside the idle shares), loops (the compiled loops over nodes and edges).

May import: tracekit.errors, tracekit.data, tracekit.parse, tracekit.analysis. Never a later stage
(render, export, orchestrate, api, commands).
"""

from tracekit.whatif.model import DevicePrediction, Unprofiled, WhatIfResult
from tracekit.whatif.predict import IDENTITY, Replayer, whatif
from tracekit.whatif.scenario import SCALED_CAUSES, Scenario, ScenarioError, parse_scenario

__all__ = [
    "whatif",
    "Replayer",
    "IDENTITY",
    "Scenario",
    "ScenarioError",
    "parse_scenario",
    "SCALED_CAUSES",
    "WhatIfResult",
    "DevicePrediction",
    "Unprofiled",
]
