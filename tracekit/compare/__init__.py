"""Stage 4, compare: captures compared figure by figure with the noise taken into account.

diff (pairwise diff of two reports: step time, throughput, utilisation, idle per cause, host gaps, op
time, each with its interval), group (several runs per side, run-to-run noise), stats (bootstrap and
interval arithmetic), comparable (what differs between captures that should not).

May import: tracekit.errors, tracekit.data, tracekit.analysis (its result model). Never render, export,
orchestrate or commands.
"""
