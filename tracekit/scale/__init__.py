"""Stage 8, scale: a whole job's ranks, parsed and analysed in worker processes (or Ray tasks).

executor (`Executor`: map a module-level function over items, results in order; `LocalExecutor`, a
process pool; `get_executor(ray)`), tasks (the per-rank work a worker runs: `parse_rank`,
`analyze_rank_task`), job (the driver: which files go to which task, the capture folder, merging the
per-rank results), ray_backend (`RayExecutor`: the same on a local Ray or a Ray cluster, `--ray`).

May import every earlier stage (errors, data, parse, analysis, ...). Never api or commands.
"""
