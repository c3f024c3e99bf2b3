"""Stage 3, analysis: pure functions from a capture's tables to a result model (`model.Report`).

    from tracekit.analysis.pipeline import analyze
    report = analyze(capture)            # capture: tracekit.data.store.Capture
    check_invariants(report)             # tracekit.analysis.invariants: raises when a rule is broken

Modules: pipeline (`analyze()`: the named steps), causes (the table of causes and host states: every
module reads it), calls (the runtime-call table), intervals (the algebra), events (table → frames), host
(thread states, host breakdown, dispatch gaps, op stats), attribution (rules 1-4), collective (rule 5),
launch (kernel statistics), loader (the unprofiled loader waits beside the trace), sync (sync sources,
the runtime calls that held the host), advice, invariants, model (the result objects every renderer
formats), store (`analyze --store`).

May import: tracekit.errors, tracekit.data, tracekit.parse (derive's shared definitions),
tracekit.capture.loader (the capture side's rule for a window that cannot show a loader stall). Never a later
stage (diff, whatif, render, export, orchestrate, commands).
"""
