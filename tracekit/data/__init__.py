"""Stage 1, the data model: what a capture is on disk and in memory.

schema (the declarative column list, SCHEMA_VERSION, the Parquet metadata), store (the `Capture` object,
atomic Parquet writing and reading, the version check), arrow (numpy ↔ Arrow buffers without pandas),
files (local paths and URIs — a `Location` — S3 and any filesystem pyarrow or fsspec knows; atomic writes to
object stores), summary (a capture's counts from row-group statistics, for `tracekit info`), describe
(the info document, `CaptureDescription`), pool (the forked worker processes that the parse's decode and
a job's per-rank tasks run in), signals (stop signals and the clean-up they owe).

May import: tracekit.errors only. Every later stage reads captures through this package.
"""
