"""What if? Replay a capture as a dependency graph and predict its step time when a cause changes,
with and without the profiler (issue 11; DESIGN.md "What if: the graph and the replay").

    from tracekit.whatif.predict import whatif
    from tracekit.whatif.scenario import WhatIfOptions
    result, _ = whatif(capture, WhatIfOptions(set=["sync=0"]))

Modules: graph (nodes, edges, weights), replay (the longest-path pass, scenario weights, step times),
scenario (`WhatIfOptions`: each flag of `tracekit whatif`, declared once), profiler (the per-event
profiler cost), timeline (the replayed capture as frames, table and Chrome trace), model (the result),
predict (the pipeline, `Replayer`), savings (each cause removed alone: what `analyze` shows beside the
idle shares), loops (the loops over nodes and edges, in C). The package itself imports none of them:
the CLI and the API read the options without loading the replay.

May import: tracekit.errors, tracekit.flags, tracekit.data, tracekit.parse, tracekit.analysis. Never a
later stage (render, export, orchestrate, api, commands).
"""
